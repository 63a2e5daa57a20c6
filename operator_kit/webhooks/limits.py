"""The webhook server's bounds that are pure logic: request bodies in memory, log lines.

- `BodyBudget`: the bytes of request bodies being answered at once, across the worker's
  threads. Each endpoint bounds one body (``Webhooks(max_body_bytes=...,
  max_conversion_body_bytes=...)``); the budget bounds their sum, so that memory is
  bounded however many large requests arrive together. A body below `SMALL_BODY_BYTES`
  (nearly every admission review) is not counted and never waits: at most one per
  thread is answered at a time.
- `memory_limit_mib`: the container memory limit derived from those bounds, for the
  generated Deployment (`operator_kit.manifests`).
- `LogThrottle`: one log line per source and reason per interval, with the count of those
  left out, so that a flood of bad requests cannot flood the log.
- `limit_malloc_arenas`: at most `MALLOC_ARENAS` glibc malloc arenas, so that the memory
  a thread freed after one large body is reused by the next, whichever thread answers it.

Nothing here imports Flask or gunicorn: the manifests use `memory_limit_mib` too.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Hashable

__all__ = [
    "BYTES_PER_BODY_BYTE",
    "CONTROLLERS_MEMORY_MIB",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_CONVERSION_BODY_BYTES",
    "DEFAULT_THREADS",
    "MALLOC_ARENAS",
    "SMALL_BODY_BYTES",
    "BodyBudget",
    "LogThrottle",
    "limit_malloc_arenas",
    "memory_limit_mib",
]

MIB = 1024 * 1024

# An UPDATE's AdmissionReview carries the object and its old version, each up to the
# API server's 3 MiB request limit, plus the request's other fields.
DEFAULT_MAX_BODY_BYTES = 7 * MIB
# A ConversionReview carries every object of a list (or a page of it: kubectl and
# informers ask for 500 objects at a time) at once. 8 MiB is ~5,000 objects of 1.5 KiB;
# answering it peaks at ~70 MiB of memory (bench/conversion_memory_bench.py).
DEFAULT_MAX_CONVERSION_BODY_BYTES = 8 * MIB

DEFAULT_THREADS = 8
"""The worker's threads unless ``OPERATOR_KIT_THREADS`` says otherwise
(`operator_kit.gunicorn_conf`)."""

SMALL_BODY_BYTES = 256 * 1024
"""Bodies below this are answered without taking from the budget (one per thread)."""

BYTES_PER_BODY_BYTE = 16
"""Peak resident memory of the worker per byte of request body while it is answered:
measured 8.1-9.0 for a ConversionReview (parsed, each object decoded, converted, the
answer encoded) and 5.0-5.2 for an UPDATE AdmissionReview on CPython 3.11, by
bench/conversion_memory_bench.py. Eight 8 MiB conversions at once, answered one after
another as the budget allows (tests/unit/test_webhook_edges.py, on every supported Python):
6.2-7.7 with `MALLOC_ARENAS` arenas (3.10: 7.3, 3.11: 7.7, 3.13: 6.2), and up to 17.9
without that limit (3.13 under load, 7 of the 8 answered), where each thread kept the
memory of the body it had answered in an arena of its own. 16 leaves twice the worst
measured."""

MALLOC_ARENAS = 2
"""glibc's malloc gives each thread an arena of its own (up to 8 per core), and memory
freed in one arena is not reused by a thread allocating from another: eight threads that
each answered one large body kept eight bodies' worth of memory, and the worker's peak grew
with every large request answered by a thread that had not answered one yet. Two arenas
bound that, and leave the threads that allocate without the GIL (TLS) not all waiting on
one lock. ``MALLOC_ARENA_MAX`` in the environment wins (glibc reads it at start)."""

M_ARENA_MAX = -8  # glibc's malloc.h


def limit_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """At most `arenas` malloc arenas in this process and in those it forks from now on
    (gunicorn's master calls it before it forks the worker). False, and nothing changed,
    where the C library has no such setting (not glibc) or ``MALLOC_ARENA_MAX`` is set."""
    if arenas <= 0:
        raise ValueError(f"arenas must be positive, got {arenas}")
    if os.environ.get("MALLOC_ARENA_MAX"):
        return False
    import ctypes  # here: only gunicorn's master needs it, not every importer of the limits

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, arenas))

CONTROLLERS_MEMORY_MIB = 256
"""What the operator's processes may use besides answering webhooks: gunicorn's master and
worker at start (~100 MiB with Flask and the Kubernetes client loaded), the controllers and
their caches. The whole limit before the webhook bodies were bounded."""

BUDGET_WAIT_SECONDS = 2.0
"""How long a large request waits for the budget before it is answered 503, at most. The
wait is part of the read deadline (its body is read after it), so it is never more than
half of ``OPERATOR_KIT_READ_TIMEOUT`` (`budget_wait`): the 503 is sent before the read
deadline would close the connection."""


def budget_wait() -> float:
    """`BUDGET_WAIT_SECONDS`, or half the read timeout if that is shorter. A malformed
    ``OPERATOR_KIT_READ_TIMEOUT`` counts as its default here (gunicorn_conf refuses it)."""
    try:
        read_timeout = float(os.environ.get("OPERATOR_KIT_READ_TIMEOUT", "").strip() or 5.0)
    except ValueError:
        read_timeout = 5.0
    if not 0 < read_timeout < float("inf"):
        read_timeout = 5.0
    return min(BUDGET_WAIT_SECONDS, read_timeout / 2)


def memory_limit_mib(budget_bytes: int, threads: int) -> int:
    """The container memory limit, in MiB, of an operator serving webhooks.

    ``CONTROLLERS_MEMORY_MIB + BYTES_PER_BODY_BYTE x (budget + threads x SMALL_BODY_BYTES)``
    rounded up to a multiple of 16 MiB: the bodies in the budget, and one small body per
    thread, each costing `BYTES_PER_BODY_BYTE` while it is answered."""
    if budget_bytes <= 0 or threads <= 0:
        raise ValueError(f"budget_bytes and threads must be positive, got {budget_bytes} "
                         f"and {threads}")
    webhooks = BYTES_PER_BODY_BYTE * (budget_bytes + threads * SMALL_BODY_BYTES) / MIB
    return 16 * math.ceil((CONTROLLERS_MEMORY_MIB + webhooks) / 16)


class BodyBudget:
    """Bytes of request bodies being answered at once, at most `total`.

    `take` a body's size before reading it (True: go ahead, and `give_back` the same size
    once its answer is written; False: the budget stayed full for `wait` seconds). A size
    below `small` is not counted and always goes ahead. A size above `total` is refused at
    once: the per-endpoint limits are never above the budget (`Webhooks` checks)."""

    def __init__(self, total: int, small: int = SMALL_BODY_BYTES) -> None:
        if total <= 0:
            raise ValueError(f"the body budget must be positive, got {total}")
        self.total = total
        self.small = small
        self._used = 0
        self._freed = threading.Condition()

    @property
    def used(self) -> int:
        with self._freed:
            return self._used

    def counts(self, size: int) -> bool:
        """Whether a body of `size` bytes takes from the budget."""
        return size >= self.small

    def take(self, size: int, wait: float = BUDGET_WAIT_SECONDS) -> bool:
        if not self.counts(size):
            return True
        if size > self.total:
            return False
        with self._freed:
            if not self._freed.wait_for(lambda: self._used + size <= self.total, wait):
                return False
            self._used += size
            return True

    def give_back(self, size: int) -> None:
        if not self.counts(size):
            return
        with self._freed:
            self._used = max(0, self._used - size)
            self._freed.notify_all()


class LogThrottle:
    """Lets one log line through per key (source, reason) per `interval` seconds.

    `admit(key)` is None while the key's line was logged less than `interval` ago (the
    occurrence is counted instead); otherwise the number counted since the last line that
    was let through, to add to this one. At most `max_keys` keys are remembered: beyond
    them (a flood from many sources), keys whose interval has passed are forgotten, and
    if all are recent, further sources share the key ``(OTHER_SOURCES, *rest)``, so memory
    stays bounded. Thread-safe; the clock is injectable for tests."""

    OTHER_SOURCES = "other sources"

    def __init__(self, interval: float = 60.0, *, max_keys: int = 1024,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if interval <= 0 or max_keys < 1:
            raise ValueError(f"interval and max_keys must be positive, got {interval} and "
                             f"{max_keys}")
        self.interval = interval
        self.max_keys = max_keys
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: dict[Hashable, tuple[float, int]] = {}  # key: (last logged, left out)

    def admit(self, key: tuple[Hashable, ...]) -> int | None:
        now = self._clock()
        with self._lock:
            entry = self._seen.get(key)
            if entry is None and len(self._seen) >= self.max_keys:
                self._forget_before(now - self.interval)
                if len(self._seen) >= self.max_keys:
                    key = (self.OTHER_SOURCES, *key[1:])
                    entry = self._seen.get(key)
                    if entry is None:  # every slot recent: make room for the shared key
                        self._seen.pop(next(iter(self._seen)))
            if entry is not None and now - entry[0] < self.interval:
                self._seen[key] = (entry[0], entry[1] + 1)
                return None
            self._seen[key] = (now, 0)
            return 0 if entry is None else entry[1]

    def _forget_before(self, cutoff: float) -> None:
        for key in [k for k, (logged, _) in self._seen.items() if logged <= cutoff]:
            del self._seen[key]

    def __len__(self) -> int:
        with self._lock:
            return len(self._seen)
