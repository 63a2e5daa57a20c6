"""The sharded controllers on one set of slots (server mode), and what a kept slot carries.

A `RangeKeeper` (`operator_kit.election.range_keeper`) serves its slots through a
*generation*: the sharded controllers' runners on informers of their own, the primary
ones listing and watching with the slots' ``shardSelector``. When the member's slots
change, the generation stops (its reconciles return first) and a new one starts on the
new selector: the API server cannot change a watch's selector, so the primary watches
must be opened again.

**Kept objects are not reconciled again.** A new generation's lists would bring every
object of the slots it keeps as new, and queue each (a ``resync``). Instead the stopped
generation hands over what it saw (`Carried`): each cache's objects, by what the cache
watches (its kind, namespace and selectors, the shard selector aside), and the keys
still waiting in each controller's queue, with their delay. The new generation's caches
start from those objects — the primary caches only from the objects in the slots kept —
before their first list, and a list reports only its difference from the cache
(`operator_kit.runtime.watching`): an object of a kept slot unchanged meanwhile makes no
event and is not queued; one changed meanwhile is queued once, like any change; one in a
slot gained is queued (its new owner reconciles it); and the keys that were waiting are
queued again, after what remained of their delay. Their failure counts start again.

A generation stops its informers first, then its runners: every event a cache applied
was handed to a queue still open, so a carried object is either settled or waiting. A
reconcile in flight when the queue shut down that asks for its key again (a requeue, a
retry) is noted by the runner (`ControllerRunner.refused`) and carried too.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from operator_kit.client.events import EventRecorder
from operator_kit.client.transport import Api
from operator_kit.election.shard_probe import SelectorRefused, refusal
from operator_kit.election.shard_ranges import SLOTS, ranges_of, selector, slot_of, uid_hash
from operator_kit.election.sharder import FencedApi
from operator_kit.runtime.objects import Objects
from operator_kit.runtime.runner import ControllerRunner
from operator_kit.runtime.triggers import Trigger
from operator_kit.runtime.watching import Informer, Informers, Key

__all__ = ["Carried", "RunnerGeneration", "generations"]

log = logging.getLogger("operator_kit.sharding")

_CARRIED = Trigger("resync")

CacheKey = tuple[Any, ...]
"""What a cache watches, its shard selector aside (`cache_key`)."""


def cache_key(informer: Informer) -> CacheKey:
    """The informer's kind, namespace, selectors and transform, not its shard selector:
    the caches of two generations that watch the same thing have the same key."""
    return (informer.resource, informer.namespace, informer.label_selector,
            informer.field_selector, informer.metadata_only, informer.transform)


def in_slots(obj: Mapping[str, Any], slots: frozenset[int], count: int = SLOTS) -> bool:
    """Whether `obj`'s uid hashes into one of `slots` (as the API server filters)."""
    uid = (obj.get("metadata") or {}).get("uid")
    return isinstance(uid, str) and slot_of(uid_hash(uid), count) in slots


@dataclass
class Carried:
    """What a stopped generation hands the next (module docstring): `caches`, each
    cache's objects by `cache_key` (the primary caches' marked in `primary`), and
    `waiting`, the keys still queued per controller with the seconds they had to wait."""

    caches: dict[CacheKey, dict[Key, dict[str, Any]]] = field(default_factory=dict)
    primary: set[CacheKey] = field(default_factory=set)
    waiting: dict[str, dict[Key, float]] = field(default_factory=dict)

    @classmethod
    def of(cls, runners: Sequence[ControllerRunner], informers: Informers) -> Carried:
        """Read from stopped `runners` (their queues shut down, no reconcile in flight)
        and their `informers`."""
        carried = cls()
        for informer in informers.values():
            key = cache_key(informer)
            carried.caches[key] = {k: o for o in informer.objects()
                                   if (k := _key(o)) is not None}
            if informer.shard_selector is not None:
                carried.primary.add(key)
        for runner in runners:
            waiting = dict(runner.refused)  # requeued by reconciles that ended meanwhile
            queue = runner.queue
            for primary in runner.primaries.values():
                for obj in primary.objects():
                    found = _key(obj)
                    if found is None:
                        continue
                    if queue.priority_of(found) is not None:  # queued, or delayed
                        delay = queue.scheduled_in(found) or 0.0
                    elif queue.failures(found):  # failed as the queue shut down
                        delay = queue.failure_backoff.delay(queue.failures(found))
                    else:
                        continue
                    waiting[found] = min(delay, waiting.get(found, delay))
            carried.waiting[runner.name] = waiting
        return carried

    def seed(self, informers: Informers, slots: frozenset[int], count: int = SLOTS) -> int:
        """Fill `informers`' caches (not started yet, so no handler is told) from what
        was carried: every object of a cache that watches the same, for a primary cache
        only those in `slots`. The number of primary objects kept."""
        kept = 0
        for informer in informers.values():
            key = cache_key(informer)
            objects = self.caches.get(key)
            if not objects or informer.started:
                continue
            if key in self.primary:
                objects = {k: o for k, o in objects.items() if in_slots(o, slots, count)}
                kept += len(objects)
            informer.store.replace(dict(objects))
        return kept

    def requeue(self, runner: ControllerRunner) -> int:
        """Queue again in `runner` the keys its predecessor had waiting that are still in
        its primary caches (the slots kept); how many."""
        count = 0
        for key, delay in self.waiting.get(runner.name, {}).items():
            if runner.primary_of(key).get(key) is not None:
                runner.enqueue(key, delay, trigger=_CARRIED)
                count += 1
        return count


