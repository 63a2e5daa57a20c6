"""Controllers: make the world match each object of one kind, one object at a time.

Reconciling is *level-based*: `Controller.reconcile` gets the current object (from the
informer's cache) and makes everything it is responsible for match it. It is never told
what changed — only that something may have — so a missed, repeated or coalesced
notification cannot make it wrong; it just looks again.

How a change reaches `reconcile`, top to bottom::

    Informer (watching.py)  list + watch the primary kind and each owned kind
        │  WatchEvent            primary: its key; owned: its controller owner's key
        ▼
    WorkQueue (queueing.py)  de-duplicates keys; one worker per key at a time; delays
        │  key
        ▼
    _Runner._process         the finalizer state machine, then reconcile, then
                             requeue / failure backoff / forget

The finalizer, when a controller names one, follows four states:

    not deleting, finalizer absent   → add it (a merge patch carrying resourceVersion,
                                       so it is added exactly once), then reconcile
    not deleting, finalizer present  → reconcile
    deleting, finalizer present      → cleanup(); if it returns, remove the finalizer
                                       (failing → keep it, retry with backoff)
    deleting, finalizer absent       → nothing to do

A change that touches only ``status`` (and bookkeeping metadata) does not queue the
object again, so a controller writing its own status does not reconcile in a loop.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from operator_kit import metrics
from operator_kit.client import Api, Resource, throttle_delay
from operator_kit.events import EventRecorder
from operator_kit.queueing import Backoff, WorkQueue
from operator_kit.rbac import Rule, guess_plural
from operator_kit.resources import CustomResource, InvalidResource
from operator_kit.watching import Informer, Key, WatchEvent

log = logging.getLogger("operator_kit.controller")

R = TypeVar("R", bound=CustomResource)


@dataclass(frozen=True)
class Action:
    """What to do after a reconcile: look again after a delay, or wait for a change."""

    requeue_after: float | None = None

    @classmethod
    def requeue(cls, seconds: float) -> Action:
        """Reconcile this object again after `seconds`, even if nothing changes."""
        if seconds < 0:
            raise ValueError("requeue delay must be >= 0")
        return cls(float(seconds))

    @classmethod
    def await_change(cls) -> Action:
        """Reconcile this object again only when it (or something it owns) changes."""
        return cls(None)


@dataclass(frozen=True)
class Kind:
    """An apiVersion and kind, for owned built-in kinds: ``Kind("batch/v1", "CronJob")``."""

    api_version: str
    kind: str
    plural: str = ""

    @classmethod
    def of(cls, spec: str | Kind | type[CustomResource]) -> Kind:
        if isinstance(spec, Kind):
            return spec
        if isinstance(spec, str):
            api_version, _, kind = spec.rpartition("/")
            if not api_version or not kind:
                raise ValueError(f"owned kind {spec!r} must read 'apiVersion/Kind', "
                                 "e.g. 'batch/v1/CronJob' or 'v1/ConfigMap'")
            return cls(api_version, kind)
        return cls(spec.api_version(), spec.kind, spec.plural)

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def resource_name(self) -> str:
        return self.plural or guess_plural(self.kind)


class Context:
    """What a reconcile gets besides the object: the client and the operator's helpers."""

    def __init__(self, api: Api, *, field_manager: str, recorder: EventRecorder,
                 controller: str, own_writes: OwnWrites | None = None) -> None:
        self.api = api
        self._own_writes = own_writes
        self.client: client.ApiClient = api.client
        self.field_manager = field_manager
        self.controller = controller
        self.log = logging.getLogger(f"operator_kit.controller.{controller}")
        self._recorder = recorder

    def patch_status(self, obj: R, status: Mapping[str, Any] | Any) -> R:
        """Merge-patch `status` (a dict, or the kind's status dataclass) into the status
        subresource; returns the object as the API server now has it."""
        if dataclasses.is_dataclass(status) and not isinstance(status, type):
            copy = type(obj).from_dict(obj.to_dict())
            copy.status = status
            patch = copy.to_dict().get("status", {})
        elif isinstance(status, Mapping):
            patch = dict(status)
        else:
            raise TypeError("patch_status takes a dict or the kind's status dataclass")
        resource = _resource_of(type(obj))
        updated = self.api.request(
            "PATCH", resource.path(obj.namespace, obj.name, "status"),
            body={"status": patch}, content_type="application/merge-patch+json")
        return type(obj).from_dict(updated)

    def apply_owned(self, owner: CustomResource, child: Any) -> dict[str, Any]:
        """Server-side apply `child` with a controller ownerReference to `owner`.

        `child` is a dict, a kubernetes client model, or a CustomResource. The field
        manager is the operator's name; deleting the owner garbage-collects the child.
        """
        if isinstance(child, CustomResource):
            body = child.to_dict()
        elif isinstance(child, Mapping):
            body = dict(child)
        else:
            body = self.client.sanitize_for_serialization(child)
        if "apiVersion" not in body or "kind" not in body:
            raise ValueError("apply_owned needs the child's apiVersion and kind")
        resource = self.api.resource_for(body["apiVersion"], body["kind"])
        meta = dict(body.get("metadata") or {})
        if resource.namespaced and not meta.get("namespace"):
            meta["namespace"] = owner.namespace
        meta["ownerReferences"] = [owner_reference(owner)]
        body["metadata"] = meta
        def send() -> dict[str, Any]:
            result: dict[str, Any] = self.api.apply(body, field_manager=self.field_manager)
            return result

        if self._own_writes is None:
            return send()
        return self._own_writes.write(str(meta.get("namespace") or ""),
                                      str(meta.get("name") or ""), send)

    def event(self, obj: CustomResource | Mapping[str, Any], warning: bool, reason: str,
              note: str) -> None:
        """Post a core Event on `obj` (shown by ``kubectl describe``); repeats aggregate."""
        body = obj.to_dict() if isinstance(obj, CustomResource) else dict(obj)
        self._recorder.event(body, warning=warning, reason=reason, note=note)


