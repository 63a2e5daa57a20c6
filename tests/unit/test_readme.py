"""README.md is a landing page (issue 40): short, the two commands, an operator that
imports what exists, and every link to a file of the repository resolving.

What used to be in it lives in docs/, whose links the strict docs build checks;
tests/cluster/test_readme.py runs the README's operator against a real API server.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
LINK = re.compile(r"\]\(([^)\s]+)\)")


def readme_python_block() -> str:
    blocks = re.findall(r"^```python\n(.*?)^```", README, re.MULTILINE | re.DOTALL)
    assert len(blocks) == 1, "the README has one Python block: its operator"
    return str(blocks[0])


def test_the_readme_is_a_landing_page_of_at_most_250_lines() -> None:
    lines = README.count("\n")
    assert lines <= 250, f"README.md has {lines} lines: move sections to docs/ (at most 250)"


def test_the_readme_gives_the_two_commands() -> None:
    for command in ("bash ci/demo.sh", "bash ci/test.sh"):
        assert re.search(rf"^{re.escape(command)}\b", README, re.MULTILINE), command


def test_the_readme_leads_to_the_starter_the_changelog_and_the_stability_policy() -> None:
    for target in ("docs/how-to/starter.md", "CHANGELOG.md", "docs/stability.md"):
        assert f"]({target}" in README, target


def test_every_relative_link_in_the_readme_names_a_file_and_heading_that_exist() -> None:
    broken = []
    for target in LINK.findall(README):
        if target.startswith(("http://", "https://", "#")):
            continue
        path, _, anchor = target.partition("#")
        if not (ROOT / path).exists():
            broken.append(target)
        elif anchor and anchor not in headings(ROOT / path):
            broken.append(target)
    assert not broken, f"README.md links to what does not exist: {broken}"


def headings(page: Path) -> set[str]:
    """The anchors mkdocs' toc extension makes of a page's headings."""
    anchors = set()
    for title in re.findall(r"^#+ (.+)$", page.read_text(), re.MULTILINE):
        slug = re.sub(r"[^\w\s-]", "", title.lower()).strip()
        anchors.add(re.sub(r"[\s]+", "-", slug))
    return anchors


def test_the_link_check_sees_a_missing_heading() -> None:
    assert "the-projects-two-commands" in headings(ROOT / "docs" / "index.md")
    assert "no-such-heading" not in headings(ROOT / "docs" / "index.md")


def test_the_readme_operator_parses_and_imports_only_what_operator_kit_has() -> None:
    tree = ast.parse(readme_python_block())
    imported = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("operator_kit"):
            module = importlib.import_module(node.module or "")
            for alias in node.names:
                assert hasattr(module, alias.name), f"{node.module} has no {alias.name}"
                imported += 1
    assert imported >= 4


def test_the_readme_operator_is_about_ten_lines_of_code() -> None:
    code = [line for line in readme_python_block().splitlines()
            if line.strip() and not line.startswith(("from ", "import ", "if __name__",
                                                     "    raise SystemExit"))]
    assert len(code) <= 20, f"{len(code)} lines: the landing page's operator stays short"
