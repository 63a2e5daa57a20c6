"""Watching one kind: list, then watch, forever — and keep a cache of what was seen.

An `Informer` runs one thread per watched kind (and namespace and selectors):

1. **List** the kind — by default as a *streaming list* (`operator_kit.runtime.streaming`):
   a watch with ``sendInitialEvents=true`` whose ADDED events make up the state until a
   bookmark ends them; on a server that refuses that, in pages (``limit``/``continue``)
   — replace the cache with the result, and report the difference from the previous
   cache as ADDED, MODIFIED and DELETED events — so a relist after an outage reconciles
   exactly what changed.
2. **Watch** from the list's resourceVersion with bookmarks (a streaming list's watch
   goes on), applying each event to the cache before telling the handlers. Bookmarks
   move the resourceVersion on, so a reconnect resumes where it left off instead of
   relisting.
3. A watch that ends (the server's ``timeoutSeconds``) is resumed at once. A
   disconnect or error is retried after an exponential backoff with jitter; 429s honour
   ``Retry-After``. **410 Gone** (the resourceVersion was compacted away) relists.
   A stream that passes nothing — not even a bookmark — for ``stall_timeout`` seconds is
   treated as dead (a half-open connection, a proxy that stopped forwarding) and
   reopened. A 403 or 404 is logged naming the verb and resource — missing RBAC or a
   missing CRD — and retried; the watch never silently stops. A 404 or 429 before the
   first list, while a just-created CRD becomes established, is logged at INFO for a
   while first (`operator_kit.runtime.watch_failures`). While a list or watch
   fails, ``operator_kit_watch_failing{resource}`` is 1 (and
   ``..._failing_seconds`` says for how long), and each retry's line says that changes
   to the kind are not seen until it works again; a line says when it does.

Handlers run on the watch thread and must be quick (they enqueue keys). The cache is a
`operator_kit.runtime.cache.Store`: objects by key and by index, each as its transforms
(`operator_kit.runtime.transforms`) left it — by default without
``metadata.managedFields``, which operators rarely read and which dominate memory. With
``metadata_only`` the informer asks the API server for metadata alone
(``PartialObjectMetadata``): for kinds whose spec and status a controller never reads,
that is all that is transferred and kept.
"""

from __future__ import annotations

import json
import logging
import socket
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

from operator_kit import metrics
from operator_kit.client.transport import Api, Resource, error_message
from operator_kit.runtime.cache import Key, LabelSelector, Store, key_of
from operator_kit.runtime.changes import Handler, WatchEvent
from operator_kit.runtime.queueing import Backoff
from operator_kit.runtime.streaming import (
    NoInitialEventsEnd,
    StreamingLists,
    abort,
    ends_initial_events,
    initial_events_query,
    read_lines,
    refuses_streaming,
)
from operator_kit.runtime.transforms import Transform, Transformer, drop_managed_fields
from operator_kit.runtime.watch_failures import (
    ESTABLISHING_GRACE,
    log_api_error,
    quiet,
    retry_after,
)
from operator_kit.settings import env_bool

log = logging.getLogger("operator_kit.watching")

__all__ = ["Informer", "Informers", "Key", "WatchEvent", "key_of"]

_METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
_METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"

STREAMING_ENV = "OPERATOR_KIT_STREAMING_LISTS"
"""A yes or no: whether informers stream their initial lists (unset: yes)."""

RECONNECT_BACKOFF = Backoff(base=0.5, cap=30.0, jitter=0.5)
"""Reconnects: 0.5 s doubling to 30 s, each delay randomised by up to half."""


class _Expired(Exception):
    """410 Gone: the resourceVersion we hold is too old; relist."""


class _Stalled(Exception):
    """The stream passed nothing for stall_timeout seconds."""


