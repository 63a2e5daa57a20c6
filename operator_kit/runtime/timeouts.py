"""Reconcile timeouts: what happens to a reconcile that runs past ``reconcile_timeout``.

controller-runtime's ``ReconciliationTimeout`` cancels the reconcile's context, and a
well-behaved Go reconcile returns. A Python thread cannot be cancelled from outside, so
a timed-out reconcile is *abandoned* instead, in four steps that happen at once
(`Watchdog.expire`, then the runner's ``on_timeout``)::

    worker thread                      watchdog thread
    ─────────────                      ───────────────
    begin(key) ── Attempt ──────────▶  deadline = started + reconcile_timeout
    reconcile(obj, ctx) … hangs …      deadline passes: expire()
                                        1. the Attempt is timed out: its fence closes,
                                           so each further write through its Context
                                           (and the finalizer's) raises `Fenced`
                                        2. the key is released: a failure (backoff),
                                           then done, so another worker may take it
                                        3. a replacement worker starts, so the
                                           controller keeps its concurrency
                                        4. counted (controller_runtime_reconcile_
                                           timeouts_total), logged at ERROR with the
                                           key, a Warning Event on the object
    … returns (or raises) at last
    finish(attempt) → False: its result is discarded — no requeue, no forget, no
    metrics, no `done` — and, having been replaced, the thread exits.

`Attempt.finish` and `Watchdog.expire` decide under one lock who settles an attempt:
either the worker (it returned in time: everything as usual) or the watchdog (it timed
out: the worker's result counts for nothing), never both. So the queue's bookkeeping of
the key stays one worker's even while the abandoned thread still runs **and the retry
of the same key runs beside it**: that is the point of the timeout, and why its writes
are fenced. What the fence cannot stop: a write already sent when the timeout struck,
requests made with the kubernetes client's own classes on ``ctx.client``, and calls to
systems other than the API server — those are the reconcile's own to bound (give every
call a timeout).

Replacements are bounded: at most `REPLACEMENTS_PER_WORKER` times
``max_concurrent_reconciles`` abandoned threads are replaced at once (they exit when
their calls return). Several per worker, because the retry of a key that hung usually
hangs again (the cloud API is still down) while the first attempt still runs; bounded,
because threads must not grow without end when everything hangs. Past the bound a
timeout still releases the key and fences the writes, but the controller runs with
fewer workers until an abandoned thread returns.
``operator_kit_controller_stuck_reconciles`` is the number of abandoned reconciles
still running.

With ``reconcile_timeout = None`` (the default, as in controller-runtime) nothing is
timed out: a hung reconcile holds its worker and its key until it returns, and
``workqueue_longest_running_processor_seconds`` shows it.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable

from operator_kit import metrics
from operator_kit.client.transport import error_message
from operator_kit.runtime.cache import describe
from operator_kit.runtime.watching import Key

log = logging.getLogger("operator_kit.controller")

REPLACEMENTS_PER_WORKER = 4
"""How many abandoned threads each of a controller's workers may have replaced at once."""

MIN_WAKE = 0.01
"""The watchdog's shortest sleep (seconds), so a deadline just passed costs no spin."""


class Attempt:
    """One reconcile of `key` by a worker thread: running, then finished or timed out."""

    __slots__ = ("key", "started", "thread", "timed_out")

    def __init__(self, key: Key, started: float, thread: threading.Thread) -> None:
        self.key = key
        self.started = started
        self.thread = thread
        self.timed_out: str | None = None
        """Why its writes are refused, once the watchdog timed it out; else None."""

    def refusal(self) -> str | None:
        """The fence of its writes (`operator_kit.client.fencing.FencedApi`): None while
        it may write, the reason once it timed out."""
        return self.timed_out


