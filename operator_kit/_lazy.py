"""Public names imported on first use (PEP 562), for the packages that re-export them.

``import operator_kit`` (which pytest's plugin entry point does in every test run of an
environment that has it) must cost nothing until a name is used; `lazy_names` gives a
package the ``__getattr__`` and ``__dir__`` that import each name from its home module the
first time it is asked for, and keep it in the package's namespace after.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(namespace: dict[str, Any], homes: Mapping[str, str],
               ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of the package whose globals are `namespace`:
    `homes` maps each lazily imported name to the module it lives in."""

    def __getattr__(name: str) -> Any:
        """A public name, imported from its module the first time it is asked for."""
        module = homes.get(name)
        if module is None:
            raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *namespace.get("__all__", ())})

    return __getattr__, __dir__
