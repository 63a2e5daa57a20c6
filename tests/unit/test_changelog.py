"""CHANGELOG.md (Keep a Changelog) and the package agree: the version has a dated entry,
*Unreleased* comes first, every version links to its tag, and the package metadata, the
docs and the README name one project address (issue 40)."""

from __future__ import annotations

import configparser
import re
from datetime import date
from pathlib import Path

import pytest
import yaml

import operator_kit

ROOT = Path(__file__).resolve().parents[2]
CHANGELOG = (ROOT / "CHANGELOG.md").read_text()
ADDRESS = "https://github.com/operator-kit/operator_kit"
ENTRY = re.compile(r"^## \[(?P<version>[^\]]+)\](?: - (?P<date>\d{4}-\d{2}-\d{2}))?$",
                   re.MULTILINE)
KINDS = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}


def entries(text: str) -> dict[str, str | None]:
    """Each version heading in order: version -> its date (None for Unreleased)."""
    return {m["version"]: m["date"] for m in ENTRY.finditer(text)}


def missing_entry(text: str, version: str) -> str | None:
    """Why `text` has no released entry for `version`, or None when it has one."""
    found = entries(text)
    if version not in found:
        return (f"CHANGELOG.md has no entry for {version}: rename [Unreleased] to "
                f"'## [{version}] - YYYY-MM-DD' (CONTRIBUTING.md, Releasing)")
    if not found[version]:
        return f"CHANGELOG.md's entry for {version} has no date"
    return None


def release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def test_the_package_version_has_a_dated_changelog_entry() -> None:
    assert missing_entry(CHANGELOG, operator_kit.__version__) is None, \
        missing_entry(CHANGELOG, operator_kit.__version__)


def test_the_check_fails_for_a_version_without_an_entry() -> None:
    text = "# Changelog\n\n## [Unreleased]\n\n## [0.1.0] - 2026-12-06\n"
    assert missing_entry(text, "0.1.0") is None
    assert "no entry for 0.2.0" in str(missing_entry(text, "0.2.0"))
    assert "no date" in str(missing_entry("## [0.2.0]\n", "0.2.0"))


def test_unreleased_comes_first_then_releases_newest_first_each_dated() -> None:
    found = entries(CHANGELOG)
    versions = list(found)
    assert versions[0] == "Unreleased"
    released = versions[1:]
    assert released == sorted(released, key=release, reverse=True)
    for version in released:
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), version
        day = found[version]
        assert day is not None
        date.fromisoformat(day)


def test_every_entry_links_to_its_tag_or_comparison() -> None:
    for version in entries(CHANGELOG):
        link = re.search(rf"^\[{re.escape(version)}\]: (\S+)$", CHANGELOG, re.MULTILINE)
        assert link, f"no link reference for [{version}] at the end of CHANGELOG.md"
        assert link[1].startswith(ADDRESS + "/")


def test_changes_are_grouped_by_keep_a_changelog_kinds() -> None:
    kinds = set(re.findall(r"^### (.+)$", CHANGELOG, re.MULTILINE))
    assert kinds and kinds <= KINDS, kinds - KINDS


def project_urls() -> dict[str, str]:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    lines = config["metadata"]["project_urls"].strip().splitlines()
    return dict(line.split(" = ", 1) for line in lines if line.strip())


def test_the_metadata_names_the_docs_project_address_and_this_changelog() -> None:
    urls = project_urls()
    repo_url = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["repo_url"]
    assert repo_url == ADDRESS
    assert all(url == ADDRESS or url.startswith(ADDRESS + "/") for url in urls.values()), urls
    assert urls["Changelog"] == f"{ADDRESS}/blob/main/CHANGELOG.md"


@pytest.mark.parametrize("path", ["README.md", "CHANGELOG.md", "CONTRIBUTING.md", "docs",
                                  "operator_kit/new/templates"])
def test_no_other_project_address_is_named(path: str) -> None:
    files = [ROOT / path] if (ROOT / path).is_file() else sorted((ROOT / path).rglob("*"))
    other = re.compile(r"https?://(?:github\.com/[^/\s]+/operator_kit|[^/\s]*a-seed[^/\s]*)")
    for file in files:
        if file.is_file():
            for found in other.findall(file.read_text(errors="replace")):
                assert found == ADDRESS, f"{file.relative_to(ROOT)} names {found}"
