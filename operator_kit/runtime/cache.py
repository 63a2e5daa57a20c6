"""The cache: what the informers have seen, kept by key and by index, for reads.

Each `Informer` (watching.py) fills one `Store`. A store holds the latest version of
every object the watch has seen, without ``metadata.managedFields`` (operators rarely
read them, and they are often most of an object's size), and keeps *indexes* current as
objects come and go:

- ``namespace``: the objects of one namespace, so a namespaced list costs its result,
  not the whole cache;
- `OWNER` (``controller-owner``): the uid of the object's controller ownerReference,
  so ``ctx.owned(backup, Job)`` finds a Backup's Jobs at once (controller-runtime users
  add this index by hand; here every store has it);
- any named function a controller declares (`operator_kit.Index`): ``ctx.list(kind,
  index=(name, value))`` returns the objects whose function returned `value`.

An index function that raises is logged with the object's key and the function's name;
that object is left out of that index only, and everything else goes on.

Reads return the stored dicts themselves, not copies: treat them as read-only (the
decoding in `operator_kit.runtime.objects` copies before it hands out typed objects).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from operator_kit.runtime import selectors
from operator_kit.runtime.selectors import Requirement, Selector

log = logging.getLogger("operator_kit.cache")

Key = tuple[str, str]
"""(namespace or "", name): how a cached object and a work-queue item are named."""

IndexFunction = Callable[[dict[str, Any]], Iterable[str]]
"""Maps a cached object (the API's dict) to the index values it is found under."""

_Dicts = list[dict[str, Any]]
_Names = list[str]
# (aliases: inside Store, `list` is the method)

NAMESPACE = "namespace"
OWNER = "controller-owner"


def key_of(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata", {})
    return (meta.get("namespace") or "", meta["name"])


def describe(key: Key) -> str:
    """``namespace/name``, or ``name`` for a cluster-scoped object: how logs name a key."""
    namespace, name = key
    return f"{namespace}/{name}" if namespace else name


def describe_object(obj: Mapping[str, Any]) -> str:
    """`describe` of an object (the API's dict), even one with no name."""
    meta = obj.get("metadata", {})
    return describe((meta.get("namespace") or "", str(meta.get("name"))))


def controller_owner_uid(obj: Mapping[str, Any]) -> list[str]:
    """The uid of `obj`'s controller ownerReference (at most one), for the `OWNER` index."""
    for ref in obj.get("metadata", {}).get("ownerReferences") or ():
        if ref.get("controller") and ref.get("uid"):
            return [str(ref["uid"])]
    return []


def _origin(function: IndexFunction) -> object:
    """What an index function was made from (its declaration), else itself."""
    return getattr(function, "__wrapped__", function)


def _namespace(obj: Mapping[str, Any]) -> list[str]:
    return [obj.get("metadata", {}).get("namespace") or ""]


class Store:
    """Objects by key, with indexes kept current; safe to read from any thread."""

    def __init__(self, description: str = "") -> None:
        self.description = description
        self._objects: dict[Key, dict[str, Any]] = {}
        self._functions: dict[str, IndexFunction] = {}
        # index name -> value -> keys; and key -> the values it is filed under
        self._indexes: dict[str, dict[str, set[Key]]] = {}
        self._filed: dict[str, dict[Key, tuple[str, ...]]] = {}
        self._lock = threading.Lock()
        self.add_index(NAMESPACE, _namespace)
        self.add_index(OWNER, controller_owner_uid)

    # -- indexes ---------------------------------------------------------------------------

    def add_index(self, name: str, function: IndexFunction) -> None:
        """Keep index `name` by `function`; indexes what is stored already too."""
        with self._lock:
            if name in self._functions and _origin(self._functions[name]) != _origin(function):
                raise ValueError(f"{self.description}: two different index functions are "
                                 f"named {name!r}; give one another name")
            self._functions[name] = function
            self._indexes[name] = {}
            self._filed[name] = {}
            for key, obj in self._objects.items():
                self._file(name, key, obj)

    def values_of(self, name: str, obj: dict[str, Any]) -> tuple[str, ...]:
        """The values index `name` files `obj` under (nothing if its function fails)."""
        with self._lock:
            function = self._functions[name]
        return self._values(name, function, key_of(obj), obj)

    def indexes(self) -> _Names:
        with self._lock:
            return sorted(self._functions)

    def _values(self, name: str, function: IndexFunction, key: Key,
                obj: dict[str, Any]) -> tuple[str, ...]:
        try:
            return tuple(dict.fromkeys(str(v) for v in function(obj)))
        except Exception:  # a user's function must not stop the informer
            log.exception("index %r (%s) failed on %s %s: left out of that index",
                          name, getattr(function, "__qualname__", function),
                          self.description, "/".join(filter(None, key)))
            return ()

    def _file(self, name: str, key: Key, obj: dict[str, Any],
              values: tuple[str, ...] | None = None) -> None:
        if values is None:
            values = self._values(name, self._functions[name], key, obj)
        if values:
            self._filed[name][key] = values
        index = self._indexes[name]
        for value in values:
            index.setdefault(value, set()).add(key)

    def _computed(self, objects: dict[Key, dict[str, Any]]
                  ) -> dict[str, dict[Key, tuple[str, ...]]]:
        """Every index's values for `objects`, computed without holding the lock: index
        functions are user code, and may read this store."""
        with self._lock:
            functions = dict(self._functions)
        return {name: {key: self._values(name, function, key, obj)
                       for key, obj in objects.items()}
                for name, function in functions.items()}

    def _unfile(self, key: Key) -> None:
        for name, filed in self._filed.items():
            index = self._indexes[name]
            for value in filed.pop(key, ()):
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[value]

    # -- writes (the informer's) -------------------------------------------------------------

    def replace(self, objects: dict[Key, dict[str, Any]]) -> dict[Key, dict[str, Any]]:
        """Hold exactly `objects` (a relist); returns what was held before."""
        computed = self._computed(objects)
        with self._lock:
            old, self._objects = self._objects, objects
            for name in self._functions:
                self._indexes[name], self._filed[name] = {}, {}
                values = computed.get(name, {})
                for key, obj in objects.items():
                    self._file(name, key, obj, values.get(key))
            return old

    def put(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        """Store `obj` (added or changed); returns the version it replaced, if any."""
        key = key_of(obj)
        computed = self._computed({key: obj})
        with self._lock:
            old = self._objects.get(key)
            if old is not None:
                self._unfile(key)
            self._objects[key] = obj
            for name in self._functions:
                self._file(name, key, obj, computed.get(name, {}).get(key))
            return old

    def remove(self, key: Key) -> dict[str, Any] | None:
        with self._lock:
            old = self._objects.pop(key, None)
            if old is not None:
                self._unfile(key)
            return old

    # -- reads -----------------------------------------------------------------------------

    def get(self, key: Key) -> dict[str, Any] | None:
        with self._lock:
            return self._objects.get(key)

    def list(self, namespace: str | None = None,
             labels: LabelSelector | None = None) -> _Dicts:
        """Objects (of one namespace, when given) matching `labels`, ordered by key."""
        with self._lock:
            if namespace is None:
                items = sorted(self._objects.items())
            else:
                keys = self._indexes[NAMESPACE].get(namespace, ())
                items = sorted((key, self._objects[key]) for key in keys)
        return [obj for _, obj in items if labels is None or labels.matches(obj)]

    def by_index(self, name: str, value: str, namespace: str | None = None,
                 labels: LabelSelector | None = None) -> _Dicts:
        """Objects filed under `value` in index `name`, ordered by key."""
        with self._lock:
            index = self._indexes.get(name)
            if index is None:
                known = ", ".join(sorted(self._functions))
                raise LookupError(f"{self.description} has no index {name!r} (it has: "
                                  f"{known}); declare it in the controller's `indexes`")
            keys = sorted(k for k in index.get(value, ()) if namespace in (None, k[0]))
            objects = [self._objects[k] for k in keys]
        return [obj for obj in objects if labels is None or labels.matches(obj)]

    def objects(self) -> _Dicts:
        with self._lock:
            return list(self._objects.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._objects)


# -- label selectors ---------------------------------------------------------------------

@dataclass(frozen=True)
class LabelSelector:
    """A label selector, matched against cached objects exactly as the API server matches
    ``?labelSelector=`` (the grammar and the checks are `operator_kit.runtime.selectors`).

    ``LabelSelector.of({"app": "web"})`` or ``LabelSelector.of("app=web,tier in (a,b)")``:
    equality (``=``, ``==``, ``!=``), set (``in``, ``notin``), existence (``k``, ``!k``)
    and integer (``k>1``, ``k<5``) requirements, all of which must hold. A selector the
    server would refuse, or a dict with a key or value it would refuse, is a ValueError
    carrying the server's message. `text` is what is sent to the server (the string as
    given; for a dict, ``k=v`` pairs by key)."""

    text: str
    requirements: tuple[Requirement, ...]

    @classmethod
    def of(cls, labels: Mapping[str, str] | str | LabelSelector) -> LabelSelector:
        if isinstance(labels, LabelSelector):
            return labels
        if isinstance(labels, Mapping):
            try:
                parsed = selectors.from_labels(labels)
            except ValueError as err:
                raise ValueError(f"label selector {dict(labels)!r}: {err}") from None
            return cls(str(parsed), parsed.requirements)
        if not isinstance(labels, str):
            raise TypeError(f"a label selector is a dict or a string, not "
                            f"{type(labels).__name__}")
        try:
            parsed = selectors.parse(labels)
        except ValueError as err:
            raise ValueError(f"label selector {labels!r}: {err}") from None
        return cls(labels, parsed.requirements)

    @property
    def selector(self) -> Selector:
        """The parsed form, for `Selector.implies`."""
        return Selector(self.requirements)

    def matches(self, obj: Mapping[str, Any]) -> bool:
        """Whether the object (the API's dict) has the labels this selector asks for."""
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(requirement.matches(labels) for requirement in self.requirements)

    def implies(self, other: LabelSelector) -> bool:
        """Whether every object this selector matches is matched by `other` (see
        `Selector.implies`: sound, so a False may be an implication it did not see)."""
        return self.selector.implies(other.selector)

    def __str__(self) -> str:
        return self.text
