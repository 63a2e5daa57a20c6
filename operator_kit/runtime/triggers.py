"""Why a reconcile ran: the triggers that queued its key.

Every add to a controller's work queue carries a `Trigger`: where it came from (its
``source``, one of `SOURCES`), the object that caused it (kind, namespace, name), the
watch event's type, for an update the top-level fields that changed (`changed_fields`),
and for a watched kind the mapper that named the primary. The queue de-duplicates keys
(ten changes before a worker gets to a key are one reconcile), so it coalesces their
triggers too: the reconcile gets one `Triggers` -- the first `MAX_KEPT` triggers in the
order they came, the number of all of them, and that number by source.

The worker writes them on the reconcile's outcome line (``reconciled ...`` at DEBUG,
``reconcile of ... failed`` at ERROR: in the message, and in JSON as ``triggers`` and
``triggerCount``), counts them in
``operator_kit_controller_reconcile_triggers_total{controller,trigger}`` (`TriggerCounter`),
and hands them to the reconcile as ``ctx.triggers``.

Sources:

``primary``  a watch event of the controller's own kind (after its filters);
``owned``    a watch event of an object it owns (a controller ownerReference to it);
``watched``  a watch event of a watched kind, mapped to the key by ``via`` (the mapper);
``requeue``  the reconcile returned ``Action.requeue(seconds)``;
``retry``    the reconcile failed (or conflicted, or was throttled, or timed out);
``resync``   a list brought the object -- the initial list at start, a relist after 410
             Gone, a handler's replay of the cache -- rather than a live change.

Cost: on the watch thread (the hot path) a trigger is one small object holding
references to the event's old and new object -- no copies, no comparison. The changed
fields are computed when first read (the worker's log line, ``ctx.triggers``), so only
for the triggers a reconcile keeps: `changed_fields` compares the top-level values by
identity, then equality (a C-level dict comparison), and ``metadata``'s keys the same
way. A waiting key holds at most `MAX_KEPT` triggers (and so old objects); a list's
events (``resync``) hold none. ``bench/triggers_bench.py`` measures it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from operator_kit import metrics, tracing
from operator_kit.runtime.changes import WatchEvent

__all__ = ["MAX_KEPT", "SOURCES", "Trigger", "TriggerCounter", "Triggers", "changed_fields"]

SOURCES = ("primary", "owned", "watched", "requeue", "retry", "resync")
"""The values of a trigger's ``source`` (the ``trigger`` label of the metric)."""

MAX_KEPT = 5
"""How many triggers a coalesced reconcile keeps, the first ones; the rest are counted."""

# Metadata that changes with every write, or with spec: not a reason of its own.
_NOISE = frozenset({"resourceVersion", "generation", "managedFields"})
_MISSING = object()


