"""The documentation's code matches the code: every Python block on the site parses, and
every name it imports from operator_kit exists.

(The tutorial's code is included from samples/cronjob, which has tests of its own;
``mkdocs build --strict`` in CI fails on a snippet, API reference or link that does not
resolve.)
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import textwrap
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def python_blocks() -> list[tuple[str, str]]:
    blocks = []
    for page in sorted(DOCS.rglob("*.md")):
        for n, match in enumerate(BLOCK.finditer(page.read_text()), 1):
            code = match.group(1)
            if not code.lstrip().startswith("--8<--"):  # included from a tested file
                blocks.append((f"{page.relative_to(DOCS)}#{n}", textwrap.dedent(code)))
    return blocks


BLOCKS = python_blocks()


def test_the_pages_have_python_blocks() -> None:
    assert len(BLOCKS) >= 20, [name for name, _ in BLOCKS]


@pytest.mark.parametrize(("name", "code"), BLOCKS, ids=[name for name, _ in BLOCKS])
def test_python_block_parses_and_its_operator_kit_imports_exist(name: str, code: str) -> None:
    try:
        tree = ast.parse(code)
    except SyntaxError as err:
        raise AssertionError(f"docs/{name} does not parse: {err}") from err
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("operator_kit"):
            module = importlib.import_module(node.module or "")
            for alias in node.names:  # a name, or a submodule (imported when asked for)
                assert hasattr(module, alias.name) or importlib.util.find_spec(
                    f"{node.module}.{alias.name}") is not None, (
                    f"docs/{name}: {node.module} has no {alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("operator_kit"):
                    importlib.import_module(alias.name)


def test_the_check_sees_a_name_that_does_not_exist() -> None:
    with pytest.raises(AssertionError, match="has no NoSuchThing"):
        test_python_block_parses_and_its_operator_kit_imports_exist(
            "x.md#1", "from operator_kit import NoSuchThing\n")


def test_the_api_reference_lists_every_exported_name() -> None:
    import operator_kit

    page = (DOCS / "reference" / "operator_kit.md").read_text()
    listed = set(re.findall(r"^::: operator_kit\.(\w+)", page, re.MULTILINE))
    missing = sorted(set(operator_kit.__all__) - listed)
    assert not missing, ("docs/reference/operator_kit.md has no `::: operator_kit.NAME` for "
                         + ", ".join(missing))
