"""Read-your-writes across reconciles: the next reconcile of an object waits for its caches.

Within one reconcile, reads see that reconcile's own writes at once (`Objects` keeps a
journal). The *next* reconcile of the same object starts with a fresh journal, and the
caches learn of the last one's writes only when their watch events arrive — a few
milliseconds later, or longer under load. A reconcile that started in between would
read the world from before its own previous pass: the classic duplicate child (a Job
created because the one made a moment ago is not listed yet).

So each reconcile leaves behind the resourceVersions it wrote, per cache that will hold
them (`Objects.unseen_writes`), and the next reconcile of that key starts only once each
of those caches has seen that version (`Informer.has_seen`): it waits up to `WAIT`
seconds in the worker, then goes back to the queue for `REQUEUE` seconds, and after
`GIVE_UP` seconds from the write it goes ahead anyway with a warning (a cache that does
not catch up in that time has a broken watch, which the informer reports itself).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from operator_kit.runtime.watching import Informer, Key

__all__ = ["CaughtUp"]

log = logging.getLogger("operator_kit.controller")


class CaughtUp:
    """The versions each key's last reconcile wrote, and whether its caches have them."""

    WAIT = 1.0
    REQUEUE = 0.1
    GIVE_UP = 10.0

    def __init__(self, name: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self._clock = clock
        self._pending: dict[Key, tuple[float, list[tuple[Informer, str]]]] = {}
        self._lock = threading.Lock()

    def remember(self, key: Key, writes: Sequence[tuple[Informer, str]]) -> None:
        """`key`'s reconcile just wrote these (cache, resourceVersion) pairs."""
        unseen = [(informer, version) for informer, version in writes
                  if not informer.has_seen(version)]
        with self._lock:
            if unseen:
                self._pending[key] = (self._clock(), unseen)
            else:
                self._pending.pop(key, None)

    def ready(self, key: Key, stop: threading.Event) -> bool:
        """Whether `key` may be reconciled now: its caches have seen what its last
        reconcile wrote (waiting up to `WAIT` s for them), or `GIVE_UP` s have passed.
        False: requeue it for `REQUEUE` s."""
        with self._lock:
            entry = self._pending.get(key)
        if entry is None:
            return True
        written_at, writes = entry
        deadline = min(self._clock() + self.WAIT, written_at + self.GIVE_UP)
        for informer, version in writes:
            while not stop.is_set():
                left = deadline - self._clock()
                if informer.wait_seen(version, max(0.0, min(left, 0.1))):
                    break
                if left <= 0:
                    if self._clock() < written_at + self.GIVE_UP:
                        return False
                    log.warning("%s: the cache of %s has not seen resourceVersion %s, "
                                "written %.0fs ago by the last reconcile of %s; "
                                "reconciling it anyway", self.name, informer.description,
                                version, self._clock() - written_at,
                                f"{key[0]}/{key[1]}" if key[0] else key[1])
                    self.forget(key)
                    return True
        self.forget(key)
        return True

    def forget(self, key: Key) -> None:
        """Nothing to wait for before `key`'s next reconcile (it is gone, say)."""
        with self._lock:
            self._pending.pop(key, None)
