"""Sphinx configuration of the pymc-kameleon documentation site.

Build it with ``make docs`` (into ``docs/_build/html``). The notebooks in ``notebooks/`` are rendered
from their saved outputs, never executed here (``make notebooks`` executes them): at every build they
are copied to ``docs/notebooks/`` (git-ignored), each with a note naming the command that made its
figures. The API reference is generated from the docstrings; :func:`_check_api_complete` fails the
build when a name in a public module's ``__all__`` has no page.
"""

import importlib
import importlib.util
import inspect
import json
import os
import re
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))  # the package of this checkout, even without an install

import pymc_kameleon  # noqa: E402

project = "pymc-kameleon"
author = "pymc-kameleon contributors"
copyright = "pymc-kameleon contributors"
release = pymc_kameleon.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "myst_nb",
    "sphinx_copybutton",
    "sphinx_design",
]

exclude_patterns = ["_build", "**.ipynb_checkpoints", "Thumbs.db", ".DS_Store"]
templates_path = ["_templates"]
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}

# -- the notebooks: rendered from their saved outputs ------------------------------------------------
nb_execution_mode = "off"
nb_merge_streams = True
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3

NOTEBOOK_SOURCE = ROOT / "notebooks"
NOTEBOOK_COPIES = DOCS / "notebooks"


def _note_cell(name: str) -> dict:
    text = (
        ":::{note}\n"
        f"This page shows `notebooks/{name}` as it was last executed, with its saved outputs: the "
        "documentation build does not run it. Every figure on the page is made by the notebook's own "
        "cells: `make notebooks` re-executes the notebooks in place with their full budgets (the test "
        "suite runs them with a smoke-test budget, `KAMELEON_NOTEBOOK_FAST=1`, and saves nothing).\n"
        ":::"
    )
    return {"cell_type": "markdown", "metadata": {}, "source": text}


def _copy_notebooks() -> None:
    """Copy ``notebooks/*.ipynb`` into the source tree, a note after each title cell.

    A copy is rewritten only when it changes, so incremental builds stay incremental.
    """
    NOTEBOOK_COPIES.mkdir(exist_ok=True)
    wanted = set()
    for source in sorted(NOTEBOOK_SOURCE.glob("*.ipynb")):
        nb = json.loads(source.read_text(encoding="utf-8"))
        note = _note_cell(source.name)
        if (nb["nbformat"], nb["nbformat_minor"]) >= (4, 5):  # cells have ids from nbformat 4.5 on
            note["id"] = "docs-build-note"
        nb["cells"].insert(1, note)
        wanted.add(source.name)
        _write_if_changed(NOTEBOOK_COPIES / source.name, json.dumps(nb, ensure_ascii=False, indent=1) + "\n")
    _remove_stale(NOTEBOOK_COPIES, "*.ipynb", wanted)


def _write_if_changed(target: Path, text: str) -> None:
    """Write a copy only when it changes, so incremental builds stay incremental."""
    if not target.exists() or target.read_text(encoding="utf-8") != text:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")


def _remove_stale(directory: Path, pattern: str, wanted: set) -> None:
    """Delete the copies whose source is gone."""
    for stale in directory.glob(pattern):
        if stale.name not in wanted:
            stale.unlink()


_copy_notebooks()

# -- the benchmark results: copies in the source tree, links that work on the site and on GitHub -----
BENCHMARKS = ROOT / "benchmarks"
BENCHMARK_COPIES = DOCS / "benchmarks"


def _benchmark_page(source: Path) -> str:
    """A benchmark file's text as a page: a script's raw output starts with "# command", "# versions"
    comment lines, which Markdown reads as top-level headings, so they are shown as text under a title."""
    text = source.read_text(encoding="utf-8")
    if source.suffix == ".md" and re.match(r"# (pymc \d|command:)", text):
        lines = text.splitlines()
        n = next((i for i, line in enumerate(lines) if not line.startswith("# ")), len(lines))
        header = "\n".join(line[2:] for line in lines[:n])
        text = f"# Full output: {source.stem}\n\n```text\n{header}\n```\n" + "\n".join(lines[n:]) + "\n"
    return text


