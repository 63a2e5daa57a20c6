"""RFC 6902 JSON patches: what a mutating webhook's answer carries.

A mutating handler returns the object changed; the patch from the object the API server
sent to the object returned is computed here and sent base64-encoded in the answer.
"""

from __future__ import annotations

from typing import Any

__all__ = ["json_patch"]


def json_patch(old: Any, new: Any) -> list[dict[str, Any]]:
    """The RFC 6902 JSON patch that turns JSON value `old` into `new`.

    Objects are compared key by key, recursively (``add``, ``remove``, ``replace``);
    anything else that differs — a scalar, a list, a change of type — is replaced
    whole. Keys are escaped as JSON pointers require (``~`` → ``~0``, ``/`` → ``~1``).
    Values are compared as JSON: ``1``, ``1.0`` and ``true`` all differ.
    """
    ops: list[dict[str, Any]] = []
    _diff(old, new, "", ops)
    return ops


def _diff(old: Any, new: Any, path: str, ops: list[dict[str, Any]]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in old:
            if key not in new:
                ops.append({"op": "remove", "path": f"{path}/{_escape(key)}"})
        for key, value in new.items():
            child = f"{path}/{_escape(key)}"
            if key not in old:
                ops.append({"op": "add", "path": child, "value": value})
            else:
                _diff(old[key], value, child, ops)
    elif not _same(old, new):
        ops.append({"op": "replace", "path": path, "value": new})


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _escape(key: str) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")
