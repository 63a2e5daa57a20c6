"""The architecture's rules that import-linter does not check (docs/architecture.md).

``lint-imports`` (pyproject.toml) checks the layers and that no package's modules import
each other in a cycle. These check the rest: no module of operator_kit uses another's
private names, and no module is over 600 lines (split by concept instead).
"""

from __future__ import annotations

import ast
from pathlib import Path

import operator_kit

PACKAGE = Path(operator_kit.__file__).parent
MAX_LINES = 600


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(dotted: str) -> bool:
    path = PACKAGE.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_imports(path: Path) -> list[str]:
    """``from operator_kit.x import _name`` (a private module is fine, its names are not),
    and ``module._name`` on a module imported from operator_kit."""
    found: list[str] = []
    tree = ast.parse(path.read_text(), str(path))
    imported_modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.split(".")[0] == "operator_kit":
            for alias in node.names:
                dotted = f"{node.module}.{alias.name}"
                if _is_module(dotted):
                    imported_modules.add(alias.asname or alias.name)
                elif _private(alias.name):
                    found.append(f"{path.name}:{node.lineno} imports {alias.name} from "
                                 f"{node.module}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) \
                and isinstance(node.value, ast.Name) and node.value.id in imported_modules:
            found.append(f"{path.name}:{node.lineno} uses {node.value.id}.{node.attr}")
    return found


def test_every_module_is_found() -> None:
    names = {_module_name(path) for path in _modules()}
    assert {"operator_kit", "operator_kit.runtime.runner", "operator_kit.webhooks.server",
            "operator_kit.api.schema"} <= names


def test_no_module_uses_another_modules_private_names() -> None:
    offences = [offence for path in _modules() for offence in _private_imports(path)]
    assert offences == [], "make the name public (and document it), or move the code"


def test_no_module_is_over_600_lines() -> None:
    long = {_module_name(path): n for path in _modules()
            if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert long == {}, "split these by concept (docs/architecture.md)"


def test_the_checks_catch_what_they_forbid(tmp_path: Path) -> None:
    # The same walk over a module that breaks the rule, so the rule cannot pass vacuously.
    bad = tmp_path / "bad.py"
    bad.write_text("from operator_kit.webhooks.server import _json\n"
                   "from operator_kit import _pki\n"
                   "from operator_kit.runtime import watching\n"
                   "x = watching._private_thing\n"
                   "y = _pki.new_key\n")
    assert _private_imports(bad) == [
        "bad.py:1 imports _json from operator_kit.webhooks.server",
        "bad.py:4 uses watching._private_thing",
    ]


def test_each_subpackage_says_what_it_holds() -> None:
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert doc, f"{_module_name(init)} has no docstring saying what it holds"
