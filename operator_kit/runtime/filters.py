"""Event filters: which watch events are worth a reconcile.

A filter is any callable taking a `WatchEvent` and returning True to let it through.
Each source of a controller has its own filters, and an event must pass all of them:

=====================  =====================================  ==========================
source                 declared as                            default filter
=====================  =====================================  ==========================
the primary kind       ``Controller.filters``                 `spec_changed`: not for a
                                                              change of status only
an owned kind          ``Owns(kind, filters=[...])``          none: every change
a watched kind         ``Watch(kind, map, filters=[...])``    none: every change
=====================  =====================================  ==========================

Setting ``Controller.filters`` replaces the default. Whatever the filters say, a
primary object that starts being deleted is always reconciled (its finalizer must
run), and an object that is deleted is always let go of.

The built-in filters let ADDED and DELETED events through and judge MODIFIED ones:

- `generation_changed` — the spec changed (``metadata.generation`` moved; kinds without
  a generation count every change), like controller-runtime's
  ``GenerationChangedPredicate``;
- `labels_changed`, `annotations_changed` — those maps changed;
- `spec_changed` — anything but status and bookkeeping metadata changed;
- `any_of(f, g, ...)` — at least one of them lets the event through.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from operator_kit.runtime.changes import WatchEvent

Filter = Callable[[WatchEvent], bool]
"""Takes a watch event; True lets it through to the queue."""


def _meta(obj: dict[str, Any] | None) -> dict[str, Any]:
    return (obj or {}).get("metadata") or {}


def _changed(event: WatchEvent, *fields: str) -> bool:
    if event.type != "MODIFIED" or event.old is None:
        return True
    old, new = _meta(event.old), _meta(event.object)
    return any(old.get(field) != new.get(field) for field in fields)


def generation_changed(event: WatchEvent) -> bool:
    """A MODIFIED event passes only when ``metadata.generation`` changed (the spec, for
    kinds with a status subresource). Kinds without a generation: every change passes."""
    if "generation" not in _meta(event.object):
        return True
    return _changed(event, "generation")


def labels_changed(event: WatchEvent) -> bool:
    """A MODIFIED event passes only when ``metadata.labels`` changed."""
    return _changed(event, "labels")


def annotations_changed(event: WatchEvent) -> bool:
    """A MODIFIED event passes only when ``metadata.annotations`` changed."""
    return _changed(event, "annotations")


def spec_changed(event: WatchEvent) -> bool:
    """False for a change of status and bookkeeping metadata only (resourceVersion,
    managedFields): the default for primaries, so writing status does not loop."""
    if "generation" not in _meta(event.object):  # no generation: any change counts
        return True
    return _changed(event, "generation", "labels", "annotations", "finalizers",
                    "deletionTimestamp", "ownerReferences")


def deletion_started(event: WatchEvent) -> bool:
    """True when the object has just been marked for deletion (or is gone)."""
    if event.type == "DELETED":
        return True
    return bool(_meta(event.object).get("deletionTimestamp")) and not (
        _meta(event.old).get("deletionTimestamp") if event.old is not None else False)


def any_of(*filters: Filter) -> Filter:
    """A filter passing what at least one of `filters` passes."""
    if not filters:
        raise ValueError("any_of() needs at least one filter")

    def either(event: WatchEvent) -> bool:
        return any(f(event) for f in filters)

    either.__qualname__ = "any_of(" + ", ".join(function_name(f) for f in filters) + ")"
    return either


def passes(filters: tuple[Filter, ...], event: WatchEvent) -> bool:
    """Whether `event` passes every one of `filters`."""
    return all(f(event) for f in filters)


def function_name(function: Callable[..., Any]) -> str:
    """How logs name a user's function (filter, mapper, index): its qualified name."""
    return str(getattr(function, "__qualname__", None) or repr(function))