def _differs(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """The keys whose values differ between `old` and `new`, in `new`'s order, then the
    keys only `old` has."""
    missing, keys = _MISSING, []
    for key, value in new.items():
        other = old.get(key, missing)
        if other is not value and other != value:
            keys.append(key)
    if len(old) + len(keys) > len(new):  # else every key of old is in new
        keys += [key for key in old if key not in new]
    return keys


def changed_fields(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> tuple[str, ...]:
    """The top-level fields that differ from `old` to `new` (``spec``, ``status``...),
    with ``metadata`` broken down one level (``metadata.labels``); ``resourceVersion``,
    ``generation`` and ``managedFields`` are left out. ``()`` without an `old`.

    >>> changed_fields({"spec": {"a": 1}, "metadata": {"labels": {}}},
    ...                {"spec": {"a": 2}, "metadata": {"labels": {"x": "y"}}})
    ('metadata.labels', 'spec')
    """
    if old is None:
        return ()
    changed: list[str] = []
    for key in _differs(old, new):
        before, after = old.get(key), new.get(key)
        if key == "metadata" and isinstance(before, dict) and isinstance(after, dict):
            changed += [f"metadata.{k}" for k in _differs(before, after) if k not in _NOISE]
        else:
            changed.append(key)
    return tuple(sorted(changed))


class Trigger:
    """One reason a key was queued: its ``source`` (see `SOURCES`), the object that
    caused it (``kind``, ``namespace``, ``name``), the ``event`` type (ADDED, MODIFIED,
    DELETED; empty for requeue and retry), the fields an update ``changed``, and
    ``via``, a watched kind's mapper. Read-only; equal when all of these are. ``span``:
    the watch event as OpenTelemetry recorded it (`operator_kit.tracing`), or None."""

    __slots__ = ("_changed", "_pair", "event", "kind", "name", "namespace", "source", "span",
                 "via")

    def __init__(self, source: str, kind: str = "", namespace: str = "", name: str = "",
                 event: str = "", changed: tuple[str, ...] = (), via: str = "") -> None:
        self.source, self.kind, self.namespace, self.name = source, kind, namespace, name
        self.event, self.via = event, via
        self._changed = changed
        # (old, new) of an update until `changed` is first read: the comparison runs on
        # the worker, for the triggers a reconcile keeps, not on the watch thread.
        self._pair: tuple[Mapping[str, Any], Mapping[str, Any]] | None = None
        self.span: tracing.EventSpan | None = None

    @classmethod
    def of_event(cls, source: str, event: WatchEvent, kind: str = "",
                 via: str = "") -> Trigger:
        """The trigger of a watch event seen as `source` (``resync`` instead when a list
        brought it: then without its changed fields, so that a relist's backlog holds
        no old objects); `kind` when the object does not say its own."""
        obj = event.object
        meta = obj.get("metadata") or {}
        trigger = cls("resync" if event.from_list else source, obj.get("kind") or kind,
                      meta.get("namespace") or "", meta.get("name") or "", event.type,
                      via=via)
        if not event.from_list:
            if event.old is not None:
                trigger._pair = (event.old, obj)
            trigger.span = tracing.watch_event(event.type, trigger.kind, trigger.namespace,
                                               trigger.name)
        return trigger

    @property
    def changed(self) -> tuple[str, ...]:
        """The top-level fields an update changed (`changed_fields`), ``()`` otherwise."""
        pair = self._pair  # one read: another thread may compute it at the same time
        if pair is not None:
            self._changed = changed_fields(*pair)
            self._pair = None
        return self._changed

    def _fields(self) -> tuple[str, str, str, str, str, tuple[str, ...], str]:
        return (self.source, self.kind, self.namespace, self.name, self.event, self.changed,
                self.via)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Trigger) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return "Trigger({})".format(", ".join(map(repr, self._fields())))

    def as_dict(self) -> dict[str, Any]:
        """Its fields that are set, for a JSON log line."""
        fields = {"source": self.source, "kind": self.kind, "namespace": self.namespace,
                  "name": self.name, "event": self.event, "changed": list(self.changed),
                  "via": self.via}
        return {key: value for key, value in fields.items() if value}

    def __str__(self) -> str:
        """``owned ConfigMap ns/child MODIFIED [metadata.labels]``, ``requeue``."""
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        parts = [self.source, self.kind, where, self.event,
                 f"[{','.join(self.changed)}]" if self.changed else "",
                 f"via {self.via}" if self.via else ""]
        return " ".join(part for part in parts if part)


class Triggers:
    """The triggers of one reconcile, coalesced: the first `MAX_KEPT` (iterate, or
    `kept`), how many there were in all (`total`, also its ``len()``, which may exceed
    what iterating yields) and by source (`counts`).

    ``ctx.triggers`` in a reconcile; empty (``total == 0``) outside the controller's
    workers, as in ``reconcile_once``. Read it, do not change it.
    """

    __slots__ = ("counts", "kept", "total")

    def __init__(self) -> None:
        self.kept: list[Trigger] = []
        self.total = 0
        self.counts: dict[str, int] = {}

    def add(self, trigger: Trigger | Triggers) -> None:
        """Record one more trigger (or all of another `Triggers`, carried over)."""
        if isinstance(trigger, Triggers):
            room = MAX_KEPT - len(self.kept)
            self.kept += trigger.kept[:max(room, 0)]
            self.total += trigger.total
            for source, count in trigger.counts.items():
                self.counts[source] = self.counts.get(source, 0) + count
            return
        if len(self.kept) < MAX_KEPT:
            self.kept.append(trigger)
        self.total += 1
        self.counts[trigger.source] = self.counts.get(trigger.source, 0) + 1

    def __iter__(self) -> Iterator[Trigger]:
        return iter(self.kept)

    def __len__(self) -> int:
        return self.total

    def sources(self) -> list[str]:
        """The sources seen, in the order of `SOURCES`."""
        return [source for source in SOURCES if source in self.counts]

    def as_list(self) -> list[dict[str, Any]]:
        """The kept triggers as dicts (`Trigger.as_dict`), for a JSON log line."""
        return [trigger.as_dict() for trigger in self.kept]

    def __str__(self) -> str:
        """``primary Backup ns/a MODIFIED [spec]; requeue; and 3 more``; ``none recorded``."""
        if not self.total:
            return "none recorded"
        text = "; ".join(str(trigger) for trigger in self.kept)
        more = self.total - len(self.kept)
        return f"{text}; and {more} more" if more else text

    def __repr__(self) -> str:
        return f"<Triggers {self.total}: {self}>"


class TriggerCounter:
    """``operator_kit_controller_reconcile_triggers_total{controller,cluster,trigger}``
    for one controller (on one fleet member, or the hub): every source's series exists
    (at 0) from the start."""

    def __init__(self, controller: str, cluster: str = metrics.HUB) -> None:
        self._children = {source: metrics.RECONCILE_TRIGGERS.labels(controller, cluster,
                                                                    source)
                          for source in SOURCES}

    def count(self, triggers: Triggers) -> None:
        """Count the triggers of a reconcile that is about to run, by source."""
        for source, count in triggers.counts.items():
            self._children[source].inc(count)
