"""Events to keys: which work queue keys a watch event of each source asks for.

A controller's runner listens to three kinds of source (controller.py's diagram): its
primary kind (an event queues the object's own key), the kinds it ``owns`` (an event
queues the key of the child's controller owner, before and after the change) and the
kinds it ``watches`` (an event queues the keys its `Watch`'s mapper returns). Each
source's filters decide what passes first (filters.py); a filter or mapper that raises
drops that event, logged, never the informer. `EventSources` is the runner's half that
does this; `ControllerRunner` (runner.py) owns the queue the keys go to.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from operator_kit import metrics
from operator_kit.api.kinds import Kind
from operator_kit.client.transport import Api, Resource
from operator_kit.runtime.cache import describe_object
from operator_kit.runtime.changes import WatchEvent
from operator_kit.runtime.controller import Controller, Watch
from operator_kit.runtime.controller import event_priority as priority_of
from operator_kit.runtime.filters import Filter, deletion_started
from operator_kit.runtime.filters import function_name as _name
from operator_kit.runtime.mapping import accepted, primary_keys
from operator_kit.runtime.objects import Objects, decode
from operator_kit.runtime.own_writes import OwnWrites
from operator_kit.runtime.queueing import NORMAL_PRIORITY
from operator_kit.runtime.scope import ShardScope
from operator_kit.runtime.triggers import Trigger, Triggers
from operator_kit.runtime.watching import Key

log = logging.getLogger("operator_kit.controller")


class EventSources:
    """The event handlers of a `ControllerRunner`: each maps an event to keys and hands
    them to `enqueue`. The attributes below are the runner's."""

    name: str
    controller: Controller[Any]
    api: Api
    objects: Objects
    shard: ShardScope | None
    resource: Resource
    labels: tuple[str, str]
    own_writes: OwnWrites | None
    own_primary_writes: OwnWrites
    _primary_filters: tuple[Filter, ...]
    _owner_group: str
    _owner_kind: str
    _namespaced: bool

    def enqueue(self, key: Key, delay: float = 0.0, priority: int = NORMAL_PRIORITY,
                trigger: Trigger | Triggers | None = None) -> None:
        raise NotImplementedError

    def _passes(self, filters: Sequence[Filter], event: WatchEvent, source: str) -> bool:
        """Whether `event` passes every filter; a filter that raises drops it (logged)."""
        for f in filters:
            try:
                if not f(event):
                    return False
            except Exception:
                log.exception("%s: filter %s on %s failed for %s: that event is dropped",
                              self.name, _name(f), source, describe_object(event.object))
                return False
        return True

    def on_primary(self, event: WatchEvent) -> None:
        if event.type != "DELETED" and self.own_primary_writes.take(event):
            return  # the finalizer this controller just wrote, or held until that returns
        self._enqueue_primary(event)

    def _enqueue_primary(self, event: WatchEvent) -> None:
        # Deletion always passes: the finalizer must run, and a gone key be forgotten;
        # so does a shard member's drain request (a label only).
        if deletion_started(event) or (self.shard is not None and self.shard.draining(
                event.object)) or self._passes(self._primary_filters, event,
                                                   str(self.resource)):
            meta = event.object["metadata"]
            self.enqueue((meta.get("namespace") or "", meta["name"]),
                         priority=priority_of(self.controller, event),
                         trigger=Trigger.of_event("primary", event, self._owner_kind))

    def _owned_handler(self, filters: tuple[Filter, ...]) -> Callable[[WatchEvent], None]:
        def on_owned(event: WatchEvent) -> None:
            own_writes = self.own_writes
            if event.type != "DELETED" and own_writes is not None and own_writes.take(event):
                return  # our own apply coming back (skip_own_echoes), or held until our
                # apply to the same name returns
            if event.type == "DELETED" or self._passes(filters, event, event.object["kind"]):
                self._enqueue_owners(event)
        return on_owned

    def _enqueue_owners(self, event: WatchEvent) -> None:
        keys: set[Key] = set()  # before and after: both owners may matter
        for obj in (event.object, event.old):
            if obj is None:
                continue
            meta = obj.get("metadata", {})
            for ref in meta.get("ownerReferences") or ():
                if (ref.get("controller") and ref.get("kind") == self._owner_kind
                        and ref.get("apiVersion", "").rpartition("/")[0] == self._owner_group):
                    keys.add((meta.get("namespace") or "" if self._namespaced else "",
                              ref["name"]))
        if keys:
            trigger = Trigger.of_event("owned", event)
            priority = priority_of(self.controller, event)
            for key in sorted(keys):
                self.enqueue(key, priority=priority, trigger=trigger)

    def _watched_handler(self, watch: Watch) -> Callable[[WatchEvent], None]:
        spec = Kind.of(watch.kind)
        filters = tuple(watch.filters)
        mapper = _name(watch.mapper)
        errors = metrics.MAPPER_ERRORS.labels(*self.labels, mapper)  # 0 from the start
        reported = threading.Event()  # its first bad result: an ERROR; later ones DEBUG

        def on_watched(event: WatchEvent) -> None:
            if event.type != "DELETED" and not self._passes(filters, event, str(spec)):
                return
            keys: set[Key] = set()
            for obj in (event.object, event.old):  # before and after: both may matter
                if obj is None:
                    continue
                try:
                    decoded = obj if watch.metadata_only else decode(spec, obj,
                                                                     self.api.client)
                    # A session of its own: a mapper's writes (if any) stay its own.
                    mapped = primary_keys(watch.mapper(decoded, self.objects.session()),
                                          self.resource, obj)
                except Exception:
                    errors.inc()
                    log.exception("%s: mapper %s failed for %s %s: that event is dropped",
                                  self.name, mapper, spec, describe_object(obj))
                    continue
                keys.update(mapped.keys)
                if mapped.errors:  # the valid keys still go to the queue
                    errors.inc()
                    log.log(logging.DEBUG if reported.is_set() else logging.ERROR,
                            "%s: mapper %s returned %s for %s %s: %s (its valid keys were "
                            "queued; its next errors are logged at DEBUG and counted in "
                            "operator_kit_mapper_errors_total)", self.name, mapper,
                            "; ".join(mapped.errors), spec, describe_object(obj),
                            accepted(self.resource))
                    reported.set()
            priority = priority_of(self.controller, event)
            trigger = Trigger.of_event("watched", event, spec.kind, via=mapper) if keys else None
            for key in sorted(keys):
                self.enqueue(key, priority=priority, trigger=trigger)
        return on_watched