def _key(obj: Mapping[str, Any]) -> Key | None:
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    return (meta.get("namespace") or "", str(name)) if name else None


class RunnerGeneration:
    """The sharded controllers' runners on one set of slots, on informers of their own
    (stopped with them): what `RangeKeeper` starts and stops
    (`operator_kit.election.range_keeper.Generation`). `on_stopped` is told which
    runners ended; `stopping` is the operator's stop (a stop then waits no longer for
    reconciles in flight: the process is on its way out)."""

    WAIT_LOG = 10.0
    """Seconds between the lines saying reconciles in flight hold a release up."""

    def __init__(self, runners: list[ControllerRunner], informers: Informers,
                 stop: threading.Event, *, stopping: threading.Event,
                 on_stopped: Callable[[list[ControllerRunner]], None],
                 slots: frozenset[int] = frozenset(), count: int = SLOTS,
                 watch_stop: threading.Event | None = None) -> None:
        self.runners = runners
        self.slots = slots
        self._informers = informers
        self._stop = stop
        self._watch_stop = watch_stop if watch_stop is not None else stop
        self._stopping = stopping
        self._on_stopped = on_stopped
        self._count = count

    def start(self, carried: Carried | None = None) -> None:
        """Start the runners (their handlers on empty caches), fill the caches from
        `carried`, then start the informers: their first lists queue only what differs
        from what was carried."""
        for runner in self.runners:
            runner.start()
        if carried is not None:
            kept = carried.seed(self._informers, self.slots, self._count)
            requeued = sum(carried.requeue(runner) for runner in self.runners)
            log.debug("%d object(s) of the kept slots carried over, %d queued again", kept,
                      requeued)
        self._informers.start()

    def cached(self) -> int:
        return sum(len(i) for r in self.runners for i in r.primaries.values())

    def stop(self) -> None:
        """The informers first (every event they applied to a cache has then been
        queued), then the runners: no key is handed out, the reconciles in flight return."""
        started = time.monotonic()
        self._watch_stop.set()
        self._informers.interrupt()
        self._informers.join(time.monotonic() + 5.0)
        for runner in self.runners:
            while not runner.shut_down(self.WAIT_LOG) and not self._stopping.is_set():
                log.warning("%s: reconciles still running %.0fs after its slots were "
                            "released; the slots move once they return", runner.name,
                            time.monotonic() - started)
        self._stop.set()
        self._on_stopped(self.runners)

    def carry(self) -> Carried:
        """What the next generation starts from (after `stop`)."""
        return Carried.of(self.runners, self._informers)


def generations(api: Api, controllers: Sequence[Any], *, field_manager: str,
                may_reconcile: Callable[[], bool], stopping: threading.Event,
                informers: Callable[[threading.Event], Informers],
                started: Callable[[list[ControllerRunner]], bool],
                stopped: Callable[[list[ControllerRunner]], None], count: int = SLOTS,
                ) -> Callable[[frozenset[int], Carried | None], RunnerGeneration]:
    """What `RangeKeeper` calls to start `controllers` on `slots` (of `count`): runners
    whose reconciles write through the member's fence (`FencedApi`), on informers of
    their own (`informers(stop)`) whose primary ones select the slots' hash ranges,
    filled from what the previous generation carried; `SelectorRefused` (nothing
    started) when the API server refuses that selector (`shard_probe.refusal`: one
    LIST with ``limit=1`` per primary collection); `started` is told of them (False:
    the operator is stopping, so they are not started) and `stopped` when they end."""

    def make(slots: frozenset[int], carried: Carried | None) -> RunnerGeneration:
        stop, watch_stop = threading.Event(), threading.Event()
        caches = informers(watch_stop)
        fenced = FencedApi(api, may_reconcile)
        objects = Objects(fenced, caches, field_manager=field_manager)
        recorder = EventRecorder(api, field_manager)
        shard_selector = selector(ranges_of(slots, count))
        runners = [ControllerRunner(
            controller, fenced, field_manager=field_manager, recorder=recorder, stop=stop,
            informers=caches, objects=objects, may_reconcile=may_reconcile,
            shard_selector=shard_selector) for controller in controllers]
        for runner in runners:  # before anything starts: a refusal ends server mode
            for primary in runner.primaries.values():
                path = primary.resource.path(primary.namespace)
                why = refusal(api, path, shard_selector)
                if why is not None:
                    raise SelectorRefused(f"the API server refused the shard selector of "
                                          f"slots {len(slots)} of {count} on {path} ({why})")
        generation = RunnerGeneration(runners, caches, stop, stopping=stopping,
                                      on_stopped=stopped, slots=slots, count=count,
                                      watch_stop=watch_stop)
        if started(runners):
            generation.start(carried)
        return generation

    return make