def _copy_benchmark_results() -> None:
    """Copy ``benchmarks/RESULTS.md`` and ``benchmarks/results/*`` into ``docs/benchmarks/`` (git-ignored),
    so that RESULTS.md's links to each experiment's full output are links between pages (or downloads)."""
    _write_if_changed(BENCHMARK_COPIES / "RESULTS.md", _benchmark_page(BENCHMARKS / "RESULTS.md"))
    wanted = set()
    for source in sorted((BENCHMARKS / "results").glob("*.*")):  # outputs (.md) and raw logs or JSON
        wanted.add(source.name)
        _write_if_changed(BENCHMARK_COPIES / "results" / source.name, _benchmark_page(source))
    _remove_stale(BENCHMARK_COPIES / "results", "*.*", wanted)


_copy_benchmark_results()

_LOCAL_LINK = re.compile(r"\]\((?![a-z]+:|#)([^)\s#]+)(#[^)\s]*)?\)")


def _site_path(path: Path) -> Path:
    """Where a repository file is on the site: ``benchmarks/README.md`` is the benchmarks page,
    ``benchmarks/...`` the copies, anything else itself."""
    if path == BENCHMARKS / "README.md":
        return BENCHMARK_COPIES / "index.md"
    if path.is_relative_to(BENCHMARKS):
        return BENCHMARK_COPIES / path.relative_to(BENCHMARKS)
    return path


def _links_as_in_the_repository(app, docname, source) -> None:
    """Relative links are written for the repository (GitHub, an editor); rewrite each so that it
    reaches the same file's page on the site (copies included)."""
    page = DOCS / docname
    original = page
    if page.is_relative_to(BENCHMARK_COPIES) and page.name != "index":
        original = BENCHMARKS / page.relative_to(BENCHMARK_COPIES)

    def relink(match):
        target = (original.parent / match.group(1)).resolve()
        if not target.exists():
            return match.group(0)  # Sphinx reports it
        new = os.path.relpath(_site_path(target), page.parent)
        return f"]({new}{match.group(2) or ''})"

    source[0] = _LOCAL_LINK.sub(relink, source[0])

# -- the API reference --------------------------------------------------------------------------------
autosummary_generate = True
autosummary_imported_members = True
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented_params"
autodoc_default_options = {"show-inheritance": True}
autoclass_content = "class"
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
# Parameter types as plain text (no cross-references: "(n, d) array" is no class name)
napoleon_use_param = False
napoleon_use_ivar = False

# The public modules; each name in their ``__all__`` must be documented (under some public name).
PUBLIC_MODULES = [
    "pymc_kameleon",
    "pymc_kameleon.steps",
    "pymc_kameleon.steps.delayed_acceptance",
    "pymc_kameleon.smc",
    "pymc_kameleon.pseudo_marginal",
    "pymc_kameleon.executors",
    "pymc_kameleon.distributed",
    "pymc_kameleon.plots",
    "pymc_kameleon.problems",
    "pymc_kameleon.problems.table1",
    "pymc_kameleon.problems.real_posteriors",
    "pymc_kameleon.metrics",
    "pymc_kameleon.core",
    "pymc_kameleon.testing",
]

