"""The installed distribution's metadata: one version, the license, the Pythons supported."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import operator_kit

ROOT = Path(__file__).resolve().parents[2]


def test_the_installed_version_is_operator_kit_version() -> None:
    assert importlib.metadata.version("operator_kit") == operator_kit.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+(\.dev\d+|(a|b|rc)\d+)?", operator_kit.__version__)


def test_the_version_is_written_once_in_the_package_and_read_from_it() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^dynamic = \["version"\]', pyproject, re.M)
    assert re.search(r'^version = \{ attr = "operator_kit._version.__version__" \}',
                     pyproject, re.M)
    project = pyproject.split("[project]", 1)[1].split("\n[", 1)[0]
    assert not re.search(r"^version\s*=", project, re.M), "no second version in [project]"
    assert not (ROOT / "setup.cfg").exists(), "the metadata lives in pyproject.toml alone"


def test_license_is_apache_2_in_the_pep_639_form_and_shipped() -> None:
    meta = importlib.metadata.metadata("operator_kit")
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta.get_all("License-File") == ["LICENSE"]
    assert not [c for c in meta.get_all("Classifier") or [] if c.startswith("License ::")]
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text


def test_classifiers_name_each_supported_python_and_requires_python_agrees() -> None:
    meta = importlib.metadata.metadata("operator_kit")
    pythons = sorted(
        c.rsplit(" ", 1)[1]
        for c in meta.get_all("Classifier") or []
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    )
    assert pythons == ["3.10", "3.11", "3.12", "3.13"]
    assert meta["Requires-Python"] == ">=3.10"


def test_project_urls_are_declared() -> None:
    declared = importlib.metadata.metadata("operator_kit").get_all("Project-URL") or []
    urls = dict(u.split(", ", 1) for u in declared)
    assert {"Homepage", "Documentation", "Source", "Issues"} <= set(urls)
    assert all(u.startswith("https://") for u in urls.values())
