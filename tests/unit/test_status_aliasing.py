"""The code users copy never builds a new status around the object's own lists.

``Status(conditions=obj.status.conditions)`` followed by ``set_condition(...)`` changes
``obj`` too. `Context.patch_status` compares with the status as read, so such code is no
longer wrong — but the samples and the starter are what users copy, so they copy first.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from operator_kit.new import generate

ROOT = Path(__file__).resolve().parents[2]


def aliased(source: str) -> list[str]:
    """``…Status(<x>.status.<field>)`` calls: a new status sharing a value of the old."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(
            node.func, "id", "")
        if not name.endswith("Status"):
            continue
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            if isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Attribute) \
                    and arg.value.attr == "status":
                found.append(f"line {node.lineno}: {name}(... {ast.unparse(arg)} ...)")
    return found


def test_the_check_finds_the_aliasing_it_forbids() -> None:
    assert aliased("s = WidgetStatus(conditions=obj.status.conditions)\n") == [
        "line 1: WidgetStatus(... obj.status.conditions ...)"]
    assert aliased("s = WidgetStatus(conditions=copy.deepcopy(obj.status.conditions))\n") == []


@pytest.mark.parametrize("path", sorted(ROOT.glob("samples/*/*_operator/*.py")),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_the_samples_copy_status_lists(path: Path) -> None:
    assert aliased(path.read_text()) == []


def test_the_starters_controller_copies_status_lists(tmp_path: Path) -> None:
    generate("gadget-operator", "gadgets.starter.test", "Gadget", tmp_path / "p")
    sources = sorted((tmp_path / "p").rglob("*.py"))
    assert sources
    assert {str(p.relative_to(tmp_path)): aliased(p.read_text()) for p in sources} == {
        str(p.relative_to(tmp_path)): [] for p in sources}
