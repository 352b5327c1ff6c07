"""Release metadata agrees with itself: the package's version, pyproject's and the changelog's."""

import re
import tomllib
from pathlib import Path

import pymc_kameleon

ROOT = Path(__file__).resolve().parents[1]


def test_versions_agree_and_the_changelog_has_the_release():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    version = project["version"]
    assert pymc_kameleon.__version__ == version
    changelog = (ROOT / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## \[([^\]]+)\]", changelog, flags=re.MULTILINE)
    assert releases[:2] == ["Unreleased", version]  # the newest release is pyproject's version


def test_the_license_is_an_spdx_expression_with_its_file():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")


def test_the_dependencies_bound_the_stacks_we_test():
    """PyMC's internals the steps use (population sampling, blocking) may change in a major release: the
    package admits PyMC 5 and 6, ArviZ 0.x and 1, the stacks CI runs; and saving results (the guides'
    idata.to_netcdf) works on ArviZ 1, which brings no netCDF library (a new user's SMC example failed)."""
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    required = {Requirement(r).name: Requirement(r).specifier for r in project["dependencies"]}
    assert all(v in required["pymc"] for v in ("5.28.5", "6.4.0")) and "7.0" not in required["pymc"]
    assert all(v in required["arviz"] for v in ("0.23.4", "1.3.0")) and "2.0" not in required["arviz"]
    assert "h5netcdf" in required
    assert "Programming Language :: Python :: 3.12" in project["classifiers"]


def test_the_citation_file_names_this_version():
    citation = (ROOT / "CITATION.cff").read_text()
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert re.search(rf'^version: "{re.escape(version)}"$', citation, flags=re.MULTILINE)
    assert "Kernel Adaptive Metropolis-Hastings" in citation


def test_each_release_of_the_changelog_has_each_kind_of_change_once():
    """Keep a Changelog: one Added, one Changed, one Fixed... per release (the Unreleased section had grown
    three of each, appended session by session)."""
    changelog = (ROOT / "CHANGELOG.md").read_text()
    for release in re.split(r"^## ", changelog, flags=re.MULTILINE)[1:]:
        kinds = re.findall(r"^### (.+)$", release, flags=re.MULTILINE)
        assert len(kinds) == len(set(kinds)), (release.splitlines()[0], kinds)


def test_read_the_docs_builds_the_site_as_make_docs_does():
    """The site's hosted build: docs/conf.py with every warning an error, installed with the docs extra,
    on a Python the package supports."""
    import yaml

    config = yaml.safe_load((ROOT / ".readthedocs.yaml").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert config["version"] == 2
    assert config["sphinx"] == {"configuration": "docs/conf.py", "fail_on_warning": True}
    assert (ROOT / config["sphinx"]["configuration"]).is_file()
    (install,) = config["python"]["install"]
    assert install["method"] == "pip" and install["path"] == "."
    assert set(install["extra_requirements"]) <= set(project["optional-dependencies"])
    python = config["build"]["tools"]["python"]
    assert f"Programming Language :: Python :: {python}" in project["classifiers"]