class Watchdog:
    """The reconciles of one controller in flight, and the thread that times them out.

    `begin` and `finish` bracket each reconcile in its worker; `expire(now)` (the
    watchdog thread's step, given the time, so tests need no thread) times out the
    attempts past their deadline. With ``timeout=None`` nothing is tracked and no
    thread runs."""

    def __init__(self, controller: str, *, timeout: float | None, max_spares: int,
                 stop: threading.Event, start_worker: Callable[[str], None],
                 on_timeout: Callable[[Attempt, bool], None],
                 labels: tuple[str, str] | None = None) -> None:
        self.controller = controller
        self.timeout = timeout
        self.max_spares = max_spares
        self.stop = stop
        self._start_worker = start_worker
        self._on_timeout = on_timeout
        self._lock = threading.Lock()
        self._running: dict[Key, Attempt] = {}
        # Timed out, still running: their threads have not returned yet.
        self._abandoned: set[Attempt] = set()
        # Workers a replacement took the place of; each exits once its reconcile
        # returns, so there are as many replacements running as workers in here.
        self._retiring: set[threading.Thread] = set()
        # ... and those that have exited since: not dead threads (`replaced`).
        self._retired: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
        self._spares = 0
        # (controller, cluster) on the metrics: default `controller` on the hub
        self._stuck = metrics.STUCK.labels(*(labels or (controller, metrics.HUB)))

    def start(self) -> threading.Thread | None:
        """Start the watchdog's thread (none without a timeout); it ends on `stop`."""
        if self.timeout is None:
            return None
        thread = threading.Thread(target=self._watch, name=f"watchdog-{self.controller}",
                                  daemon=True)
        thread.start()
        return thread

    def begin(self, key: Key) -> Attempt:
        """The calling worker starts reconciling `key`."""
        attempt = Attempt(key, time.monotonic(), threading.current_thread())
        if self.timeout is not None:
            with self._lock:
                self._running[key] = attempt
        return attempt

    def finish(self, attempt: Attempt, failure: BaseException | None = None) -> bool:
        """The reconcile of `attempt` returned (or raised `failure`): whether its result
        counts — False when it had timed out, so the watchdog settled its key already."""
        if self.timeout is None:
            return True
        with self._lock:
            if attempt.timed_out is None:
                self._running.pop(attempt.key, None)
                return True
            self._abandoned.discard(attempt)
            self._stuck.set(len(self._abandoned))
        log.warning("%s: the timed-out reconcile of %s returned after %.1fs (%s): what it "
                    "returned is discarded", self.controller, describe(attempt.key),
                    time.monotonic() - attempt.started,
                    "no error" if failure is None else error_message(failure))
        return False

    def expire(self, now: float) -> list[tuple[Attempt, bool]]:
        """Time out every attempt running past its deadline at `now`: each is closed to
        writes and marked for a replacement worker when the bound allows; the list of
        (attempt, replaced). The caller releases their keys (`on_timeout`)."""
        timeout = self.timeout
        if timeout is None:
            return []
        expired: list[tuple[Attempt, bool]] = []
        with self._lock:
            for key, attempt in list(self._running.items()):
                if now - attempt.started <= timeout:
                    continue
                del self._running[key]
                attempt.timed_out = (
                    f"the reconcile of {describe(key)} ran past its reconcile_timeout "
                    f"({timeout:g}s); its key was released for a retry, which may be "
                    "running now, so this reconcile may no longer write")
                self._abandoned.add(attempt)
                replaced = (len(self._retiring) < self.max_spares
                            and attempt.thread not in self._retiring
                            and not self.stop.is_set())
                if replaced:
                    self._retiring.add(attempt.thread)
                expired.append((attempt, replaced))
            self._stuck.set(len(self._abandoned))
        return expired

    def next_deadline(self) -> float | None:
        """The earliest deadline of the attempts running (monotonic), or None."""
        if self.timeout is None:
            return None
        with self._lock:
            earliest = min((a.started for a in self._running.values()), default=None)
        return None if earliest is None else earliest + self.timeout

    def abandoned(self) -> int:
        """Timed-out reconciles whose threads still run."""
        with self._lock:
            return len(self._abandoned)

    def retire(self) -> bool:
        """Whether the calling worker was replaced while it was stuck (then it exits
        now that its reconcile returned)."""
        with self._lock:
            current = threading.current_thread()
            if current in self._retiring:
                self._retiring.discard(current)
                self._retired.add(current)
                return True
            return False

    def replaced(self) -> set[threading.Thread]:
        """The workers a new one replaced after a timeout, running or exited: a thread
        that ended for that reason is not a dead thread."""
        with self._lock:
            return self._retiring | set(self._retired)

    def _watch(self) -> None:
        """Sleep until the earliest deadline (or a whole timeout when nothing runs: a
        reconcile that begins meanwhile cannot be due sooner), then time out what is due."""
        assert self.timeout is not None
        delay = self.timeout
        while not self.stop.wait(delay):
            for attempt, replaced in self.expire(time.monotonic()):
                if replaced:
                    self._spares += 1
                    self._start_worker(f"reconcile-{self.controller}-spare-{self._spares}")
                try:
                    self._on_timeout(attempt, replaced)
                except Exception:  # the watchdog must outlive one failed report
                    log.exception("%s: settling the timed-out reconcile of %s failed",
                                  self.controller, describe(attempt.key))
            deadline = self.next_deadline()
            delay = self.timeout if deadline is None else max(
                MIN_WAKE, deadline - time.monotonic())