class OwnWrites:
    """The resourceVersions of owned objects this controller just wrote.

    The watch then reports each such write back as a change to an owned object, which
    would reconcile its owner a second time for nothing: the reconcile that wrote it
    already saw the world as it now is. Events carrying a remembered version are
    skipped (once); any later change — by anyone — has a new version and counts.

    The echo often arrives before the write's own answer has been read (on a quick
    network, about a third of the time): while a write to a name is in flight (`begin`),
    that name's events are held; when the write ends (`end`), the one carrying its
    version is dropped and the rest go to `deliver`, as they would have at once. A
    version whose echo never comes (an apply that changed nothing) is forgotten after
    `ttl` seconds, and at most `limit` are kept.
    """

    def __init__(self, deliver: Callable[[WatchEvent], None], *, limit: int = 10_000,
                 ttl: float = 120.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._deliver = deliver
        self._versions: OrderedDict[str, float] = OrderedDict()  # version -> when written
        self._in_flight: dict[tuple[str, str], int] = {}  # (namespace, name) -> writes
        self._held: dict[tuple[str, str], list[WatchEvent]] = {}
        self._limit = limit
        self._ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()

    def begin(self, namespace: str, name: str) -> None:
        """A write to `namespace`/`name` is about to be sent."""
        with self._lock:
            key = (namespace, name)
            self._in_flight[key] = self._in_flight.get(key, 0) + 1

    def end(self, namespace: str, name: str, written: Mapping[str, Any] | None) -> None:
        """The write ended: `written` is the object it returned (None if it failed)."""
        with self._lock:
            key = (namespace, name)
            if written is not None:
                self._remember(written)
            left = self._in_flight.get(key, 1) - 1
            if left > 0:
                self._in_flight[key] = left
                return
            self._in_flight.pop(key, None)
            held = self._held.pop(key, [])
            passed = [event for event in held if not self._forget(event.object)]
        for event in passed:
            self._deliver(event)

    def write(self, namespace: str, name: str,
              send: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """`send` the write to `namespace`/`name` between `begin` and `end`; its result."""
        self.begin(namespace, name)
        written: dict[str, Any] | None = None
        try:
            written = send()
            return written
        finally:
            self.end(namespace, name, written)

    def take(self, event: WatchEvent) -> bool:
        """True if `event` is handled here: the echo of our write (dropped), or an event
        held until the write in flight to the same name ends."""
        meta = event.object.get("metadata", {})
        key = (meta.get("namespace") or "", meta.get("name") or "")
        with self._lock:
            if self._forget(event.object):
                return True
            if key in self._in_flight:
                self._held.setdefault(key, []).append(event)
                return True
            return False

    def __len__(self) -> int:
        with self._lock:
            return len(self._versions)

    def _remember(self, obj: Mapping[str, Any]) -> None:
        version = obj.get("metadata", {}).get("resourceVersion")
        now = self._clock()
        if version:
            self._versions[str(version)] = now
            self._versions.move_to_end(str(version))
        while self._versions and (len(self._versions) > self._limit
                                  or next(iter(self._versions.values())) < now - self._ttl):
            self._versions.popitem(last=False)

    def _forget(self, obj: Mapping[str, Any]) -> bool:
        version = obj.get("metadata", {}).get("resourceVersion")
        return self._versions.pop(str(version), None) is not None


def owner_reference(owner: CustomResource) -> dict[str, Any]:
    if not owner.uid:
        raise ValueError(f"{owner.kind} {owner.name} has no uid: read it from the API first")
    return {"apiVersion": owner.api_version(), "kind": owner.kind, "name": owner.name,
            "uid": owner.uid, "controller": True, "blockOwnerDeletion": True}


def _resource_of(kind: type[CustomResource]) -> Resource:
    group, _, version = kind.api_version().rpartition("/")
    return Resource(group, version, kind.plural, kind.kind, kind.namespaced)


class Controller(Generic[R]):
    """Subclass, name the `resource`, and write `reconcile`.

    Class attributes configure it (all optional but `resource`):
    ``owns`` (kinds whose changes reconcile their controller owner: CustomResource
    classes, ``"batch/v1/CronJob"`` strings or `Kind`), ``finalizer`` (a name; then
    `cleanup` runs before the object goes), ``namespace`` (None: all),
    ``label_selector``, ``field_selector``, ``max_concurrent_reconciles``, ``on_error``
    (first retry delay after a failure, doubling up to ``max_backoff``),
    ``reconcile_timeout`` (a reconcile running longer is reported as stuck and another
    worker started in its place), ``rules``
    (extra RBAC rules reconcile needs) and ``name`` (default: the kind, lower case).
    """

    resource: type[CustomResource]
    owns: Sequence[str | Kind | type[CustomResource]] = ()
    finalizer: str | None = None
    namespace: str | None = None
    label_selector: str | None = None
    field_selector: str | None = None
    max_concurrent_reconciles: int = 1
    on_error: float = 5.0
    max_backoff: float = 300.0
    reconcile_timeout: float = 300.0
    rules: Sequence[Rule] = ()
    name: str = ""

    def __init__(self) -> None:
        if not isinstance(getattr(self, "resource", None), type) or not issubclass(
                self.resource, CustomResource):
            raise TypeError(f"{type(self).__name__}.resource must name a CustomResource class")
        if not self.name:
            self.name = self.resource.kind.lower()
        if self.max_concurrent_reconciles < 1:
            raise ValueError("max_concurrent_reconciles must be at least 1")

    def reconcile(self, obj: R, ctx: Context) -> Action:
        """Make the world match `obj`. Raise to retry with backoff."""
        raise NotImplementedError(f"{type(self).__name__} must define reconcile()")

    def cleanup(self, obj: R, ctx: Context) -> None:
        """Undo what reconcile did outside the cluster; runs once the object is being
        deleted, before the finalizer is removed. Raise to keep the finalizer and retry."""

    def owned_kinds(self) -> list[Kind]:
        return [Kind.of(spec) for spec in self.owns]

    def required_rules(self) -> list[Rule]:
        """What this controller needs: its kind, its status, finalizers, owned kinds."""
        kind = self.resource
        rules = [
            Rule([kind.group], [kind.plural], ["get", "list", "watch", "patch", "update"]),
            Rule([kind.group], [f"{kind.plural}/status"], ["get", "patch", "update"]),
        ]
        if self.owns:
            # Owner references with blockOwnerDeletion need update on the owner's
            # finalizers where the OwnerReferencesPermissionEnforcement plugin is on.
            rules.append(Rule([kind.group], [f"{kind.plural}/finalizers"], ["update"]))
        for owned in self.owned_kinds():
            # Server-side apply creates or patches; the garbage collector deletes.
            rules.append(Rule([owned.group], [owned.resource_name],
                              ["get", "list", "watch", "create", "patch"]))
        rules.append(Rule([""], ["events"], ["create", "patch", "get"]))
        rules.extend(self.rules)
        return rules


def meaningful_change(event: WatchEvent) -> bool:
    """False for an update that changed only status and bookkeeping metadata."""
    if event.type != "MODIFIED" or event.old is None:
        return True
    old, new = event.old.get("metadata", {}), event.object.get("metadata", {})
    if "generation" not in new:  # kinds without generation: any change counts
        return True
    return any(old.get(field) != new.get(field) for field in (
        "generation", "labels", "annotations", "finalizers", "deletionTimestamp",
        "ownerReferences"))


class ControllerRunner:
    """Runs one controller: its informers' handlers, its queue and its worker threads."""

    def __init__(self, controller: Controller[Any], api: Api, *, field_manager: str,
                 recorder: EventRecorder, stop: threading.Event,
                 informer_for: Any, may_reconcile: Callable[[], bool] = lambda: True) -> None:
        self.controller = controller
        self.may_reconcile = may_reconcile
        self.api = api
        self.name = controller.name
        self.stop = stop
        self.queue: WorkQueue[Key] = WorkQueue(
            self.name, failure_backoff=Backoff(base=controller.on_error,
                                               cap=controller.max_backoff))
        self.own_writes = OwnWrites(self._enqueue_owners)
        # Its own finalizer writes to the primary objects, whose echoes are skipped alike.
        self.own_primary_writes = OwnWrites(self._enqueue_primary)
        self.context = Context(api, field_manager=field_manager, recorder=recorder,
                               controller=self.name, own_writes=self.own_writes)
        kind = controller.resource
        self.primary: Informer = informer_for(_resource_of(kind), controller)
        self.owned: list[Informer] = []
        for owned in controller.owned_kinds():
            resource = api.resource_for(owned.api_version, owned.kind)
            self.owned.append(informer_for(resource, controller, owned=True))
        self._workers: list[threading.Thread] = []
        # key -> (monotonic start, its worker), for the watchdog
        self._running: dict[Key, tuple[float, threading.Thread]] = {}
        self._running_lock = threading.Lock()
        # Workers a spare replaced while they were stuck; each exits once its reconcile
        # returns, so there are as many spares running as there are workers in here.
        self._retiring: set[threading.Thread] = set()
        self._owner_group = kind.group
        self._owner_kind = kind.kind
        self._namespaced = kind.namespaced
        self._reconciles = metrics.RECONCILES.labels(self.name)
        self._errors = metrics.RECONCILE_ERRORS.labels(self.name)
        self._duration = metrics.RECONCILE_DURATION.labels(self.name)
        self._depth = metrics.QUEUE_DEPTH.labels(self.name)
        self._retries = metrics.RETRIES.labels(self.name)
        self._in_flight = metrics.IN_FLIGHT.labels(self.name)
        self._stuck = metrics.STUCK.labels(self.name)

    # -- events → keys -------------------------------------------------------------------

    def on_primary(self, event: WatchEvent) -> None:
        if event.type != "DELETED" and self.own_primary_writes.take(event):
            return  # the finalizer this controller just wrote, or held until that returns
        self._enqueue_primary(event)

    def _enqueue_primary(self, event: WatchEvent) -> None:
        if event.type == "DELETED" or meaningful_change(event):
            meta = event.object["metadata"]
            self.enqueue((meta.get("namespace") or "", meta["name"]))

    def on_owned(self, event: WatchEvent) -> None:
        if event.type != "DELETED" and self.own_writes.take(event):
            return  # our own apply coming back (the reconcile that made it is up to date),
            # or held until our apply to the same name returns
        self._enqueue_owners(event)

    def _enqueue_owners(self, event: WatchEvent) -> None:
        for obj in (event.object, event.old):
            if obj is None:
                continue
            meta = obj.get("metadata", {})
            for ref in meta.get("ownerReferences") or ():
                if (ref.get("controller") and ref.get("kind") == self._owner_kind
                        and ref.get("apiVersion", "").rpartition("/")[0] == self._owner_group):
                    namespace = meta.get("namespace") or "" if self._namespaced else ""
                    self.enqueue((namespace, ref["name"]))

    def enqueue(self, key: Key, delay: float = 0.0) -> None:
        self.queue.add(key, delay)
        self._depth.set(len(self.queue))

    # -- workers -------------------------------------------------------------------------

    def start(self) -> None:
        self.primary.add_handler(self.on_primary)
        for informer in self.owned:
            informer.add_handler(self.on_owned)
        for i in range(self.controller.max_concurrent_reconciles):
            self._start_worker(f"reconcile-{self.name}-{i}")
        watchdog = threading.Thread(target=self._watch_stuck, name=f"watchdog-{self.name}",
                                    daemon=True)
        watchdog.start()
        self._workers.append(watchdog)

    def _start_worker(self, name: str) -> None:
        worker = threading.Thread(target=self._work, name=name, daemon=True)
        worker.start()
        # A new list, not an append: shut_down may be iterating over the old one.
        self._workers = [w for w in self._workers if w.is_alive()] + [worker]

    def _watch_stuck(self) -> None:
        """Report reconciles running past ``reconcile_timeout`` (once each), and replace
        their workers.

        A Python thread cannot be stopped from outside, so a hung reconcile keeps its key
        and its thread. The watchdog makes it visible (an error log, a Warning Event on
        the object, the ``..._stuck_reconciles`` gauge) and starts another worker in its
        place, so other keys are still reconciled even with one worker; the stuck one
        exits once its reconcile returns. At most ``max_concurrent_reconciles`` such
        spares run at once, which bounds the threads when everything hangs."""
        timeout = self.controller.reconcile_timeout
        reported: set[tuple[Key, float]] = set()
        spares_started = 0
        while not self.stop.wait(min(1.0, timeout / 4)):
            now = time.monotonic()
            with self._running_lock:
                running = dict(self._running)
            stuck = {(key, started) for key, (started, _) in running.items()
                     if now - started > timeout}
            self._stuck.set(len(stuck))
            for key, started in stuck - reported:
                replaced = False
                with self._running_lock:
                    worker = running[key][1]
                    if (len(self._retiring) < self.controller.max_concurrent_reconciles
                            and worker not in self._retiring and not self.stop.is_set()):
                        self._retiring.add(worker)
                        replaced = True
                if replaced:
                    spares_started += 1
                    self._start_worker(f"reconcile-{self.name}-spare-{spares_started}")
                log.error("%s: reconcile of %s has run for %.0fs (reconcile_timeout %gs): "
                          "it may be hung on a call without a timeout; %s", self.name,
                          _describe(key), now - started, timeout,
                          "another worker was started in its place" if replaced else
                          "no spare worker left to start in its place")
                raw = self.primary.get(key)
                if raw is not None:
                    self.context.event(raw, True, "ReconcileStuck",
                                       f"reconcile has run for more than {timeout:g}s")
            reported = stuck

    def synced(self) -> bool:
        return self.primary.synced.is_set() and all(i.synced.is_set() for i in self.owned)

    def shut_down(self, timeout: float) -> bool:
        """Hand out no more keys; wait up to `timeout` for reconciles in flight."""
        self.queue.shut_down()
        idle = self.queue.wait_idle(timeout)
        for worker in list(self._workers):  # the watchdog may have added spares
            worker.join(max(0.1, timeout))
        return idle

    def _work(self) -> None:
        while True:
            key = self.queue.get()
            if key is None:
                return
            if not self.may_reconcile():
                # Fenced: this replica may no longer hold the Lease. Keep the key for
                # whoever leads next; the operator is on its way out.
                self.queue.done(key)
                self.queue.add(key)
                self.stop.wait(0.5)
                continue
            try:
                self._process(key)
            finally:
                self.queue.done(key)
                self._depth.set(len(self.queue))
            with self._running_lock:
                current = threading.current_thread()
                if current in self._retiring:  # a spare took its place while it was stuck
                    self._retiring.discard(current)
                    return

    def _process(self, key: Key) -> None:
        raw = self.primary.get(key)
        if raw is None:  # deleted and gone: nothing to reconcile
            self.queue.forget(key)
            return
        kind = self.controller.resource
        try:
            obj = kind.from_dict(raw)
        except InvalidResource as err:
            # A stored object that does not match the type: retrying cannot help until
            # someone changes it, so say so on the object and wait for that change.
            log.error("%s: %s", self.name, err)
            self.context.event(raw, True, "InvalidResource", str(err))
            self.queue.forget(key)
            return
        started = time.monotonic()
        self._in_flight.inc()
        with self._running_lock:
            self._running[key] = (started, threading.current_thread())
        try:
            action = self._finalize_or_reconcile(obj)
        except _Conflict:
            self.enqueue(key, 0.2)  # our cache is behind; look again once it catches up
            return
        except ApiException as err:
            if err.status == 404 and self._gone(obj):
                # Deleted while it was being reconciled (a write to it, or to its status,
                # found nothing): not a failure, and nothing is left to retry for.
                log.info("%s: %s was deleted while it was being reconciled (%s %s)",
                         self.name, _describe(key), err.status, err.reason)
                self.queue.forget(key)
                return
            if err.status != 429:
                self._failed(key, obj, err)
                return
            # Throttled even after the client's own retries: come back after Retry-After,
            # spread out so keys refused together do not return together, without
            # escalating the key's failure backoff or adding an Event to the load.
            self._retries.inc()
            self.enqueue(key, throttle_delay(err) * (1 + 2 * random.random()))
            return
        except Exception as err:  # noqa: BLE001 - any failure backs off and retries (logged)
            self._failed(key, obj, err)
            return
        finally:
            with self._running_lock:
                self._running.pop(key, None)
            self._in_flight.dec()
            self._reconciles.inc()
            self._duration.observe(time.monotonic() - started)
        self.queue.forget(key)
        if action is not None and action.requeue_after is not None:
            self.enqueue(key, action.requeue_after)

    def _failed(self, key: Key, obj: CustomResource, err: Exception) -> None:
        """A failed reconcile: count it, back off, say so in the log and on the object."""
        self._errors.inc()
        self._retries.inc()
        delay = self.queue.add_failure(key)
        log.error("%s: reconcile of %s failed (attempt %d, retrying in %.1fs): %s",
                  self.name, _describe(key), self.queue.failures(key), delay, err,
                  exc_info=not isinstance(err, ApiException))
        self.context.event(obj, True, "ReconcileError", f"{type(err).__name__}: {err}")

    def _gone(self, obj: CustomResource) -> bool:
        """Whether `obj` no longer exists (a 404 from a reconcile may be about another
        object, a missing Secret say, which is a real failure). An object since created
        again under the same name is a different one (new uid): its own watch event
        brings it here."""
        try:
            current = self.api.request("GET", _resource_of(type(obj)).path(obj.namespace,
                                                                           obj.name))
        except ApiException as err:
            return bool(err.status == 404)
        except Exception:  # noqa: BLE001 - cannot tell: count the reconcile as failed
            return False
        return bool(current.get("metadata", {}).get("uid") != obj.uid)

    def _finalize_or_reconcile(self, obj: CustomResource) -> Action | None:
        finalizer = self.controller.finalizer
        if finalizer is None:
            if obj.deletion_timestamp:
                return None  # being deleted by others' finalizers: nothing to make
            return self.controller.reconcile(obj, self.context)
        if obj.deletion_timestamp:
            if finalizer in obj.finalizers:
                self.controller.cleanup(obj, self.context)
                self._set_finalizers(obj, [f for f in obj.finalizers if f != finalizer])
            return None
        if finalizer not in obj.finalizers:
            obj = self._set_finalizers(obj, [*obj.finalizers, finalizer])
        return self.controller.reconcile(obj, self.context)

    def _set_finalizers(self, obj: CustomResource, finalizers: list[str]) -> CustomResource:
        """Write the finalizer list only if the object is still the version we read."""
        resource = _resource_of(type(obj))
        try:
            updated = self.own_primary_writes.write(
                obj.namespace or "", obj.name, lambda: self.api.request(
                    "PATCH", resource.path(obj.namespace, obj.name),
                    body={"metadata": {"finalizers": finalizers or None,
                                       "resourceVersion": obj.resource_version}},
                    content_type="application/merge-patch+json"))
        except ApiException as err:
            if err.status == 409:
                raise _Conflict() from err
            if err.status == 404 and not finalizers:
                return obj  # already gone
            raise
        return type(obj).from_dict(updated)


class _Conflict(Exception):
    """Our copy of the object is stale (409): requeue and read the newer one."""


def _describe(key: Key) -> str:
    namespace, name = key
    return f"{namespace}/{name}" if namespace else name
