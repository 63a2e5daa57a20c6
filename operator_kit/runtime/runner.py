"""The runner: one controller's informer handlers, work queue and worker threads.

`ControllerRunner` turns a `Controller` declaration (controller.py) into running code:
it registers handlers on the shared informers (primary, owned, watched kinds), maps each
event to keys in its `WorkQueue`, and runs ``max_concurrent_reconciles`` workers. A
worker takes a key, reads the object from the cache, runs the finalizer state machine
and `Controller.reconcile` with a fresh `Context` (`finalize_or_reconcile`), and then
requeues, backs off after a failure, or forgets the key. Every add says why
(`Trigger`, triggers.py): the worker logs, counts and hands on the key's triggers. A
reconcile that outlives ``reconcile_timeout`` is abandoned and its key settled by the
watchdog (timeouts.py).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes.client.exceptions import ApiException

from operator_kit import logs, metrics, tracing
from operator_kit.api.kinds import KindSpec
from operator_kit.api.resources import InvalidResource
from operator_kit.client.events import EventRecorder
from operator_kit.client.fencing import FencedApi, Refusal
from operator_kit.client.transport import (
    Api,
    Resource,
    error_message,
    throttle_delay,
)
from operator_kit.runtime.cache import describe
from operator_kit.runtime.changes import WatchEvent
from operator_kit.runtime.children import OwnedKinds
from operator_kit.runtime.consistency import CaughtUp
from operator_kit.runtime.context import AlreadyOwned, Context
from operator_kit.runtime.controller import Action, Controller, checked_result, queue_flows
from operator_kit.runtime.filters import spec_changed
from operator_kit.runtime.finalizers import (
    Conflict,
    deletion_blocked_note,
    remove_finalizer,
    set_finalizers,
)
from operator_kit.runtime.objects import Objects, decode, metadata_of
from operator_kit.runtime.own_writes import OwnWrites
from operator_kit.runtime.queueing import NORMAL_PRIORITY, Backoff, WorkQueue
from operator_kit.runtime.scope import ShardScope
from operator_kit.runtime.sources import EventSources
from operator_kit.runtime.timeouts import REPLACEMENTS_PER_WORKER, Attempt, Watchdog
from operator_kit.runtime.triggers import Trigger, TriggerCounter, Triggers
from operator_kit.runtime.watching import Informer, Informers, Key

log = logging.getLogger("operator_kit.controller")


class ControllerRunner(EventSources):
    """Runs one controller: its informers' handlers, its queue and its worker threads."""

    def __init__(self, controller: Controller[Any], api: Api, *, field_manager: str,
                 recorder: EventRecorder, stop: threading.Event,
                 informers: Informers, objects: Objects | None = None,
                 may_reconcile: Callable[[], bool] = lambda: True,
                 shard: ShardScope | None = None, cluster: str | None = None,
                 shard_selector: str | None = None) -> None:
        self.controller = controller
        self.cluster = cluster  # a fleet member's name (operator_kit.fleet); None: the hub
        # A shard member's runner watches only the objects labelled with its identity.
        self.shard = shard
        self.may_reconcile = may_reconcile
        self.api = api
        self.name = controller.name if cluster is None else f"{controller.name}@{cluster}"
        self.stop = stop
        # The metrics' (controller, cluster): the controller's own name, and the member's
        self.labels = (controller.name, metrics.HUB if cluster is None else cluster)
        self.queue: WorkQueue[Key] = WorkQueue(
            controller.name, cluster=self.labels[1],
            flows=queue_flows(controller, self.labels, lambda k: self.primary_of(k).get(k)),
            failure_backoff=Backoff(base=controller.on_error, cap=controller.max_backoff))
        self.caught_up = CaughtUp(self.name)
        self.refused: dict[Key, float] = {}
        """Keys `enqueue` was asked for once the queue had shut down, with their delay."""
        self.objects = objects if objects is not None else Objects(
            api, informers, field_manager=field_manager)
        self.own_writes = OwnWrites(self._enqueue_owners) if controller.skip_own_echoes \
            else None
        # Its own finalizer writes to the primary objects: the reconcile that follows
        # sees the object as written, so their echoes are skipped.
        self.own_primary_writes = OwnWrites(self._enqueue_primary)
        self.context = Context(api, field_manager=field_manager, recorder=recorder,
                               controller=self.name, objects=self.objects,
                               own_writes=self.own_writes,
                               shard_label=shard.label if shard else None, cluster=cluster,
                               owns=OwnedKinds(self.name, controller.owned_kinds()))
        self.kind = controller.primary_kind()
        namespaces = controller.watch_namespaces()  # [None]: every namespace
        # By discovery for any kind but the operator's own (declared in code).
        self.resource = self._resource(self.kind, "resource")
        # Server-side sharding: the API server sends only the objects in `shard_selector`'s
        # hash ranges (operator_kit.election.shard_ranges); owned and watched kinds in full.
        self.primaries: dict[str | None, Informer] = dict(zip(namespaces, [informers.informer(
            self.resource, namespace=namespace, field_selector=controller.field_selector,
            label_selector=shard.selector(controller.label_selector) if shard
            else controller.label_selector, shard_selector=shard_selector,
            transform=controller.primary_transform())
            for namespace in (namespaces if self.resource.namespaced else [None])],
            strict=False))
        self._primary_filters = tuple(controller.filters if controller.filters is not None
                                      else (spec_changed,))
        # (informer, handler) for each owned and watched kind
        self._sources: list[tuple[Informer, Callable[[WatchEvent], None]]] = []
        for owned in controller.owned():
            on_owned = self._owned_handler(tuple(owned.filters))
            self._sources += [(i, on_owned) for i in informers.each(
                self._resource(owned.kind, "owns"), namespaces, metadata_only=owned.metadata_only,
                label_selector=shard.selector() if shard else None,
                transform=owned.transform)]
        for watch in controller.watches:
            on_watched = self._watched_handler(watch)
            self._sources += [(i, on_watched) for i in informers.each(
                self._resource(watch.kind, "watches"), namespaces,
                label_selector=watch.label_selector, metadata_only=watch.metadata_only,
                transform=watch.transform)]
        self.owned: list[Informer] = [informer for informer, _ in self._sources]
        for name, index in controller.indexes.items():
            resource = self._resource(index.kind, "indexes")
            for informer in [*self.primaries.values(), *self.owned]:
                if informer.resource == resource:
                    informer.store.add_index(name, index.over_cache(api.client))
        self._workers: list[threading.Thread] = []
        self.watchdog = Watchdog(self.name, timeout=controller.reconcile_timeout,
                                 max_spares=controller.max_concurrent_reconciles
                                 * REPLACEMENTS_PER_WORKER,
                                 stop=stop, start_worker=self._start_worker,
                                 on_timeout=self._timed_out, labels=self.labels)
        self._owner_group = self.resource.group
        self._owner_kind = self.resource.kind
        self._namespaced = self.resource.namespaced
        labels = self.labels
        self._reconciles = metrics.RECONCILES.labels(*labels)
        # Each with its controller-runtime twin (see operator_kit.metrics).
        self._errors = metrics.Both(metrics.RECONCILE_ERRORS.labels(*labels),
                                    metrics.CR_RECONCILE_ERRORS.labels(*labels))
        self._duration = metrics.Both(metrics.RECONCILE_DURATION.labels(*labels),
                                      metrics.CR_RECONCILE_TIME.labels(*labels))
        self._depth = metrics.QUEUE_DEPTH.labels(*labels)
        self._retries = metrics.Both(metrics.RETRIES.labels(*labels),
                                     metrics.WORKQUEUE_RETRIES.labels(labels[0], *labels))
        self._in_flight = metrics.Both(metrics.IN_FLIGHT.labels(*labels),
                                       metrics.CR_ACTIVE_WORKERS.labels(*labels))
        self._timeouts = metrics.CR_RECONCILE_TIMEOUTS.labels(*labels)
        self._triggers = TriggerCounter(*labels)
        metrics.init_controller(labels[0], controller.max_concurrent_reconciles, labels[1])
        self._results = {result: metrics.CR_RECONCILES.labels(*labels, result)
                         for result in metrics.RESULTS}  # looked up once, not per reconcile

    def _resource(self, kind: KindSpec, where: str) -> Resource:
        try:
            return self.objects.resource(kind)
        except LookupError as err:
            raise LookupError(f"controller {self.name}: {where}: {err}") from None

    # -- the queue -----------------------------------------------------------------------

    def enqueue(self, key: Key, delay: float = 0.0, priority: int = NORMAL_PRIORITY,
                trigger: Trigger | Triggers | None = None) -> None:
        self.queue.add(key, delay, priority, trigger)
        self._depth.set(len(self.queue))
        if self.queue.shutting_down:  # refused: a shard generation's successor queues it
            self.refused[key] = min(delay, self.refused.get(key, delay))

    # -- workers -------------------------------------------------------------------------

    def start(self) -> None:
        # Workers first: on caches synced already (a warm standby taking the Lease), the
        # handlers' replay of every cached key takes a while, and the first key it
        # queues is reconciled at once instead of after the last.
        for i in range(self.controller.max_concurrent_reconciles):
            self._start_worker(f"reconcile-{self.name}-{i}")
        watchdog = self.watchdog.start()
        if watchdog is not None:  # only with a reconcile_timeout
            self._workers.append(watchdog)
        for primary in self.primaries.values():
            primary.add_handler(self.on_primary)
        for informer, handler in self._sources:
            informer.add_handler(handler)

    def _start_worker(self, name: str) -> None:
        worker = threading.Thread(target=self._work, name=name, daemon=True)
        worker.start()
        # A new list, not an append: shut_down may be iterating over the old one.
        self._workers = [w for w in self._workers if w.is_alive()] + [worker]

    def _timed_out(self, attempt: Attempt, replaced: bool) -> None:
        """The watchdog abandoned `attempt` (its writes are fenced already): settle its
        key as a failed reconcile — released for a retry with backoff — and say so."""
        key, timeout = attempt.key, self.controller.reconcile_timeout
        triggers = self.queue.triggers(key)
        delay = self.queue.add_failure(key)
        self.queue.done(key)  # another worker may take the key now
        self._depth.set(len(self.queue))
        self._in_flight.dec()
        self._reconciles.inc()
        self._errors.inc()
        self._retries.inc()
        self._timeouts.inc()
        self._results["error"].inc()
        self._duration.observe(time.monotonic() - attempt.started)
        with logs.reconciling(self.name, *key, kind=self._owner_kind,
                             group=self._owner_group):
            log.error("%s: reconcile of %s timed out after %gs (reconcile_timeout): retrying "
                      "in %.1fs; its writes are refused from now on; %s", self.name,
                      describe(key), timeout, delay, "a new worker took its place" if replaced
                      else "no new worker took its place (as many timed-out reconciles "
                      "run already as are replaced): fewer workers until one returns",
                      extra=_why(triggers))
        raw = self.primary_of(key).get(key)
        if raw is not None:  # the same note each time, so the Event's count rises
            self.context.event(raw, True, "ReconcileTimeout",
                               f"reconcile ran longer than its reconcile_timeout of "
                               f"{timeout:g}s: retried with backoff; its further writes "
                               "are refused")

    def dead_threads(self) -> list[str]:
        """The names of this controller's threads that ended while they should run."""
        if self.stop.is_set():
            return []
        replaced = self.watchdog.replaced()
        return [t.name for t in self._workers if not t.is_alive() and t not in replaced]

    def primary_of(self, key: Key) -> Informer:
        """The cache of the primary kind that holds `key` (if any holds it)."""
        return self.primaries.get(key[0]) or next(iter(self.primaries.values()))

    def synced(self) -> bool:
        return all(i.synced.is_set() for i in [*self.primaries.values(), *self.owned])

    def shut_down(self, timeout: float) -> bool:
        """Hand out no more keys; wait up to `timeout` for reconciles in flight, and for
        the workers (abandoned ones after a timeout among them) in all, not each."""
        deadline = time.monotonic() + timeout
        self.queue.shut_down()
        idle = self.queue.wait_idle(timeout)
        for worker in list(self._workers):  # the watchdog may have added spares
            worker.join(max(0.1, deadline - time.monotonic()))
        return idle

    def _work(self) -> None:
        # As controller-runtime does: no reconcile before every cache has listed, or
        # ctx.owned would miss children that exist and a reconcile make them again.
        while not self.synced():
            if self.stop.wait(0.05) or self.queue.shutting_down:
                return
        while True:
            key = self.queue.get()
            if key is None:
                return
            if self._fenced(key, self.queue.triggers(key)):
                self.queue.done(key)
                continue
            held = True  # False: it timed out, and the watchdog released the key
            try:
                # every line logged carries the key
                with logs.reconciling(self.name, *key, kind=self._owner_kind,
                                      group=self._owner_group):
                    held = self._process(key)
            except Exception:
                log.exception("%s: unexpected error handling %s; retrying it with backoff",
                              self.name, describe(key))
                self.queue.add_failure(key)
            finally:
                if held:
                    self.queue.done(key)
                    self._depth.set(len(self.queue))
            if self.watchdog.retire():  # a new worker took its place after a timeout
                return

    def _fenced(self, key: Key, triggers: Triggers) -> bool:
        """Whether this replica may no longer start a reconcile (it may have lost the
        Lease); then `key` is kept, with why it is queued, for whoever leads next (it is
        queued again once released) while the operator is on its way out."""
        if self.may_reconcile():
            return False
        self.queue.add(key, trigger=triggers)
        self.stop.wait(0.5)
        return True

    def _process(self, key: Key) -> bool:
        """Reconcile `key` once and settle its queue entry; False when the reconcile
        timed out, so that the watchdog settled it instead (timeouts.py)."""
        triggers = self.queue.triggers(key)
        if not self.caught_up.ready(key, self.stop):  # its last pass's writes, not yet seen
            self.enqueue(key, CaughtUp.REQUEUE, trigger=triggers)  # postponed, same reasons
            return True
        raw = self.primary_of(key).get(key)
        if raw is None:  # deleted and gone (or not ours): nothing to reconcile
            self.queue.forget(key)
            self.caught_up.forget(key)
            return True
        if self.shard is not None and self.shard.draining(raw):
            self._let_go(key, raw)
            return True
        try:
            obj = decode(self.kind, raw, self.api.client)
        except InvalidResource as err:
            finalizer = self.controller.finalizer
            meta = raw.get("metadata", {})
            if meta.get("deletionTimestamp") and finalizer in (meta.get("finalizers") or ()):
                self._delete_invalid(key, raw, err)
                return True
            # A stored object that does not match the type: retrying cannot help until
            # someone changes it, so say so on the object and wait for that change.
            log.error("%s: %s", self.name, err)
            self.context.event(raw, True, "InvalidResource", str(err))
            self.queue.forget(key)
            return True
        # Checked again just before the reconcile: the wait for its last writes (or a
        # SIGSTOP) may have outlasted the Lease since the worker took the key.
        if self._fenced(key, triggers):
            return True
        self._triggers.count(triggers)
        self._in_flight.inc()
        attempt = self.watchdog.begin(key)
        action: Action | None = None
        failure: Exception | None = None
        try:
            with tracing.reconcile(self.name, self._owner_kind, *key, triggers):
                action = self.finalize_or_reconcile(
                    obj, None if self.watchdog.timeout is None else attempt.refusal)
        except Exception as err:  # noqa: BLE001 - settled below, or discarded
            failure = err
        if not self.watchdog.finish(attempt, failure):
            return False  # it timed out: the watchdog settled the key, this is discarded
        self._settle(key, obj, attempt.started, action, failure)
        return True

    def _settle(self, key: Key, obj: Any, started: float, action: Action | None,
                failure: Exception | None) -> None:
        """Count a reconcile that returned in time, and requeue, back off or forget."""
        result = "requeue"  # controller_runtime_reconcile_total's result label
        try:
            if failure is not None:
                raise failure  # sorted by kind below
            result = ("requeue_after" if action is not None and action.requeue_after is not None
                      else "success")
        except Conflict:
            self.enqueue(key, 0.2, trigger=_RETRY)  # our cache is behind: look again soon
            return
        except ApiException as err:
            if err.status == 404 and self._gone(obj):
                # Deleted while it was being reconciled (a write to it, or to its status,
                # found nothing): not a failure, and nothing is left to retry for.
                log.info("%s: %s was deleted while it was being reconciled (%s %s)",
                         self.name, describe(key), err.status, err.reason)
                result = "success"
                self.queue.forget(key)
                return
            if err.status != 429:
                result = "error"
                self._failed(key, obj, err)
                return
            # Throttled even after Api.request's retries (up to 10 after a Retry-After,
            # within the request's timeout): come back after Retry-After (1 s without one),
            # spread out so keys refused together do not return together, without
            # escalating the key's failure backoff or adding an Event to the load.
            self._retries.inc()
            self.enqueue(key, throttle_delay(err) * (1 + 2 * random.random()), trigger=_RETRY)
            return
        except Exception as err:  # noqa: BLE001 - any failure backs off and retries (logged)
            result = "error"
            metrics.CR_RECONCILE_PANICS.labels(*self.labels).inc()
            self._failed(key, obj, err)
            return
        finally:
            self._in_flight.dec()
            self._reconciles.inc()
            self._results[result].inc()
            self._duration.observe(time.monotonic() - started)
        after = action.requeue_after if action is not None else None
        if log.isEnabledFor(logging.DEBUG):  # only then are the changed fields compared
            triggers = self.queue.triggers(key)
            log.debug("%s: reconciled %s in %.3fs: %s; triggered by %s", self.name,
                      describe(key), time.monotonic() - started,
                      result if after is None else f"{result} {after:g}s", triggers,
                      extra=_why(triggers))
        self.queue.forget(key)
        if after is not None:
            self.enqueue(key, after, trigger=_REQUEUE)

    def _let_go(self, key: Key, raw: dict[str, Any]) -> None:
        """The sharder moves this object to another member: instead of reconciling it,
        remove its labels (if it is still the version seen) and forget it. It runs from
        the queue, so no reconcile of the key is in flight (operator_kit.sharding)."""
        shard = self.shard
        assert shard is not None
        try:
            shard.let_go(self.api, self.resource.path(key[0] or None, key[1]), raw)
        except ApiException as err:
            if err.status == 409:
                self.enqueue(key, 0.2, trigger=_RETRY)  # changed meanwhile: look again
                return
            if err.status != 404:
                raise
        log.info("%s: let go of %s: the sharder moves it to another member", self.name,
                 describe(key))
        self.queue.forget(key)

    def _failed(self, key: Key, obj: Any, err: Exception) -> None:
        """A failed reconcile: count it, back off, say so in the log and on the object."""
        self._errors.inc()
        self._retries.inc()
        # Another owner's child stays theirs until something changes: no quick retries
        # (its own Warning Event, AlreadyOwned, is already on the object).
        owned_elsewhere = isinstance(err, AlreadyOwned)
        delay = self.queue.add_failure(
            key, at_least=self.controller.max_backoff if owned_elsewhere else 0.0)
        message, triggers = error_message(err), self.queue.triggers(key)
        log.error("%s: reconcile of %s failed (attempt %d, retrying in %.1fs); triggered by %s",
                  self.name, describe(key), self.queue.failures(key), delay, triggers,
                  extra=logs.failure(err, message) | _why(triggers),
                  exc_info=not isinstance(err, ApiException | TypeError | AlreadyOwned))
        if not owned_elsewhere:
            # The same failure again is the same note, so its Event's count rises.
            self.context.event(obj, True, "ReconcileError", _clip(message))

    def _delete_invalid(self, key: Key, raw: dict[str, Any], err: InvalidResource) -> None:
        """An object being deleted, holding our finalizer, that no longer decodes (an
        upgrade added a required field, say): `Controller.cleanup_invalid` may clean it
        up from the raw dict; until something does, every retry says deletion is blocked
        and how to unblock it by hand."""
        finalizer = str(self.controller.finalizer)
        try:
            self.controller.cleanup_invalid(raw, self.context, err)
            self._remove_finalizer(raw, finalizer, self.api)
            self.queue.forget(key)
            log.info("%s: %s did not decode (%s); cleanup_invalid ran and its finalizer "
                     "was removed", self.name, describe(key), err)
            return
        except Exception as failure:  # noqa: BLE001 - reported below, retried with backoff
            reason = error_message(failure)
        delay = self.queue.add_failure(key)
        note = deletion_blocked_note(self.resource, key, raw, finalizer, err, reason)
        log.error("%s: %s: %s (retrying in %.1fs)", self.name, describe(key), note, delay)
        self.context.event(raw, True, "DeletionBlocked", note, action="Cleanup")

    def _remove_finalizer(self, raw: Mapping[str, Any], finalizer: str, api: Api) -> None:
        remove_finalizer(raw, finalizer, api, resource=self.resource,
                         writes=self.own_primary_writes, controller=self.name)

    def _gone(self, obj: Any) -> bool:
        """Whether `obj` no longer exists (a 404 from a reconcile may be about another
        object, a missing Secret say, which is a real failure). An object since created
        again under the same name is a different one (new uid): its own watch event
        brings it here. Asked where the kind is watched: a fleet member's primary kind may
        live on the hub (a FanOut's), and the member's API server would say 404."""
        meta = metadata_of(obj, self.api.client)
        namespace, name = meta.get("namespace"), str(meta.get("name"))
        where = self.primary_of((namespace or "", name)).api
        try:
            current = where.request("GET", self.resource.path(namespace, name))
        except ApiException as err:
            return bool(err.status == 404)
        except Exception:  # noqa: BLE001 - cannot tell: count the reconcile as failed
            return False
        return bool(current.get("metadata", {}).get("uid") != meta.get("uid"))

    def _reconcile(self, obj: Any, refusal: Refusal | None) -> Action | None:
        meta = metadata_of(obj, self.api.client)
        key = (meta.get("namespace") or "", str(meta.get("name")))
        ctx = self.context.for_object(obj, refusal, self.queue.triggers(key))
        try:
            return checked_result(self.controller.reconcile(obj, ctx))
        finally:  # the next reconcile of obj reads these writes (consistency.py)
            if refusal is None or refusal() is None:  # not once it timed out
                self.caught_up.remember(key, ctx.objects.unseen_writes())

    def finalize_or_reconcile(self, obj: Any, refusal: Refusal | None = None) -> Action | None:
        """One pass of the finalizer state machine (see controller.py) for `obj`, with
        reconcile or cleanup (at most once) run in this thread; `Conflict` when our copy
        is stale as the finalizer is added, or its removal kept conflicting. With
        `refusal` (its timeout), every write of the pass is fenced by it."""
        finalizer = self.controller.finalizer
        meta = metadata_of(obj, self.api.client)
        if finalizer is None:
            if meta.get("deletionTimestamp"):
                return None  # being deleted by others' finalizers: nothing to make
            return self._reconcile(obj, refusal)
        api = self.api if refusal is None else FencedApi(self.api, refusal)
        finalizers = list(meta.get("finalizers") or ())
        if meta.get("deletionTimestamp"):
            if finalizer in finalizers:
                self.controller.cleanup(obj, self.context.for_object(obj, refusal))
                self._remove_finalizer({"metadata": meta}, finalizer, api)
            return None
        if finalizer not in finalizers:
            obj = set_finalizers(obj, self.resource, [*finalizers, finalizer], api,
                                 writes=self.own_primary_writes)
        return self._reconcile(obj, refusal)


_RETRY, _REQUEUE = Trigger("retry"), Trigger("requeue")


def _why(triggers: Triggers) -> dict[str, object]:
    """A reconcile's outcome line's ``extra=``: its kept triggers and how many it had."""
    return {"triggers": triggers.as_list(), "triggerCount": triggers.total}


def _clip(note: str, limit: int = 280) -> str:
    return note if len(note) <= limit else note[:limit - 1] + "…"
