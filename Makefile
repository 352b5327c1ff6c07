# Every target sets itself up from a fresh machine: it creates a virtualenv and installs the package.
PYTHON    ?= python3
VENV      ?= .venv
PY        := $(VENV)/bin/python
# PyMC 6 / ArviZ 1 run on Python >= 3.12 (found on PATH or through pyenv).
# (pyenv's shim on PATH may exist without working, so each candidate is tried.)
PYTHON312 ?= $(shell for p in $$(command -v python3.12 2>/dev/null) $$HOME/.pyenv/versions/3.12*/bin/python3.12; do \
                "$$p" -c 'import sys; assert sys.version_info[:2] == (3, 12)' >/dev/null 2>&1 && echo "$$p" && break; done)
VENV312   ?= .venv312
PY312     := $(VENV312)/bin/python
# The 15 slowest tests are listed, so that CI time stays visible (keep `.ci/run` under 25 minutes).
PYTEST_ARGS ?= --durations=15
# Small dense linear algebra (GP surrogates, the Glass estimator) is many times slower with
# multi-threaded BLAS on a small, busy machine; sampling runs one process per chain anyway.
export OPENBLAS_NUM_THREADS ?= 1
export OMP_NUM_THREADS ?= 1
export MKL_NUM_THREADS ?= 1
PYTEST6_ARGS ?=

.PHONY: demo dist docs lint test test-fast test-pymc5 test-pymc6 benchmark benchmark-quick benchmark-kameleon notebooks clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,distributed]' 'pymc>=5.28,<6' 'arviz<1'
	touch $@

$(VENV312)/.installed: pyproject.toml
	@test -n "$(PYTHON312)" || (echo "python3.12 not found: install it (e.g. pyenv install 3.12) or set PYTHON312=..." && exit 1)
	$(PYTHON312) -m venv $(VENV312)
	$(PY312) -m pip install -q --upgrade pip
	$(PY312) -m pip install -q -e '.[test,distributed]' 'pymc>=6' 'arviz>=1'
	touch $@

# The documentation's tools go into the PyMC 5 venv, with a stamp of their own (`make test` needs them too,
# since it builds the site, but a venv made for `make demo` does not).
$(VENV)/.docs-installed: $(VENV)/.installed pyproject.toml
	$(PY) -m pip install -q -e '.[docs]'
	touch $@

## demo: sample the 8-d banana with KameleonMetropolis, pm.Metropolis and KameleonMetropolis(start='smc'), print ArviZ summaries and quantile errors
demo: $(VENV)/.installed
	$(PY) examples/demo.py

## test: ruff check, `make dist` and `make docs`, then the suite on PyMC 5 / Python 3.11 and on PyMC 6 / ArviZ 1 /
##       Python 3.12, the two stacks side by side (each prints when done). Every test runs; the slow
##       statistical tests and the notebooks are shared between the stacks, each on one (tests/conftest.py),
##       the others run on both
test: lint dist docs
	$(MAKE) --no-print-directory -j2 --output-sync=target test-pymc5 test-pymc6 SLOW_SHARED=1

## lint: ruff check (rules in pyproject.toml); `make test` runs it first
lint: $(VENV)/.installed
	$(PY) -m ruff check .

## dist: build the sdist and the wheel into a temporary directory (removed afterwards) and check them with
##       `twine check --strict`; fails on a setuptools deprecation warning about our metadata (seconds)
dist: $(VENV)/.installed
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	if ! $(PY) -m build --outdir "$$tmp" . >"$$tmp/build.log" 2>&1; then cat "$$tmp/build.log"; exit 1; fi && \
	if grep -i -B2 -A8 "deprecat" "$$tmp/build.log"; then echo "dist: the build warned (above)"; exit 1; fi && \
	$(PY) -m twine check --strict "$$tmp"/*.tar.gz "$$tmp"/*.whl

## docs: build the documentation site into docs/_build/html (open docs/_build/html/index.html), from
##       scratch, with every warning an error (under a minute). The notebooks are rendered from their saved
##       outputs, not executed (`make notebooks` executes them); the API pages come from the docstrings
DOCS_ARGS ?= -E -W --keep-going -n -j 2
docs: $(VENV)/.docs-installed
	rm -rf docs/api/generated
	$(PY) -m sphinx -b html -q $(DOCS_ARGS) docs docs/_build/html
	@echo "docs: docs/_build/html/index.html"

## test-fast: ruff check, then the tests that sample nothing, on PyMC 5 (1-1.5 minutes): the NumPy
##            core, the problems, the metrics and the benchmarks' exact references
FAST_TESTS := tests/core tests/problems tests/test_metrics.py tests/test_benchmarks.py
test-fast: $(VENV)/.installed lint
	$(PY) -m pytest -q -m "not slow" $(FAST_TESTS)

## test-pymc5, test-pymc6: the whole suite, slow tests included, on one stack
test-pymc5: $(VENV)/.installed lint
	$(PY) -m pytest -q $(if $(SLOW_SHARED),--slow-share=pymc5) $(PYTEST_ARGS)

test-pymc6: $(VENV312)/.installed lint
	$(PY312) -m pytest -q $(if $(SLOW_SHARED),--slow-share=pymc6) $(PYTEST6_ARGS) $(PYTEST_ARGS)

BENCHMARKS := kameleon_nonlinear_targets pseudo_marginal_gp_glass gp_delayed_acceptance_table1 kass_smc \
              correlated_pseudo_marginal scale_out

## benchmark: every benchmark, full budget (about 2 h 30 min; tables to stdout; see benchmarks/README.md)
benchmark: $(VENV)/.installed
	for b in $(BENCHMARKS); do $(PY) benchmarks/$$b.py || exit 1; done

## benchmark-quick: every benchmark's --quick smoke test (a few minutes)
benchmark-quick: $(VENV)/.installed
	for b in $(BENCHMARKS); do $(PY) benchmarks/$$b.py --quick || exit 1; done

## benchmark-kameleon: the KAMH comparison with PyMC's samplers (about 35 min)
benchmark-kameleon: $(VENV)/.installed
	$(PY) benchmarks/kameleon_nonlinear_targets.py

## notebooks: execute the notebooks in place, saving outputs and plots
notebooks: $(VENV)/.installed
	$(PY) -m pip install -q nbconvert
	for nb in notebooks/*.ipynb; do $(PY) -m jupyter nbconvert --to notebook --execute --inplace $$nb; done

clean:
	rm -rf $(VENV) $(VENV312) .pytest_cache build dist *.egg-info docs/_build docs/api/generated docs/notebooks/*.ipynb
