"""Watching one kind: list, then watch, forever — and keep a cache of what was seen.

An `Informer` runs one thread per watched kind (and namespace and selectors):

1. **List** the kind in pages (``limit``/``continue``), replace the cache with the
   result, and report the difference from the previous cache as ADDED, MODIFIED and
   DELETED events — so a relist after an outage reconciles exactly what changed.
2. **Watch** from the list's resourceVersion with bookmarks, applying each event to the
   cache before telling the handlers. Bookmarks move the resourceVersion on, so a
   reconnect resumes where it left off instead of relisting.
3. A watch that ends (the server's ``timeoutSeconds``) is resumed at once. A
   disconnect or error is retried after an exponential backoff with jitter; 429s honour
   ``Retry-After``. **410 Gone** (the resourceVersion was compacted away) relists.
   A stream that passes nothing — not even a bookmark — for ``stall_timeout`` seconds is
   treated as dead (a half-open connection, a proxy that stopped forwarding) and
   reopened. A 403 or 404 is logged naming the verb and resource — missing RBAC or a
   missing CRD — and retried; the watch never silently stops.

Handlers run on the watch thread and must be quick (they enqueue keys). Cached objects
drop ``metadata.managedFields``, which operators rarely read and which dominate memory.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

from operator_kit import metrics
from operator_kit.client import Api, Resource
from operator_kit.queueing import Backoff

log = logging.getLogger("operator_kit.watching")

Key = tuple[str, str]
"""(namespace or "", name): how a cached object and a work-queue item are named."""


def key_of(obj: dict[str, Any]) -> Key:
    meta = obj.get("metadata", {})
    return (meta.get("namespace") or "", meta["name"])


@dataclass(frozen=True)
class WatchEvent:
    """A change seen by an informer: ``type`` is ADDED, MODIFIED or DELETED."""

    type: str
    object: dict[str, Any]
    old: dict[str, Any] | None = None


Handler = Callable[[WatchEvent], None]

RECONNECT_BACKOFF = Backoff(base=0.5, cap=30.0, jitter=0.5)
"""Reconnects: 0.5 s doubling to 30 s, each delay randomised by up to half."""


class _Expired(Exception):
    """410 Gone: the resourceVersion we hold is too old; relist."""


class _Stalled(Exception):
    """The stream passed nothing for stall_timeout seconds."""


class Informer:
    """List-then-watch one resource into a cache, telling handlers about every change."""

    def __init__(
        self,
        api: Api,
        resource: Resource,
        *,
        stop: threading.Event,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
        watch_timeout: float = 300.0,
        stall_timeout: float = 90.0,
        backoff: Backoff = RECONNECT_BACKOFF,
    ) -> None:
        self.api = api
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.stall_timeout = stall_timeout
        self.backoff = backoff
        self.synced = threading.Event()
        self._stop = stop
        self._handlers: list[Handler] = []
        self._cache: dict[Key, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._response: Any = None
        self._thread: threading.Thread | None = None
        where = f" in {namespace}" if namespace else ""
        self.description = f"{resource}{where}"
        self._gauge = metrics.CACHE_OBJECTS.labels(str(resource))

    # -- reading the cache ---------------------------------------------------------------

    def get(self, key: Key) -> dict[str, Any] | None:
        with self._lock:
            return self._cache.get(key)

    def objects(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._cache.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._cache)

    def add_handler(self, handler: Handler) -> None:
        """Call `handler` for every change; it also gets ADDED for what is cached already."""
        with self._lock:
            self._handlers.append(handler)
            existing = list(self._cache.values())
        for obj in existing:
            handler(WatchEvent("ADDED", obj))

    # -- running ---------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name=f"watch-{self.resource.plural}", daemon=True
        )
        self._thread.start()

    def interrupt(self) -> None:
        """Unblock a watch read in progress (used on shutdown, after `stop` is set)."""
        _abort(self._response)

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        attempt = 0
        resource_version: str | None = None
        while not self._stop.is_set():
            try:
                if resource_version is None:
                    resource_version = self._relist()
                    self.synced.set()
                    continue  # look at the stop event before opening a watch
                resource_version = self._watch(resource_version)
                attempt = 0
            except _Expired:
                log.info("watch on %s expired (410 Gone): relisting", self.description)
                metrics.WATCH_RESTARTS.labels(str(self.resource), "expired").inc()
                resource_version = None
            except ApiException as err:
                if self._stop.is_set():
                    break
                if err.status == 410:
                    metrics.WATCH_RESTARTS.labels(str(self.resource), "expired").inc()
                    resource_version = None
                    continue
                attempt += 1
                delay = _retry_after(err) or self.backoff.delay(attempt)
                self._log_api_error(err, delay)
                metrics.WATCH_RESTARTS.labels(str(self.resource), "error").inc()
                self._stop.wait(delay)
            except Exception as err:  # noqa: BLE001 - any transport failure: back off, resume
                if self._stop.is_set():
                    break
                attempt += 1
                delay = self.backoff.delay(attempt)
                reason = "stalled" if isinstance(err, _Stalled) else "error"
                metrics.WATCH_RESTARTS.labels(str(self.resource), reason).inc()
                log.warning("watch on %s broke (%s: %s); resuming in %.1fs",
                            self.description, type(err).__name__, err, delay)
                self._stop.wait(delay)
            finally:
                self._response = None

    def _query(self) -> dict[str, Any]:
        return {"labelSelector": self.label_selector, "fieldSelector": self.field_selector}

    def _relist(self) -> str:
        """List everything (paged), swap the cache, emit the difference; the list's RV."""
        items: dict[Key, dict[str, Any]] = {}
        token: str | None = None
        path = self.resource.path(self.namespace)
        while True:
            try:
                page = self.api.request("GET", path, query={
                    **self._query(), "limit": self.page_size, "continue": token,
                }, timeout=(10.0, 60.0))
            except ApiException as err:
                if err.status == 410 and token:  # the continue token expired: start over
                    items, token = {}, None
                    continue
                raise
            for obj in page.get("items", []):
                obj.setdefault("apiVersion", self.resource.api_version)
                obj.setdefault("kind", self.resource.kind)
                _strip(obj)
                items[key_of(obj)] = obj
            token = page.get("metadata", {}).get("continue") or None
            if not token:
                version = str(page["metadata"]["resourceVersion"])
                break
        with self._lock:
            old, self._cache = self._cache, items
            handlers = list(self._handlers)
        self._gauge.set(len(items))
        events = [WatchEvent("DELETED", obj) for key, obj in old.items() if key not in items]
        for key, obj in items.items():
            before = old.get(key)
            if before is None:
                events.append(WatchEvent("ADDED", obj))
            elif _rv(before) != _rv(obj):
                events.append(WatchEvent("MODIFIED", obj, before))
        for event in events:
            self._dispatch(handlers, event)
        log.debug("listed %d %s at resourceVersion %s", len(items), self.description, version)
        return version

    def _watch(self, resource_version: str) -> str:
        """Watch from `resource_version` until the stream ends; the last version seen."""
        response = self.api.request(
            "GET", self.resource.path(self.namespace),
            query={**self._query(), "watch": True, "resourceVersion": resource_version,
                   "allowWatchBookmarks": True, "timeoutSeconds": int(self.watch_timeout)},
            timeout=(10.0, self.stall_timeout), stream=True,
        )
        self._response = response
        if self._stop.is_set():  # stopped while connecting: interrupt() may have missed it
            _abort(response)
        try:
            for line in _lines(response):
                if self._stop.is_set():
                    break
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise _Expired()
                    raise ApiException(status=obj.get("code", 500), reason=obj.get("message"))
                resource_version = _rv(obj) or resource_version
                if kind == "BOOKMARK":
                    continue
                obj.setdefault("apiVersion", self.resource.api_version)
                obj.setdefault("kind", self.resource.kind)
                _strip(obj)
                self._apply(str(kind), obj)
        except urllib3.exceptions.ReadTimeoutError as err:
            raise _Stalled(f"no data for {self.stall_timeout:.0f}s") from err
        except urllib3.exceptions.ProtocolError as err:
            if isinstance(err.__context__, socket.timeout | TimeoutError):
                raise _Stalled(f"no data for {self.stall_timeout:.0f}s") from err
            raise
        finally:
            response.release_conn()
        return resource_version

    def _apply(self, kind: str, obj: dict[str, Any]) -> None:
        key = key_of(obj)
        with self._lock:
            old = self._cache.get(key)
            if kind == "DELETED":
                self._cache.pop(key, None)
            else:
                self._cache[key] = obj
            handlers = list(self._handlers)
            size = len(self._cache)
        self._gauge.set(size)
        if kind == "ADDED" and old is not None:
            kind = "MODIFIED"
        self._dispatch(handlers, WatchEvent(kind, obj, old))

    def _dispatch(self, handlers: list[Handler], event: WatchEvent) -> None:
        for handler in handlers:
            try:
                handler(event)
            except Exception:  # a handler bug must not kill the watch
                log.exception("handler for %s failed on %s", self.description, event.type)

    def _log_api_error(self, err: ApiException, delay: float) -> None:
        where = f"namespace {self.namespace}" if self.namespace else "all namespaces"
        if err.status == 403:
            log.error(
                "forbidden: cannot list/watch %s in %s (403). Grant the operator's "
                "ServiceAccount the verbs list and watch on %s (see Operator.rules()). "
                "Retrying in %.1fs.", self.resource, where, self.resource, delay)
        elif err.status == 404:
            log.error(
                "not found: the API server does not serve %s (404): is its "
                "CustomResourceDefinition installed? Retrying in %.1fs.", self.resource, delay)
        else:
            log.warning("list/watch %s in %s failed: %s %s; retrying in %.1fs",
                        self.resource, where, err.status, err.reason, delay)