# There is no network at build time (no intersphinx): references to other projects' types stay text.
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(np|numpy|scipy|pm|pymc|pt|pytensor|az|arviz|xr|xarray|dask|distributed|matplotlib"
               r"|concurrent|collections|typing|abc|cloudpickle|threadpoolctl|mpi4py)(\..*)?"),
    # prose in the types of attributes and returns: "array of shape (n, d)", "int array", "S x 2"
    (r"py:class", r"[a-z_]+|[A-Z]|[0-9]+|.* .*"),
    # the arguments of PyTensor's ``Op.perform``, in the docstrings our Ops inherit
    (r"py:(attr|meth)", r"node\.(inputs|outputs)|Op\.perform"),
    (r"py:class", r"(int|float|str|bool|bytes|dict|list|tuple|set|object|callable|Callable|Sequence"
                  r"|Mapping|Iterable|Iterator|Generator|Any|Path|optional|default.*|array.like|array"
                  r"|ndarray|RandomGenerator|Executor|Future|Model|TensorVariable|InferenceData"
                  r"|Dataset|DataArray|Axes|Figure|None|type|Exception|RuntimeError|ValueError"
                  r"|UserWarning|function|NamedTuple|slice)"),
]

# -- HTML ---------------------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"pymc-kameleon {release}"
html_static_path = ["_static"]
html_css_files = ["custom.css"]
html_show_sourcelink = False
html_copy_source = False  # the notebooks would be copied a second time
html_theme_options = {
    "navbar_align": "left",
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "header_links_before_dropdown": 6,
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
    "secondary_sidebar_items": ["page-toc"],
}
html_context = {"default_mode": "light"}


def _documented_objects(env) -> dict[int, str]:
    """The Python objects that have a page or entry, by id, with the name they are documented under."""
    found = {}
    for fullname, obj_entry in env.domains["py"].objects.items():
        if obj_entry.objtype == "module":
            continue
        modname, _, attr = fullname.rpartition(".")
        for split in range(fullname.count("."), 0, -1):
            modname = ".".join(fullname.split(".")[:split])
            attr_path = fullname.split(".")[split:]
            try:
                obj = importlib.import_module(modname)
            except ImportError:
                continue
            try:
                for part in attr_path:
                    obj = getattr(obj, part)
            except AttributeError:
                break
            found.setdefault(id(obj), fullname)
            break
    return found


def _check_api_complete(app, env) -> None:
    from sphinx.util import logging

    logger = logging.getLogger(__name__)
    documented = _documented_objects(env)
    documented_names = set(env.domains["py"].objects)
    for modname in PUBLIC_MODULES:
        module = importlib.import_module(modname)
        for name in module.__all__:
            obj = getattr(module, name)
            full = f"{modname}.{name}"
            # Constants (numbers, strings, tuples) are compared by name, objects by identity.
            if full in documented_names:
                continue
            if not isinstance(obj, (int, float, str, tuple)) and id(obj) in documented:
                continue
            logger.warning(
                "API reference: %s is public (in %s.__all__) but documented nowhere; add it to docs/api/",
                full,
                modname,
            )


def _import_name(name: str):
    """The object a dotted name imports to, or ``_MISSING``."""
    parts = name.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        try:
            for part in parts[split:]:
                obj = getattr(obj, part)
        except AttributeError:
            return _MISSING
        return obj
    return _MISSING


_MISSING = object()
_documented_cache: dict = {}


