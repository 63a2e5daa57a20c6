"""What a controller wrote: the watch's echo of its own writes (`OwnWrites`), and its last
applies to each child (`LastApplies`)."""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from operator_kit.runtime.changes import WatchEvent


class OwnWrites:
    """The resourceVersions of objects this controller just wrote.

    The watch then reports each such write back as a change, which would reconcile the
    object (or its owner) a second time: the reconcile that wrote it already saw the
    world as it now is. Events carrying a remembered version are skipped (once); any
    later change — by anyone — has a new version and counts.

    Used for the finalizer a controller adds to its primary objects (the reconcile that
    follows sees the object as written, so the echo cannot change anything), and for
    owned objects only when a controller opts in with ``skip_own_echoes = True``: by
    default, as in controller-runtime, a reconcile's own write to a child reconciles
    the owner again, which code ported from the CronJob tutorial relies on.

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


class LastApplies:
    """What this controller last applied to each child, and the resourceVersion it left.

    An exact rule for skipping a server-side apply: when the child's resourceVersion is
    still the one this controller's last apply of an identical body left, nobody has
    changed the child since, and applying the same body again cannot change it either
    (controller-runtime's CreateOrUpdate compares with the cache for the same reason).
    Any change by anyone — a new resourceVersion — or any other body sends the apply.
    At most `limit` children are remembered (least recently applied forgotten first).
    """

    def __init__(self, *, limit: int = 10_000) -> None:
        self._applied: OrderedDict[tuple[str, ...], tuple[str, str]] = OrderedDict()
        self._limit = limit
        self._lock = threading.Lock()

    @staticmethod
    def _key(body: Mapping[str, Any]) -> tuple[str, ...]:
        meta = body.get("metadata") or {}
        return (str(body.get("apiVersion")), str(body.get("kind")),
                str(meta.get("namespace") or ""), str(meta.get("name")))

    @staticmethod
    def _canonical(body: Mapping[str, Any]) -> str:
        return json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)

    def unchanged(self, body: Mapping[str, Any], resource_version: str | None) -> bool:
        """Whether applying `body` to a child now at `resource_version` would change
        nothing: the last apply was of this very body and left this version."""
        if not resource_version:
            return False
        with self._lock:
            last = self._applied.get(self._key(body))
        return last == (self._canonical(body), resource_version)

    def remember(self, body: Mapping[str, Any], applied: Mapping[str, Any]) -> None:
        """`body` was applied; the API server answered `applied`."""
        version = (applied.get("metadata") or {}).get("resourceVersion")
        key = self._key(body)
        with self._lock:
            if version:
                self._applied[key] = (self._canonical(body), str(version))
                self._applied.move_to_end(key)
                while len(self._applied) > self._limit:
                    self._applied.popitem(last=False)
            else:
                self._applied.pop(key, None)