def _rv(obj: dict[str, Any]) -> str | None:
    value = obj.get("metadata", {}).get("resourceVersion")
    return str(value) if value is not None else None


def _strip(obj: dict[str, Any]) -> None:
    obj.get("metadata", {}).pop("managedFields", None)


def _retry_after(err: ApiException) -> float | None:
    if err.status != 429 or not err.headers:
        return None
    try:
        return max(0.1, float(err.headers.get("Retry-After", "")))
    except ValueError:
        return None


def _lines(response: Any) -> Iterator[bytes]:
    """Split a chunked watch stream into lines, yielding each as soon as it is complete."""
    pending = b""
    for chunk in response.stream(amt=None, decode_content=True):
        pending += chunk
        while True:
            newline = pending.find(b"\n")
            if newline < 0:
                break
            line, pending = pending[:newline], pending[newline + 1:]
            if line.strip():
                yield line
    if pending.strip():
        yield pending


def _abort(response: Any) -> None:
    """Shut down a streaming response's socket so a blocked read returns at once."""
    if response is None:
        return
    connection = getattr(response, "connection", None) or getattr(response, "_connection", None)
    sock = getattr(connection, "sock", None)
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    try:
        response.close()
    except Exception:  # noqa: BLE001 - best effort on shutdown
        pass