def _resolve_by_object(app, env, node, contnode):
    """Resolve a Python cross-reference that Sphinx could not by what the name imports to.

    A docstring refers to an object by the name it has where the docstring is (``log_mean_exp`` in
    :mod:`pymc_kameleon.pseudo_marginal`), the reference documents it once (as
    ``pymc_kameleon.log_mean_exp``): the link goes there. A name that imports to an object of this
    package without a page of its own (a private helper of an internal module) stays code text. A name
    that imports to nothing, a typo or a renamed object, stays a warning, which fails the build.
    """
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"].lstrip(".~")
    objects = env.domains["py"].objects
    if _documented_cache.get("size") != len(objects):
        _documented_cache.update(size=len(objects), ids=_documented_objects(env))
    documented = _documented_cache["ids"]
    module = node.get("py:module") or ""
    cls = node.get("py:class")
    prefixes = []
    if module and cls:
        prefixes.append(f"{module}.{cls}")
    parts = module.split(".") if module else []
    prefixes += [".".join(parts[:i]) for i in range(len(parts), 0, -1)]
    prefixes += ["pymc_kameleon", ""]
    names = [f"{prefix}.{target}" if prefix else target for prefix in prefixes]
    # then wherever in the package the name is defined: ``value_space_draws`` from the top-level
    # package, a method ``add`` of a class of the module the docstring is in
    for modname, mod in sorted(sys.modules.items()):
        if modname.startswith("pymc_kameleon") and mod is not None:
            names.append(f"{modname}.{target}")
            names += [f"{modname}.{cls}.{target}" for cls, value in vars(mod).items()
                      if isinstance(value, type) and modname == module and not cls.startswith("_")]
    for name in names:
        if not name.startswith("pymc_kameleon"):
            continue
        obj = _import_name(name)
        if obj is _MISSING:
            continue
        documented_as = documented.get(id(obj))
        if documented_as is not None:
            return env.domains["py"].resolve_xref(
                env, node["refdoc"], app.builder, "obj", documented_as, node, contnode
            )
        return contnode
    return None


def _constant_docstring(app, what, name, obj, options, lines) -> None:
    """A constant's doc is its ``#:`` comment where it is defined, not the docstring of its type.

    autodoc reads ``#:`` comments in the module it documents the constant in, which for a re-exported
    constant (``pymc_kameleon.problems.DEFAULT_QUANTILES``) is not the module that defines it.
    """
    if what != "data":
        return
    from sphinx.pycode import ModuleAnalyzer

    attr = name.rpartition(".")[2]
    for modname, module in sorted(sys.modules.items()):
        if not modname.startswith("pymc_kameleon") or getattr(module, attr, _MISSING) is not obj:
            continue
        try:
            docs = ModuleAnalyzer.for_module(modname).find_attr_docs()
        except Exception:  # noqa: BLE001 - no source: try the next module
            continue
        if ("", attr) in docs:
            lines[:] = [line for line in docs[("", attr)]]
            return
    if "\n".join(lines).strip() == inspect.cleandoc(type(obj).__doc__ or "").strip():
        lines[:] = []


def _class_signature(app, what, name, obj, options, signature, return_annotation):
    """A step's signature as Python reports it: autodoc reads PyMC's ``BlockedStep.__new__(cls, *args,
    **kwargs)`` first, which hid every parameter and default of the steps (a newcomer's report)."""
    if what != "class" or not name.startswith("pymc_kameleon") or signature != "(*args, **kwargs)":
        return None
    try:
        return str(inspect.signature(obj)), return_annotation
    except (TypeError, ValueError):
        return None


def _copy_mathjax(app, exception) -> None:
    """Serve MathJax from the site (the copy in the ``sphinx-mathjax-offline`` package), so formulas
    render without a network, from ``file://`` too."""
    if exception is not None or app.builder.format != "html":
        return
    from sphinx.util.fileutil import copy_asset

    source = Path(importlib.util.find_spec("sphinx-mathjax-offline").origin).parent / "static" / "mathjax"
    copy_asset(source, Path(app.outdir) / "_static" / "mathjax")


mathjax_path = "mathjax/tex-chtml.js"


def _decision_records(app, docname, source) -> None:
    """List the decision records (``docs/decisions/*``) in development.md's table of contents when
    there are any (a glob that matches nothing is a warning, which no setting silences)."""
    if docname == "development" and any((DOCS / "decisions").glob("*.md")):
        source[0] = source[0].replace("\ndesign\n```", "\ndesign\ndecisions/*\n```")


def setup(app):
    app.connect("source-read", _decision_records)
    app.connect("source-read", _links_as_in_the_repository)
    app.connect("env-check-consistency", _check_api_complete)
    app.connect("missing-reference", _resolve_by_object)
    app.connect("build-finished", _copy_mathjax)
    app.connect("autodoc-process-docstring", _constant_docstring)
    app.connect("autodoc-process-signature", _class_signature)
