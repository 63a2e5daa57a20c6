"""What a `Watch` mapper returned, read as keys of the controller's primary objects.

A mapper (`Mapper`, controller.py) returns an iterable — a list, a tuple, a generator —
of items, each naming one primary object:

==========================================  ===============================================
item                                        its key
==========================================  ===============================================
a name, ``str``                             ``(namespace of the changed object, name)`` for
                                            a namespaced primary (an error when the changed
                                            object has none); ``("", name)`` for a
                                            cluster-scoped one
a key, ``(namespace, name)``: two ``str``   itself; a namespaced primary needs the
                                            namespace, a cluster-scoped one ignores it
                                            (``None`` or ``""`` there)
a `CustomResource` of the primary's kind    its namespace and name
(any version of it)
a ``dict`` of the primary's kind: its       its ``metadata.namespace`` and ``.name``
``kind``, an ``apiVersion`` in its group
==========================================  ===============================================

``None`` or an empty iterable means nothing to reconcile. Anything else is an error:
a ``str`` by itself (it is not iterated into one-letter names), a single object not in
a list, an object of another kind (the changed object itself, say), a malformed key.
`primary_keys` returns the keys of the valid items and one message per invalid one;
it never raises for what the mapper returned, only when iterating it raises (a
generator mapper failing), which is the mapper's own failure. The runner logs and
counts the messages (``operator_kit_mapper_errors_total``).

Pure: no I/O, no logging, so it is tested without a cluster (tests/unit/test_mappers.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from operator_kit.api.kinds import Kind
from operator_kit.api.resources import CustomResource
from operator_kit.runtime.cache import Key


class Resource(Protocol):
    """The primary kind as mapping needs it: a `CustomResource` class, or the runner's
    discovered `operator_kit.client.transport.Resource` for any kind."""

    @property
    def group(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def namespaced(self) -> bool: ...


@dataclass
class Mapped:
    """The keys of the valid items a mapper returned, in order and without repeats, and
    a message for each item (or result) that names no primary."""

    keys: list[Key] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def accepted(primary: Resource) -> str:
    """What a mapper may return, for messages: names, keys or objects of `primary`."""
    scope = ("names (str, in the changed object's namespace), (namespace, name) keys"
             if primary.namespaced else "names (str), keys ('', name)")
    return (f"a mapper returns a list (any iterable) of {scope} or {primary.kind} objects "
            f"(its class, or dicts of kind {primary.kind} in "
            f"{primary.group or 'the core group'}); None or [] for none")


def primary_keys(result: object, primary: Resource,
                 changed: Mapping[str, Any]) -> Mapped:
    """The keys of the `primary` objects that `result` (what a mapper returned for the
    changed object `changed`, a dict from the API) names; see the module docstring."""
    mapped = Mapped()
    if result is None:
        return mapped
    if isinstance(result, str | bytes):
        mapped.errors.append(f"{describe(result)} (a str is not iterated: return "
                             "[name] for one name)")
        return mapped
    if isinstance(result, Mapping | CustomResource) or _is_model(result):
        mapped.errors.append(f"{describe(result)} by itself (not in a list)")
        return mapped
    if not isinstance(result, Iterable):
        mapped.errors.append(f"{describe(result)} (not iterable)")
        return mapped
    meta = changed.get("metadata")
    namespace = str(meta.get("namespace") or "") if isinstance(meta, Mapping) else ""
    for item in result:
        key = _key(item, primary, namespace)
        if isinstance(key, str):
            mapped.errors.append(key)
        elif key not in mapped.keys:
            mapped.keys.append(key)
    return mapped


def _key(item: object, primary: Resource, namespace: str) -> Key | str:
    """The key `item` names, or the message saying why it names none."""
    if isinstance(item, str):
        if not primary.namespaced:
            return _checked(item, ("", item), primary)
        if not namespace:
            return (f"{describe(item)} (a name means the changed object's namespace, and it "
                    f"has none: return (namespace, name) keys for {primary.kind} objects)")
        return _checked(item, (namespace, item), primary)
    if isinstance(item, tuple):
        if len(item) != 2 or not isinstance(item[1], str) or not (
                item[0] is None or isinstance(item[0], str)):
            return f"{describe(item)} (a key is a tuple of two str: (namespace, name))"
        return _checked(item, (item[0] or "", item[1]), primary)
    if isinstance(item, CustomResource):
        if type(item).group != primary.group or type(item).kind != primary.kind:
            return f"{describe(item)} (not a {primary.kind})"
        return _checked(item, (item.namespace or "", item.name), primary)
    if isinstance(item, Mapping):
        meta = item.get("metadata")
        if (str(item.get("apiVersion") or "").rpartition("/")[0] != primary.group
                or item.get("kind") != primary.kind or not isinstance(meta, Mapping)):
            return f"{describe(item)} (not a {primary.kind})"
        name, ns = meta.get("name"), meta.get("namespace")
        if not isinstance(name, str) or not (ns is None or isinstance(ns, str)):
            return f"{describe(item)} (metadata.name and .namespace must be str)"
        return _checked(item, (ns or "", name), primary)
    if _is_model(item):
        meta = getattr(item, "metadata", None)
        name, ns = getattr(meta, "name", None), getattr(meta, "namespace", None)
        if _model_kind(item) != (primary.group, primary.kind):
            return f"{describe(item)} (not a {primary.kind})"
        if not isinstance(name, str) or not (ns is None or isinstance(ns, str)):
            return f"{describe(item)} (metadata.name and .namespace must be str)"
        return _checked(item, (ns or "", name), primary)
    return f"{describe(item)} (not a name, a key or an object)"


def _model_kind(item: object) -> tuple[str, str] | None:
    """The (group, kind) of a client model object, when its class names a known kind."""
    try:
        kind = Kind.of(type(item))
    except (TypeError, ValueError):
        return None
    return kind.group, kind.kind


def _checked(item: object, key: Key, primary: Resource) -> Key | str:
    namespace, name = key
    if not name:
        return f"{describe(item)} (no name)"
    if not primary.namespaced:
        return "", name  # a cluster-scoped primary: any namespace given is ignored
    if not namespace:
        return f"{describe(item)} (no namespace, and {primary.kind} is namespaced)"
    return key


def _is_model(obj: object) -> bool:
    """A kubernetes client model (``V1ConfigMap``): never a custom resource."""
    return hasattr(type(obj), "openapi_types")


def describe(value: object) -> str:
    """A value a mapper returned, for a message: its type, then what identifies it."""
    kind = type(value).__name__
    if isinstance(value, CustomResource):
        shown = _where(value.namespace, value.name)
        return f"{kind} {shown}" if kind == type(value).kind else \
            f"{kind} ({type(value).kind}) {shown}"
    if isinstance(value, Mapping):
        meta = value.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        of = f"{value.get('apiVersion')}/{value.get('kind')}" if value.get("kind") else \
            "no kind"
        return f"{kind} ({of}) {_where(meta.get('namespace'), meta.get('name'))}"
    meta = getattr(value, "metadata", None) if _is_model(value) else None
    if meta is not None:
        return f"{kind} {_where(getattr(meta, 'namespace', None), getattr(meta, 'name', None))}"
    shown = repr(value)
    return f"{kind} {shown if len(shown) <= 60 else shown[:59] + '…'}"


def _where(namespace: object, name: object) -> str:
    return f"{namespace}/{name}" if namespace else str(name)