class Informer:
    """List-then-watch one resource into a cache, telling handlers about every change.

    `streaming` says whether its initial lists are streamed (default: yes, unless the
    server refused); `default_transform` and `transform` are what objects go through
    before they are cached (`operator_kit.runtime.transforms`). `initial_list` says how
    its last (re)list was made: ``"streaming"``, ``"list"``, or None before the first.
    `shard_selector`: the API server's ``shardSelector`` (`operator_kit.election.shard_ranges`)."""

    def __init__(
        self,
        api: Api,
        resource: Resource,
        *,
        stop: threading.Event,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        shard_selector: str | None = None,
        page_size: int = 500,
        watch_timeout: float = 300.0,
        stall_timeout: float = 90.0,
        backoff: Backoff = RECONNECT_BACKOFF,
        metadata_only: bool = False,
        streaming: StreamingLists | None = None,
        transform: Transform | None = None,
        default_transform: Transform | None = drop_managed_fields,
        cluster: str = metrics.HUB,
    ) -> None:
        self.api = api
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.shard_selector = shard_selector
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.stall_timeout = stall_timeout
        self.backoff = backoff
        self.metadata_only = metadata_only
        self.streaming = streaming if streaming is not None else StreamingLists()
        self.transform = transform
        self.initial_list: str | None = None
        self.synced = threading.Event()
        self._stop = stop
        self._handlers: list[Handler] = []
        where = f" in {namespace}" if namespace else ""
        selectors = ", ".join(f"{name} {value}" for name, value in (
            ("labels", label_selector), ("fields", field_selector),
            ("shards", shard_selector)) if value)
        self.description = (f"{resource}{where}" + (f" ({selectors})" if selectors else "")
                            + (" (metadata only)" if metadata_only else "")
                            + (f" (transform {getattr(transform, '__qualname__', transform)})"
                               if transform is not None else ""))
        self.store = Store(self.description)
        self._transformer = Transformer(default_transform, transform,
                                        description=self.description)
        # Held while the store changes and its handlers run, so a handler added meanwhile
        # sees each object exactly once (as cached, or as an event).
        self._lock = threading.RLock()
        self._response: Any = None
        # Where a watch resumes: the last resourceVersion seen; None: (re)list first.
        self._resume: str | None = None
        self._thread: threading.Thread | None = None
        self._gauge = metrics.CACHE_OBJECTS.labels(str(resource), cluster)
        # The highest resourceVersion this cache has applied (a list's, an event's or a
        # bookmark's), and a condition to wait on it: see `has_seen`.
        self._seen_version = 0
        self._seen = threading.Condition()
        # When its list or watch began to fail (monotonic), None while it works: the
        # watch-failing gauges and the log lines that say changes are being missed.
        self._failing_since: float | None = None
        self._loud = False  # whether a line about this failure was above INFO
        self.metric_resource = str(resource)
        self.metric_cluster = cluster  # the fleet member it watches ("": the hub)
        self._watch_labels = (self.metric_resource, cluster)
        metrics.WATCH_GAUGES.track(self)

    # -- reading the cache ---------------------------------------------------------------

    def get(self, key: Key) -> dict[str, Any] | None:
        return self.store.get(key)

    def objects(self) -> list[dict[str, Any]]:
        return self.store.objects()

    def __len__(self) -> int:
        return len(self.store)

    def covers(self, namespace: str | None, *, metadata: bool = False) -> bool:
        """Whether this cache holds every object of its kind in `namespace` (None: in
        every namespace): it watches there, with no selector, and in full (or as
        metadata only, when `metadata` is enough)."""
        if self.label_selector or self.field_selector or self.shard_selector or (
                self.metadata_only and not metadata):
            return False
        return self.namespace is None or self.namespace == namespace

    def holds(self, obj: dict[str, Any]) -> bool:
        """Whether `obj` belongs in this cache: watched in its namespace and matching its
        label selector (with a field selector, which only the API server evaluates: no)."""
        namespace = (obj.get("metadata") or {}).get("namespace")
        if self.field_selector or self.shard_selector or namespace != (self.namespace or namespace):
            return False
        return not self.label_selector or LabelSelector.of(self.label_selector).matches(obj)

    def has_seen(self, resource_version: str) -> bool:
        """Whether this cache reflects `resource_version` of its kind or a later one: it
        applied an event, list or bookmark at least that new. (resourceVersions are
        opaque in the API; etcd's are integers, which this relies on: a version that is
        not one is never reported seen.)"""
        with self._seen:
            return _version_number(resource_version) <= self._seen_version

    def wait_seen(self, resource_version: str, timeout: float) -> bool:
        """Wait up to `timeout` seconds for `has_seen(resource_version)`; its answer."""
        wanted = _version_number(resource_version)
        with self._seen:
            return self._seen.wait_for(lambda: wanted <= self._seen_version, timeout)

    def _advance(self, resource_version: str | None) -> None:
        number = _version_number(resource_version) if resource_version else 0
        with self._seen:
            if 0 < number != sys.maxsize and number > self._seen_version:
                self._seen_version = number
                self._seen.notify_all()

    def add_handler(self, handler: Handler) -> None:
        """Call `handler` for every change; it also gets ADDED for what is cached already."""
        with self._lock:
            self._handlers.append(handler)
            existing = self.store.objects()
        for obj in existing:
            _call(handler, WatchEvent("ADDED", obj, from_list=True), self.description)

    # -- running ---------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name=f"watch-{self.resource.plural}", daemon=True
        )
        self._thread.start()

    def interrupt(self) -> None:
        """Unblock a watch read in progress (used on shutdown, after `stop` is set)."""
        abort(self._response)

    @property
    def started(self) -> bool:
        return self._thread is not None

    def alive(self) -> bool:
        """Whether its watch thread runs (False before `start`, and after it ended)."""
        return self._thread is not None and self._thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def failing_for(self) -> float | None:
        """Seconds its list or watch has been failing, 0.0 while it works, None when its
        thread does not run (`operator_kit.metrics.WatchHealth`)."""
        if not self.alive():
            return None
        since = self._failing_since
        return 0.0 if since is None else max(time.monotonic() - since, 1e-3)

    def _failed(self) -> str:
        """Note a failure; what the log line says about the changes being missed."""
        now = time.monotonic()
        if self._failing_since is None:
            self._failing_since = now
        return (f"changes to {self.resource} are not seen until it works again "
                f"(failing for {now - self._failing_since:.0f}s)")

    def _worked(self, what: str) -> None:
        since, self._failing_since = self._failing_since, None
        loud, self._loud = self._loud, False
        if since is not None:  # at INFO after a CRD becoming established (watch_failures)
            log.log(logging.WARNING if loud else logging.INFO,
                    "%s %s works again after failing for %.1fs; what changed meanwhile "
                    "is caught up on", what, self.description, time.monotonic() - since)

    def _run(self) -> None:
        attempt, started = 0, time.monotonic()
        self._resume = None
        while not self._stop.is_set():
            try:
                if self._resume is None and not self.streaming.use(self.resource):
                    self._resume = self.relist()
                    self.synced.set()
                    continue  # look at the stop event before opening a watch
                self._watch(self._resume)  # from None: a streaming list first
                attempt = 0
            except _Expired:
                log.info("watch on %s expired (410 Gone): relisting", self.description)
                metrics.WATCH_RESTARTS.labels(*self._watch_labels, "expired").inc()
                self._resume = None
            except NoInitialEventsEnd as err:
                self.streaming.refuse(self.resource, self.description, str(err))
            except ApiException as err:
                if self._stop.is_set():
                    break
                if err.status == 410:
                    metrics.WATCH_RESTARTS.labels(*self._watch_labels, "expired").inc()
                    self._resume = None
                    continue
                if self._resume is None and refuses_streaming(err):
                    self.streaming.refuse(self.resource, self.description, error_message(err))
                    continue
                attempt += 1
                delay = retry_after(err) or self.backoff.delay(attempt)
                running = time.monotonic() - started
                hush = quiet(err.status, synced=self.synced.is_set(), running_for=running)
                self._loud = self._loud or not hush
                log_api_error(err, resource=self.resource, namespace=self.namespace,
                              delay=delay, missed=self._failed(),
                              quiet_for=ESTABLISHING_GRACE - running if hush else None)
                metrics.WATCH_RESTARTS.labels(*self._watch_labels, "error").inc()
                self._stop.wait(delay)
            except Exception as err:  # noqa: BLE001 - any transport failure: back off, resume
                if self._stop.is_set():
                    break
                attempt += 1
                delay = self.backoff.delay(attempt)
                reason = "stalled" if isinstance(err, _Stalled) else "error"
                metrics.WATCH_RESTARTS.labels(*self._watch_labels, reason).inc()
                self._loud = True
                log.warning("watch on %s broke (%s: %s); resuming in %.1fs; %s",
                            self.description, type(err).__name__, err, delay, self._failed())
                self._stop.wait(delay)
            finally:
                self._response = None

    def _query(self) -> dict[str, Any]:
        return {"labelSelector": self.label_selector, "fieldSelector": self.field_selector,
                "shardSelector": self.shard_selector}

    def relist(self) -> str:
        """List everything (paged), swap the cache, emit the difference; the list's RV.

        The informer's thread calls it on start and after a watch expires (410) when it
        does not stream its lists; `operator_kit.testing.reconcile_once` calls it to fill
        a cache without a thread."""
        items: dict[Key, dict[str, Any]] = {}
        token: str | None = None
        path = self.resource.path(self.namespace)
        while True:
            try:
                page = self.api.request("GET", path, query={
                    **self._query(), "limit": self.page_size, "continue": token,
                }, timeout=(10.0, 60.0), accept=_METADATA_LIST if self.metadata_only else None)
            except ApiException as err:
                if err.status == 410 and token:  # the continue token expired: start over
                    items, token = {}, None
                    continue
                raise
            for obj in page.get("items") or ():
                obj = self._normalize(obj)
                items[key_of(obj)] = obj
            token = page.get("metadata", {}).get("continue") or None
            if not token:
                version = str(page["metadata"]["resourceVersion"])
                break
        self._worked("list of")
        self._replace(items, version)
        self.initial_list = "list"
        log.debug("listed %d %s at resourceVersion %s", len(items), self.description, version)
        return version

    def _replace(self, items: dict[Key, dict[str, Any]], version: str) -> None:
        """Swap the cache for `items`, the state at `version`, and tell the handlers."""
        with self._lock:
            old = self.store.replace(items)
            self._gauge.set(len(items))
            events = [WatchEvent("DELETED", obj, from_list=True) for key, obj in old.items()
                      if key not in items]
            for key, obj in items.items():
                before = old.get(key)
                if before is None:
                    events.append(WatchEvent("ADDED", obj, from_list=True))
                elif _rv(before) != _rv(obj):
                    events.append(WatchEvent("MODIFIED", obj, before, from_list=True))
            for event in events:
                self._dispatch(event)
        self._advance(version)

    def _watch(self, resource_version: str | None) -> None:
        """Watch from `resource_version` until the stream ends, keeping the last version
        seen in ``_resume``. From None: a streaming list first (the module docstring)."""
        query = {**self._query(), "watch": True, "resourceVersion": resource_version,
                 "allowWatchBookmarks": True, "timeoutSeconds": int(self.watch_timeout)}
        # The state being streamed, until the bookmark that ends it; None: watching.
        initial: dict[Key, dict[str, Any]] | None = None
        if resource_version is None:
            query.update(initial_events_query())
            initial = {}
        response = self.api.request(
            "GET", self.resource.path(self.namespace), query=query,
            timeout=(10.0, self.stall_timeout), stream=True,
            accept=_METADATA if self.metadata_only else None,
        )
        self._response = response
        self._worked("streaming list of" if initial is not None else "watch on")
        if self._stop.is_set():  # stopped while connecting: interrupt() may have missed it
            abort(response)
        try:
            for line in read_lines(response):
                if self._stop.is_set():
                    break
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise _Expired()
                    raise ApiException(status=obj.get("code", 500), reason=obj.get("message"))
                if initial is not None:
                    initial = self._initial_event(initial, kind, obj)
                    resource_version = self._resume
                    continue
                resource_version = _rv(obj) or resource_version
                if kind != "BOOKMARK":
                    self._apply(str(kind), self._normalize(obj))
                self._advance(resource_version)
                self._resume = resource_version
        except urllib3.exceptions.ReadTimeoutError as err:
            raise _Stalled(f"no data for {self.stall_timeout:.0f}s") from err
        except urllib3.exceptions.ProtocolError as err:
            if isinstance(err.__context__, socket.timeout | TimeoutError):
                raise _Stalled(f"no data for {self.stall_timeout:.0f}s") from err
            raise
        finally:
            response.release_conn()
        if initial is not None and not self._stop.is_set():
            raise NoInitialEventsEnd(f"the watch ended after {len(initial)} initial events "
                                     "without the bookmark that ends them")

    def _initial_event(self, initial: dict[Key, dict[str, Any]], kind: object,
                       obj: dict[str, Any]) -> dict[Key, dict[str, Any]] | None:
        """Take a streaming list's event; None once its bookmark swapped the cache in."""
        if ends_initial_events(kind, obj):
            version = str(_rv(obj))
            self._replace(initial, version)
            self.initial_list = "streaming"
            self._resume = version
            self.synced.set()
            log.debug("streamed %d %s at resourceVersion %s", len(initial),
                      self.description, version)
            return None
        if kind == "DELETED":
            initial.pop(key_of(obj), None)
        elif kind != "BOOKMARK":
            obj = self._normalize(obj)
            initial[key_of(obj)] = obj
        return initial

    def _normalize(self, obj: dict[str, Any]) -> dict[str, Any]:
        """`obj` transformed, naming the kind watched (list items carry none)."""
        obj["apiVersion"] = self.resource.api_version
        obj["kind"] = self.resource.kind
        return self._transformer(obj)

    def _apply(self, kind: str, obj: dict[str, Any]) -> None:
        with self._lock:
            if kind == "DELETED":
                old = self.store.remove(key_of(obj))
            else:
                old = self.store.put(obj)
            self._gauge.set(len(self.store))
            if kind == "ADDED" and old is not None:
                kind = "MODIFIED"
            self._dispatch(WatchEvent(kind, obj, old))

    def _dispatch(self, event: WatchEvent) -> None:
        for handler in list(self._handlers):
            try:
                handler(event)
            except Exception:  # a handler bug must not kill the watch
                log.exception("handler for %s failed on %s", self.description, event.type)


