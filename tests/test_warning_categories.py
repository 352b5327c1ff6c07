"""Every warning the package raises is a KameleonWarning, so that users can filter ours by category.

A source check finds every ``warn(...)`` call in the package and asserts that its category is one of
ours (with a negative control on a snippet that raises a bare ``UserWarning``); a sampling run shows
that a real step warning has the category and that a category filter silences it.
"""

import ast
import pathlib
import warnings

import pymc as pm
import pytest

import pymc_kameleon
from pymc_kameleon import KameleonMetropolis, KameleonRuntimeWarning, KameleonWarning

PACKAGE = pathlib.Path(pymc_kameleon.__file__).parent
OUR_CATEGORIES = {"KameleonWarning", "KameleonRuntimeWarning"}
# Helpers that pass on a category their caller chose (each caller's category is checked at its call).
FORWARDED = {"category"}
# ``warnings.warn`` and StepWarnings' ``warn``; ``_warn`` is the GP training schedule's callback to them.
WARN_CALLS = {"warn", "_warn"}


def _warn_calls_with_foreign_categories(source: str, filename: str = "<snippet>") -> list[str]:
    """Each ``warn(...)`` call in ``source`` whose category is neither ours nor a forwarded name."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name not in WARN_CALLS:
            continue
        category = node.args[1] if len(node.args) > 1 else None
        category = next((k.value for k in node.keywords if k.arg == "category"), category)
        text = ast.unparse(category) if category is not None else "no category (UserWarning)"
        if text not in OUR_CATEGORIES | FORWARDED:
            found.append(f"{filename}:{node.lineno}: {ast.unparse(node.func)}(..., {text})")
    return found


def test_every_warning_the_package_raises_has_our_category():
    foreign = []
    for path in sorted(PACKAGE.rglob("*.py")):
        foreign += _warn_calls_with_foreign_categories(path.read_text(), str(path.relative_to(PACKAGE)))
    assert not foreign, "warnings without a Kameleon category:\n" + "\n".join(foreign)


@pytest.mark.parametrize(
    "snippet",
    [
        'import warnings\nwarnings.warn("x", UserWarning)',
        'import warnings\nwarnings.warn("x")',
        'self._warnings.warn("x", category=RuntimeWarning, stacklevel=2)',
        'self._warn("a duplicated point", RuntimeWarning, 4)',
    ],
)
def test_negative_control_the_source_check_finds_a_foreign_category(snippet):
    assert len(_warn_calls_with_foreign_categories(snippet)) == 1


def test_the_categories_are_also_pythons():
    """Filters written for UserWarning or RuntimeWarning before the categories existed still match."""
    assert issubclass(KameleonWarning, UserWarning)
    assert issubclass(KameleonRuntimeWarning, KameleonWarning)
    assert issubclass(KameleonRuntimeWarning, RuntimeWarning)


def _sample_briefly():
    """A run whose 100 tuning steps are too few: the step warns at the end of tuning."""
    with pm.Model():
        pm.Normal("x", 0.0, 1.0, shape=2)
        pm.sample(
            step=KameleonMetropolis(), tune=100, draws=20, chains=1, cores=1, random_seed=3,
            progressbar=False, compute_convergence_checks=False,
        )


def test_a_step_warning_is_ours_and_a_category_filter_silences_it():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _sample_briefly()
    ours = [w for w in caught if str(w.message).startswith("KameleonMetropolis:")]
    assert ours and all(issubclass(w.category, KameleonWarning) for w in ours)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=KameleonWarning)
        _sample_briefly()
    assert not [w for w in caught if str(w.message).startswith("KameleonMetropolis:")]


@pytest.mark.parametrize("tuning, cores", [("pooled", 1), ("per_chain", 2)])
def test_a_step_warning_names_the_users_line_not_pymcs(tuning, cores):
    """Raised in the session (pooled, cores=1) or carried from PyMC's worker processes (per chain, cores=2),
    a step's warning names the frame that called pm.sample: this file (a new user's pointed at
    pymc/step_methods/arraystep.py)."""
    with pm.Model():
        x = pm.Normal("x", 0.0, 1.0, shape=2)
        pm.Normal("y", x.sum(), 1.0, observed=[0.3])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pm.sample(draws=20, tune=20, chains=2, cores=cores, step=KameleonMetropolis(tuning=tuning),
                      random_seed=1, progressbar=False, compute_convergence_checks=False)
    ours = [w for w in caught if str(w.message).startswith("KameleonMetropolis:")]
    assert ours and all(w.filename == __file__ for w in ours), [(w.filename, w.lineno) for w in ours]
