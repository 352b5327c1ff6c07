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
