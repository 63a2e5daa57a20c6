"""Cache transforms: what an object becomes before it enters an informer's cache.

A *transform* is a function from an object (the API's dict, as the watch or list
delivered it, with ``apiVersion`` and ``kind`` set) to the object to cache: the same dict
changed in place, or a new one. It runs once per object and event, on the watch thread,
before the `operator_kit.runtime.cache.Store` files the object, so every read of that
cache — the object ``reconcile`` gets, ``ctx.get``, ``ctx.list``, ``ctx.owned``, the
filters' old and new objects, the index functions — sees the transformed object. Drop
only what no reconcile, filter, mapper or index reads (controller-runtime's
``cache.ByObject.Transform``; ``cache.Options.DefaultTransform`` for the default).

Two run, in this order:

1. the operator's default, ``Operator(default_transform=...)``: `drop_managed_fields`
   unless another is given (``None``: objects are cached whole);
2. the kind's own, where the controller declares it: ``Controller.transform`` for its
   primary kind, ``Owns(kind, transform=...)``, ``Watch(kind, mapper, transform=...)``.
   Declarations of one kind with different transforms get separate caches.

What identifies the object (``metadata.name``, ``namespace``, ``uid`` and
``resourceVersion``; ``apiVersion`` and ``kind``) is what the cache, the work queue and the
writes rely on: a transform that returns something other than a dict, or changes or
drops one of these, or that raises, is not applied: the object is cached with those
put back (what it changed in place before it raised stays changed). Either is logged
once per cache at ERROR (with the traceback), then at DEBUG, so a bug in a transform
never stops the watch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("operator_kit.cache")

__all__ = ["Transform", "Transformer", "drop_fields", "drop_managed_fields"]

Transform = Callable[[dict[str, Any]], dict[str, Any]]
"""An object (the API's dict) to the object to cache; see the module docstring."""

_IDENTITY = ("name", "namespace", "uid", "resourceVersion")


def drop_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` without ``metadata.managedFields`` (server-side apply's bookkeeping, often
    most of an object's size, rarely read by an operator): the default transform, as
    controller-runtime's ``cache.TransformStripManagedFields``."""
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("managedFields", None)
    return obj


def drop_fields(*paths: str) -> Transform:
    """A transform removing each dotted path (``"data"``, ``"spec.template"``,
    ``"metadata.annotations"``) from the object, where present.

    ``Owns("v1/ConfigMap", transform=drop_fields("data", "binaryData"))`` caches the
    ConfigMaps an operator owns without their contents, when it only needs to know which
    exist. A path into ``metadata`` must not name what identifies the object (see the
    module docstring): that is a ValueError here."""
    split = [tuple(path.split(".")) for path in paths]
    for parts in split:
        if not all(parts) or parts in (("metadata",), ("apiVersion",), ("kind",)) or (
                parts[0] == "metadata" and parts[1] in _IDENTITY):
            raise ValueError(f"drop_fields: cannot drop {'.'.join(parts)!r}: name a field "
                             "of the object other than its apiVersion, kind, metadata "
                             f"itself or metadata.{{{','.join(_IDENTITY)}}}")

    def transform(obj: dict[str, Any]) -> dict[str, Any]:
        for *parents, last in split:
            node: Any = obj
            for part in parents:
                node = node.get(part) if isinstance(node, dict) else None
            if isinstance(node, dict):
                node.pop(last, None)
        return obj

    transform.__qualname__ = f"drop_fields({', '.join(map(repr, paths))})"
    return transform


def _identity(obj: dict[str, Any]) -> tuple[Any, ...]:
    metadata = obj.get("metadata") or {}
    return (obj.get("apiVersion"), obj.get("kind"),
            *(metadata.get(name) for name in _IDENTITY))


def _name(function: Callable[..., Any]) -> str:
    return str(getattr(function, "__qualname__", None) or function)


class Transformer:
    """The transforms one cache applies — the operator's default, then the kind's — with
    the checks the module docstring describes. ``Transformer(None, None)`` keeps objects
    as they arrive."""

    def __init__(self, default: Transform | None = drop_managed_fields,
                 kind: Transform | None = None, *, description: str = "") -> None:
        self.default = default
        self.kind = kind
        self.description = description
        self._reported = False

    def __call__(self, obj: dict[str, Any]) -> dict[str, Any]:
        """`obj` transformed: what the cache holds."""
        for function in (self.default, self.kind):
            if function is drop_managed_fields:  # ours: keeps what identifies the object
                obj = drop_managed_fields(obj)
            elif function is not None:
                obj = self._apply(function, obj)
        return obj

    def _apply(self, function: Transform, obj: dict[str, Any]) -> dict[str, Any]:
        before = _identity(obj)
        try:
            result = function(obj)
        except Exception:  # noqa: BLE001 - a user's function must not stop the watch
            self._report(function, obj, "raised", exc_info=True)
            return _restored(obj, before)
        if not isinstance(result, dict):
            self._report(function, obj, f"returned {type(result).__name__}, not the object "
                         "(a dict): return the object it was given, changed")
            return _restored(obj, before)
        if _identity(result) != before:
            self._report(function, obj, "changed or dropped what identifies the object "
                         "(apiVersion, kind, or metadata name, namespace, uid or "
                         "resourceVersion): keep those")
            return _restored(obj, before)
        return result

    def _report(self, function: Transform, obj: dict[str, Any], what: str, *,
                exc_info: bool = False) -> None:
        metadata = obj.get("metadata") or {}
        shown = "/".join(str(p) for p in (metadata.get("namespace"), metadata.get("name")) if p)
        level = logging.DEBUG if self._reported else logging.ERROR
        self._reported = True
        log.log(level, "cache transform %s of %s %s on %s: the object is cached without "
                "it (said once per cache at ERROR, then at DEBUG)", _name(function),
                self.description, what, shown, exc_info=exc_info)


def _restored(obj: dict[str, Any], identity: tuple[Any, ...]) -> dict[str, Any]:
    """`obj` with what identifies it put back as it was before a failed transform (one
    that changed it in place before it raised, say)."""
    api_version, kind, *values = identity
    obj["apiVersion"], obj["kind"] = api_version, kind
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        metadata = obj["metadata"] = {}
    for name, value in zip(_IDENTITY, values, strict=True):
        if value is None:
            metadata.pop(name, None)
        else:
            metadata[name] = value
    return obj