def _call(handler: Handler, event: WatchEvent, description: str) -> None:
    try:
        handler(event)
    except Exception:  # a handler bug must not stop the watch, nor the start
        log.exception("handler for %s failed on %s", description, event.type)


def _version_number(resource_version: str) -> int:
    """An etcd resourceVersion as the integer it is; a huge number for anything else."""
    try:
        return int(resource_version)
    except (TypeError, ValueError):
        return sys.maxsize


def _rv(obj: dict[str, Any]) -> str | None:
    value = obj.get("metadata", {}).get("resourceVersion")
    return str(value) if value is not None else None


InformerKey = tuple[Resource, str | None, str | None, str | None, bool, Transform | None,
                    str | None]
"""(resource, namespace, label selector, field selector, metadata only, transform)."""


class Informers:
    """An operator's informers, one per resource and way of watching it, shared by every
    controller (and read) that asks for the same; the cache reads are served from.

    They stream their initial lists unless `streaming` is False (None: unless
    ``OPERATOR_KIT_STREAMING_LISTS`` says no), sharing one `StreamingLists`
    (``.streaming``: where the server refused); `default_transform` runs on every object
    before it is cached, each informer's own transform after it. `elsewhere` names
    resources watched through another Api than `api` (a fleet's hub kind, watched from
    the hub for each member cluster: `operator_kit.fleet.fanout`)."""

    def __init__(self, api: Api, stop: threading.Event, *, stall_timeout: float = 90.0,
                 streaming: bool | None = None,
                 default_transform: Transform | None = drop_managed_fields,
                 cluster: str = metrics.HUB,
                 elsewhere: Mapping[Resource, Api] | None = None) -> None:
        self.api = api
        self.cluster = cluster  # the fleet member they watch, on their metrics
        self.elsewhere = dict(elsewhere or {})
        self._stop = stop
        self._stall_timeout = stall_timeout
        self.streaming = StreamingLists(enabled=env_bool(STREAMING_ENV, True)
                                        if streaming is None else streaming)
        self.default_transform = default_transform
        self._informers: dict[InformerKey, Informer] = {}
        self._lock = threading.Lock()
        self._started = False

    def informer(self, resource: Resource, *, namespace: str | None = None,
                 label_selector: str | None = None, field_selector: str | None = None,
                 metadata_only: bool = False, transform: Transform | None = None,
                 shard_selector: str | None = None) -> Informer:
        """The informer watching `resource` this way (with `transform` after the default
        one), made on first use (and started, if the others already run)."""
        key = (resource, namespace, label_selector, field_selector, metadata_only, transform,
               shard_selector)
        with self._lock:
            informer = self._informers.get(key)
            if informer is None:
                informer = self._informers[key] = Informer(
                    self.elsewhere.get(resource, self.api), resource, stop=self._stop,
                    namespace=namespace, label_selector=label_selector,
                    field_selector=field_selector, shard_selector=shard_selector,
                    stall_timeout=self._stall_timeout, metadata_only=metadata_only,
                    streaming=self.streaming, transform=transform,
                    default_transform=self.default_transform, cluster=self.cluster)
                if self._started:
                    informer.start()
        return informer

    def each(self, resource: Resource, namespaces: Sequence[str | None], *,
             label_selector: str | None = None, field_selector: str | None = None,
             metadata_only: bool = False, transform: Transform | None = None,
             ) -> list[Informer]:
        """`informer` in each of `namespaces` (``[None]``: all; one if cluster-scoped)."""
        return [self.informer(resource, namespace=namespace, label_selector=label_selector,
                              field_selector=field_selector, metadata_only=metadata_only,
                              transform=transform)
                for namespace in (namespaces if resource.namespaced else [None])]

    def covering(self, resource: Resource, namespace: str | None) -> Informer | None:
        """A synced informer that holds every object of `resource` in `namespace` (None:
        all namespaces), in full — the cache a read may be served from — or None."""
        for informer in self.of(resource):
            if informer.covers(namespace) and informer.synced.is_set():
                return informer
        return None

    def of(self, resource: Resource) -> list[Informer]:
        """Every informer of `resource`: full ones before metadata-only ones, and those
        without a transform of their own first."""
        with self._lock:
            found = [i for key, i in self._informers.items() if key[0] == resource]
        return sorted(found, key=lambda i: (i.metadata_only, i.transform is not None))

    def values(self) -> list[Informer]:
        with self._lock:
            return list(self._informers.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._informers)

    def start(self) -> None:
        with self._lock:
            self._started = True
            informers = list(self._informers.values())
        for informer in informers:
            if not informer.started:  # started before (a second group of controllers)
                informer.start()

    def interrupt(self) -> None:
        for informer in self.values():
            informer.interrupt()

    def join(self, deadline: float) -> None:
        """Join each informer's thread, until the monotonic `deadline` at the latest."""
        for informer in self.values():
            informer.join(max(0.1, deadline - time.monotonic()))
