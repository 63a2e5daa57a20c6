"""Every public name has a docstring: the API reference is generated from them.

Public means: each name in ``operator_kit.__all__``; each function or class that
``operator_kit.testing`` exports (and its pytest plugin's fixtures); the classes and
functions of the other modules the API reference documents (webhooks, manifests,
testing.deploy, testing.faults, WebhookCertificate); for each
public class, the methods and properties it defines itself without a leading
underscore; for a public module (``operator_kit.filters``), its public functions.
Inherited methods are checked on the class that defines them; an override of a
documented method shares its docstring.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Iterator
from typing import Any

import operator_kit
import operator_kit.manifests
import operator_kit.testing
import operator_kit.testing.deploy
import operator_kit.testing.faults
import operator_kit.testing.plugin
import operator_kit.webhooks.certificates
import operator_kit.webhooks.server

# Modules the API reference documents besides operator_kit itself: their __all__ (or,
# without one, the classes and functions they define).
REFERENCED = (operator_kit.testing, operator_kit.webhooks, operator_kit.manifests,
              operator_kit.testing.deploy, operator_kit.testing.faults)


def _own_functions(module: types.ModuleType) -> Iterator[tuple[str, Any]]:
    for name, value in vars(module).items():
        if name.startswith("_") or getattr(value, "__module__", None) != module.__name__:
            continue
        if inspect.isclass(value) or inspect.isfunction(value):
            yield f"{module.__name__}.{name}", value


def _public_objects() -> Iterator[tuple[str, Any]]:
    for name in operator_kit.__all__:
        value = getattr(operator_kit, name)
        if isinstance(value, types.ModuleType):
            yield f"operator_kit.{name}", value
            yield from _own_functions(value)
        else:
            yield f"operator_kit.{name}", value
    for module in REFERENCED:
        exported = getattr(module, "__all__", None)
        if exported is None:
            yield from _own_functions(module)
            continue
        for name in exported:
            value = getattr(module, name)
            if inspect.isclass(value) or inspect.isfunction(value):
                yield f"{module.__name__}.{name}", value
    yield ("operator_kit.webhooks.certificates.WebhookCertificate",
           operator_kit.webhooks.certificates.WebhookCertificate)
    for name in ("cluster", "namespace"):  # the fixtures: pytest shows their docstrings
        fixture = getattr(operator_kit.testing.plugin, name)
        function = getattr(fixture, "__wrapped__", None) or getattr(fixture, "_fixture_function",
                                                                     fixture)
        yield f"operator_kit.testing.plugin.{name}", function


def _members(qualname: str, cls: type) -> Iterator[tuple[str, Any]]:
    for name, value in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if isinstance(value, property):
            yield f"{qualname}.{name}", value.fget
        elif inspect.isfunction(value):
            yield f"{qualname}.{name}", value


def _docstring(value: Any) -> str:
    if isinstance(value, types.ModuleType) or inspect.isclass(value):
        own = value.__dict__.get("__doc__")
    else:
        own = getattr(value, "__doc__", None)
    return (own or "").strip()


def _inherited(cls: type, qualname: str) -> bool:
    """An override of a documented method of a base class shares its docstring (as
    `inspect.getdoc` does)."""
    name = qualname.rsplit(".", 1)[1]
    for base in cls.__mro__[1:]:
        if name in vars(base):
            member = dict(_members(base.__name__, base)).get(f"{base.__name__}.{name}")
            return member is not None and bool(_docstring(member))
    return False


def undocumented() -> list[str]:
    missing: list[str] = []
    for qualname, value in _public_objects():
        if not _docstring(value):
            missing.append(qualname)
        if inspect.isclass(value):
            missing.extend(q for q, member in _members(qualname, value)
                           if not _docstring(member) and not _inherited(value, q))
    return sorted(set(missing))


def test_the_check_sees_a_missing_docstring() -> None:
    class Undocumented:
        def method(self) -> None:
            pass

    class Base:
        def documented(self) -> None:
            """Documented here."""

    class Override(Base):
        def documented(self) -> None:
            pass

    assert [q for q, m in _members("X", Undocumented) if not _docstring(m)] == ["X.method"]
    assert not _docstring(Undocumented)
    assert _inherited(Override, "Override.documented")
    assert not _inherited(Undocumented, "Undocumented.method")


def test_every_public_name_has_a_docstring() -> None:
    missing = undocumented()
    assert not missing, (f"{len(missing)} public names have no docstring (write one): "
                         + ", ".join(missing))


def test_the_check_covers_every_exported_name() -> None:
    names = {q for q, _ in _public_objects()}
    assert {f"operator_kit.{n}" for n in operator_kit.__all__} <= names
    assert "operator_kit.testing.TestCluster" in names
    assert "operator_kit.testing.eventually" in names
