"""The per-key work queue between a controller's watch and its workers.

The watch thread (the producer) turns every change it sees into a *key* -- for a
Kubernetes object, ``(namespace, name)`` -- and adds it here. Worker threads (the
consumers) take keys with :meth:`WorkQueue.get`, reconcile the object the key names, and
hand the key back with :meth:`WorkQueue.done`. The queue is modelled on client-go's
``workqueue`` (a dirty set, a processing set, a delaying queue and a per-item rate
limiter) and on kube-rs's ``scheduler`` (delayed, de-duplicated keys).

Reconciling is level-based: a worker reads the *current* state of the object, so ten
changes that arrive before a worker gets to a key need one reconcile, not ten. The
queue therefore stores keys, not events, and keeps them in four places:

``dirty``
    Keys that need a reconcile the queue has not yet handed out. Adding a key that is
    already dirty does nothing -- this is the de-duplication.
``ready``
    The dirty keys that no worker holds, highest priority first; within a priority, by
    flow in turn when the queue has flows (fairness.py), and in each flow in the order
    they became ready; ``get()`` takes the first.
``processing``
    Keys a worker holds, between ``get()`` and ``done()``.
``delayed``
    Keys to become dirty at a later time (``add(key, delay)``, requeues, failure
    backoff): a dict of key -> due time plus a heap ordered by due time. A key keeps its
    *earliest* due time only; the heap is lazily cleaned (an entry whose time no longer
    matches the dict is stale and skipped).

Why one key is never reconciled by two workers at once: ``get()`` moves a key from
``ready`` to ``processing`` and removes it from ``dirty``. A key added while it is being
processed becomes dirty again but is *not* put on ``ready`` -- ``ready`` only ever holds
keys that are dirty and not processing. ``done()`` moves the key out of ``processing``
and, if it became dirty meanwhile, appends it to ``ready`` once, however many times it
was added. So a change that arrives mid-reconcile is never lost (the key is reconciled
again, after the current reconcile, seeing the newer state) and never runs in parallel
with the reconcile that is already looking at an older state.

Priorities (controller-runtime's ``priorityqueue``, its default since 0.23): every add
carries an integer priority, higher first -- `NORMAL_PRIORITY` (0) unless said, and
`LOW_PRIORITY` (-100) for what the initial list (or a relist) of a cache brings, so that
after a restart with thousands of objects a new or changed object is reconciled at once
instead of behind the whole backlog. A key waiting (ready or delayed) keeps the *highest*
priority it was added with and the *earliest* time; raised, it moves behind the keys
already ready at its new priority (first in, first out within each priority). A delayed
key that falls due is placed by the time it became due. `add_failure` retries a key at
the priority it was handed out with, as controller-runtime requeues a failed request.

Flows (``flows=``, a `FlowPolicy`; the runner gives a controller's `Fairness`): each add
names the key's flow (a namespace, a tenant), computed before the lock is taken; among
the ready keys of one priority, flows take turns (deficit round robin, by weight), so a
flood of keys in one flow does not make another flow's key wait for it. Without flows,
every key is in one flow: first in, first out within each priority.

Time: delays are measured with the injectable ``clock`` (``time.monotonic`` by default);
a blocked ``get()`` sleeps on a condition variable for no longer than the time until
the next delayed key is due, so there are no timer threads and no busy waiting. Tests
can pass a fake clock, advance it, and call ``get(timeout=0)`` (or ``_wake()`` to rouse
getters that are already blocked). The ``timeout`` arguments of ``get()`` and
``wait_idle()`` are real seconds, whatever the clock.

Failures: :meth:`WorkQueue.add_failure` counts consecutive failures per key and delays
the key by ``failure_backoff.delay(failures)`` -- 5 s, 10 s, 20 s ... up to 5 min by
default; :meth:`WorkQueue.forget` resets the count after a success.

Metrics (client-go's ``workqueue_*`` names, labels ``name`` and ``controller`` as
controller-runtime's, both the controller's name, and ``cluster``: the fleet member, ""
on the hub): ``adds_total`` counts keys
made dirty (a key already waiting is not counted again), ``queue_duration_seconds`` the
time from a key being due to a worker taking it, ``work_duration_seconds`` from ``get``
to ``done``; ``depth`` (ready keys only, never those waiting out a delay or backoff; by
``priority``),
``unfinished_work_seconds`` and ``longest_running_processor_seconds`` are read from
`stats` when scraped; with flows, ``operator_kit_workqueue_flow*`` from `flow_stats`.

Triggers: an add may say why (``trigger=``, a `Trigger`); the queue coalesces them per
key as it coalesces the key (`Triggers`: the first few and a count), and `get` hands
them out with the key: the worker reads them with :meth:`WorkQueue.triggers` until
``done``. A failure's retry is recorded by `add_failure` itself (see triggers.py).

Cost: ``add``, ``get`` and ``done`` are O(log n) (the delayed keys' heap, with lazily
dropped stale entries, rebuilt when they outnumber live ones; ready keys are O(1)).
"""

from __future__ import annotations

import heapq
import itertools
import random
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from operator_kit import metrics
from operator_kit.runtime.fairness import DEFAULT_FLOW, FairQueue, FlowPolicy
from operator_kit.runtime.triggers import Trigger, Triggers

__all__ = ["LOW_PRIORITY", "NORMAL_PRIORITY", "Backoff", "Key", "WorkQueue"]

Key = tuple[str, str]
"""The key of a Kubernetes object: ``(namespace, name)``, namespace ``""`` if cluster-scoped."""

K = TypeVar("K", bound=Hashable)
_RETRY = Trigger("retry")

NORMAL_PRIORITY = 0
"""The priority of a live watch event, a requeue, any add that does not say (as
controller-runtime's default, 0). Higher priorities are handed out first."""

LOW_PRIORITY = -100
"""The priority of what a cache's list brings -- the initial list, a relist, a handler's
replay of the cache -- as controller-runtime's ``handler.LowPriority``."""


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff: ``base * factor**(attempt - 1)``, capped at ``cap``.

    With ``jitter`` j (0 to 1) the delay is drawn from ``[delay * (1 - j), delay]``:
    ``j = 0`` is no randomness (the failure backoff of reconciles), ``j = 1`` is "full
    jitter" (anything from 0 to the delay), which spreads reconnecting watches apart.
    """

    base: float = 5.0
    cap: float = 300.0
    factor: float = 2.0
    jitter: float = 0.0

    def __post_init__(self) -> None:
        if self.base < 0:
            raise ValueError(f"Backoff base must be >= 0 seconds, got {self.base}")
        if self.cap < self.base:
            raise ValueError(f"Backoff cap ({self.cap}) must be at least its base ({self.base})")
        if self.factor < 1:
            raise ValueError(f"Backoff factor must be >= 1, got {self.factor}")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"Backoff jitter must be between 0 and 1, got {self.jitter}")

    def delay(self, attempt: int, rand: Callable[[], float] = random.random) -> float:
        """The delay before retry number ``attempt`` (1 for the first retry).

        ``rand`` returns a float in ``[0, 1)``; it is called only when ``jitter`` is set,
        so the result is deterministic for a given ``rand``.
        """
        if attempt < 1:
            raise ValueError(f"Backoff attempts count from 1, got {attempt}")
        try:
            raw = self.base * self.factor ** (attempt - 1)
        except OverflowError:
            raw = self.cap
        capped = min(raw, self.cap)
        if self.jitter:
            return capped * (1.0 - self.jitter * rand())
        return capped


class WorkQueue(Generic[K]):
    """A thread-safe priority queue of keys: de-duplicated, one worker per key, delays,
    backoff.

    A worker's loop::

        while (key := queue.get()) is not None:
            try:
                reconcile(key)
            except Exception:
                queue.add_failure(key)      # retry after 5 s, 10 s, ... 5 min
            else:
                queue.forget(key)           # the next failure starts at 5 s again
            finally:
                queue.done(key)
    """

    def __init__(
        self,
        name: str,
        *,
        failure_backoff: Backoff = Backoff(),  # frozen, so safe to share
        clock: Callable[[], float] = time.monotonic,
        controller: str | None = None,
        cluster: str = metrics.HUB,
        flows: FlowPolicy[K] | None = None,
    ) -> None:
        self.name = name
        self.controller = name if controller is None else controller
        self.cluster = cluster  # the fleet member its keys are of ("": the hub)
        self.failure_backoff = failure_backoff
        self._clock = clock
        self._lock = threading.Lock()
        self._has_work = threading.Condition(self._lock)  # get() waits here
        self._idle = threading.Condition(self._lock)  # wait_idle() waits here
        self._flows = flows
        self._ready: FairQueue[K] = FairQueue() if flows is None else FairQueue(flows.quantum)
        self._flow: dict[K, str] = {}  # a dirty or delayed key -> its flow, as last added
        self._dirty: set[K] = set()
        self._priority: dict[K, int] = {}  # a dirty or delayed key -> its priority
        self._processing: set[K] = set()
        self._taken: dict[K, int] = {}  # a processing key -> the priority it was taken at
        self._delayed: dict[K, float] = {}
        self._heap: list[tuple[float, int, K]] = []  # (due, tie-breaker, key); may be stale
        self._sequence = itertools.count()
        self._failures: dict[K, int] = {}
        self._shutting_down = False
        self._due_at: dict[K, float] = {}  # dirty key -> when it became due
        self._started_at: dict[K, float] = {}  # processing key -> when get() handed it out
        self._pending: dict[K, Triggers] = {}  # a waiting key -> why it was queued
        self._handed: dict[K, Triggers] = {}  # a processing key -> why, as get() took it
        labels = (name, self.controller, cluster)
        self._adds = metrics.WORKQUEUE_ADDS.labels(*labels)
        self._queue_duration = metrics.WORKQUEUE_QUEUE_DURATION.labels(*labels)
        self._work_duration = metrics.WORKQUEUE_WORK_DURATION.labels(*labels)
        metrics.WORKQUEUE_GAUGES.track(self)
        if flows is not None:
            metrics.WORKQUEUE_FLOW_GAUGES.track(self)

    def __repr__(self) -> str:
        with self._lock:
            return (
                f"<WorkQueue {self.name!r}: {len(self._ready)} ready, "
                f"{len(self._delayed)} delayed, {len(self._processing)} processing>"
            )

    # -- producers -------------------------------------------------------------------

    def add(self, key: K, delay: float = 0.0, priority: int = NORMAL_PRIORITY,
            trigger: Trigger | Triggers | None = None) -> None:
        """Queue ``key``, now or after ``delay`` seconds, at ``priority`` (higher first),
        because of ``trigger`` (or several, carried over), if given.

        A key already waiting is not queued twice: it keeps the earlier of its pending
        time and the new one (a dirty key counts as due now) and the higher of the two
        priorities; its triggers are coalesced. Ignored after shutdown.
        """
        flow = DEFAULT_FLOW if self._flows is None else self._flows.of(key)
        with self._lock:
            self._add(key, delay, priority, trigger, flow)

    def triggers(self, key: K) -> Triggers:
        """Why ``key`` was queued, as `get` handed it out (empty when no worker holds it,
        or its adds gave no trigger)."""
        with self._lock:
            return self._handed.get(key) or Triggers()

    def add_failure(self, key: K, at_least: float = 0.0, priority: int | None = None) -> float:
        """Record one more consecutive failure of ``key`` and queue it after the backoff.

        Returns the backoff delay in seconds (``failure_backoff.delay(failures)``, or
        `at_least` when longer: a failure that a retry soon cannot fix). If the key is
        already due sooner (for example, it changed during the failed reconcile) it
        keeps the sooner time. The retry has ``priority``, by default the one the key
        was handed out with (`NORMAL_PRIORITY` for a key no worker holds).
        """
        flow = DEFAULT_FLOW if self._flows is None else self._flows.of(key)
        with self._lock:
            failures = self._failures.get(key, 0) + 1
            self._failures[key] = failures
            delay = max(self.failure_backoff.delay(failures), at_least)
            if priority is None:
                priority = self._taken.get(key, NORMAL_PRIORITY)
            self._add(key, delay, priority, _RETRY, flow)
            return delay

    def forget(self, key: K) -> None:
        """Reset the failure count of ``key`` (call it after a successful reconcile)."""
        with self._lock:
            self._failures.pop(key, None)

    def failures(self, key: K) -> int:
        """The number of consecutive failures recorded for ``key`` since its last forget."""
        with self._lock:
            return self._failures.get(key, 0)

    def scheduled_in(self, key: K) -> float | None:
        """Seconds until delayed ``key`` becomes due; ``None`` if it is not delayed."""
        with self._lock:
            due = self._delayed.get(key)
            if due is None:
                return None
            return max(0.0, due - self._clock())

    def priority_of(self, key: K) -> int | None:
        """The priority ``key`` waits at (ready or delayed), or was handed out at while a
        worker holds it; ``None`` if it is in neither place."""
        with self._lock:
            return self._priority.get(key, self._taken.get(key))

    # -- consumers -------------------------------------------------------------------

    def get(self, timeout: float | None = None) -> K | None:
        """Take the next due key -- the highest priority, then the flow whose turn it is,
        then the longest ready --, blocking until there is one.

        Returns ``None`` after ``timeout`` real seconds (``None``: wait for ever) or once
        the queue is shutting down -- keys still waiting are then not handed out. The
        caller owns the key until it calls :meth:`done`.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while not self._shutting_down:
                self._promote_due()
                key = self._pop_ready()
                if key is not None:
                    self._dirty.discard(key)
                    self._flow.pop(key, None)
                    self._processing.add(key)
                    self._taken[key] = self._priority.pop(key, NORMAL_PRIORITY)
                    handed = self._pending.pop(key, None)
                    if handed is not None:
                        self._handed[key] = handed
                    now = self._clock()
                    due = self._due_at.pop(key, now)
                    self._queue_duration.observe(max(0.0, now - due))
                    self._started_at[key] = now
                    return key
                wait = self._seconds_to_next_due()
                if deadline is not None:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return None
                    wait = remaining if wait is None else min(wait, remaining)
                self._has_work.wait(wait)
            return None

    def done(self, key: K) -> None:
        """Release ``key`` after processing; it is queued again if it was added meanwhile
        (at the priority of those adds).

        A ``done`` for a key that is not being processed does nothing.
        """
        with self._lock:
            if key not in self._processing:
                return
            self._processing.remove(key)
            self._taken.pop(key, None)
            self._handed.pop(key, None)
            started = self._started_at.pop(key, None)
            if started is not None:
                self._work_duration.observe(max(0.0, self._clock() - started))
            if key in self._dirty:
                self._push_ready(key)
            if not self._processing:
                self._idle.notify_all()

    # -- lifecycle -------------------------------------------------------------------

    def shut_down(self) -> None:
        """Stop handing out keys: every blocked and later ``get()`` returns ``None``.

        Later adds are ignored; workers still call ``done()`` for the keys they hold,
        and :meth:`wait_idle` waits for them. Calling it again does nothing.
        """
        with self._lock:
            self._shutting_down = True
            self._has_work.notify_all()

    @property
    def shutting_down(self) -> bool:
        """Whether :meth:`shut_down` has been called."""
        with self._lock:
            return self._shutting_down

    def __len__(self) -> int:
        """The queue depth: keys waiting to be processed, due now or delayed.

        This includes keys added while being processed (due again after ``done``).
        """
        with self._lock:
            return len(self._dirty) + len(self._delayed)

    def stats(self) -> tuple[dict[int, int], float, float] | None:
        """For the ``workqueue_*`` gauges: (keys ready now -- due, not held by a worker --
        by priority, seconds of work in progress summed, the longest one's seconds);
        None after shutdown."""
        with self._lock:
            if self._shutting_down:
                return None
            now = self._clock()
            ready = self._ready.by_priority()
            for key, at in self._delayed.items():
                if at <= now:
                    priority = self._priority.get(key, NORMAL_PRIORITY)
                    ready[priority] = ready.get(priority, 0) + 1
            running = [now - at for at in self._started_at.values()]
            return ready, sum(running), max(running, default=0.0)

    def flow_stats(self) -> dict[str, tuple[int, float]] | None:
        """For the ``operator_kit_workqueue_flow*`` gauges: each flow with keys ready (due,
        not held by a worker, promoted by a ``get``): (their number, seconds the oldest
        has waited since it was due); None after shutdown."""
        with self._lock:
            if self._shutting_down:
                return None
            now = self._clock()
            flows: dict[str, tuple[int, float]] = {}
            for flow, count, first in self._ready.flows():
                waited = max(0.0, now - self._due_at.get(first, now))
                was = flows.get(flow, (0, 0.0))
                flows[flow] = (was[0] + count, max(was[1], waited))
            return flows

    def in_flight(self) -> int:
        """The number of keys being processed now."""
        with self._lock:
            return len(self._processing)

    def wait_idle(self, timeout: float) -> bool:
        """Block until no key is being processed, up to ``timeout`` real seconds.

        Returns whether the queue became idle (use it after :meth:`shut_down` to let
        workers finish their reconciles).
        """
        with self._lock:
            return self._idle.wait_for(lambda: not self._processing, timeout)

    def _wake(self) -> None:
        """Rouse blocked getters so they re-read the clock (for tests with a fake clock)."""
        with self._lock:
            self._has_work.notify_all()

    # -- internals; the caller holds self._lock ----------------------------------------

    def _add(self, key: K, delay: float, priority: int,
             trigger: Trigger | Triggers | None, flow: str) -> None:
        if self._shutting_down:
            return
        self._flow[key] = flow
        if trigger is not None:
            why = self._pending.get(key)
            if why is None:
                why = self._pending[key] = Triggers()
            why.add(trigger)
        if delay <= 0:
            if self._delayed.pop(key, None) is not None:  # its heap entry goes stale
                priority = max(priority, self._priority.pop(key))
            self._make_dirty(key, priority)
            return
        if key in self._dirty:
            self._raise(key, priority)
            return  # already due now, which is sooner
        due = self._clock() + delay
        pending = self._delayed.get(key)
        self._priority[key] = max(priority, self._priority.get(key, priority))
        if pending is not None and pending <= due:
            return
        self._delayed[key] = due
        earliest = self._next_due()
        heapq.heappush(self._heap, (due, next(self._sequence), key))
        if earliest is None or due < earliest:
            # Blocked getters sleep until the old earliest time; let them re-measure.
            self._has_work.notify_all()
        self._compact_heap()

    def _make_dirty(self, key: K, priority: int, due: float | None = None) -> None:
        if key in self._dirty:
            self._raise(key, priority)
            return
        self._dirty.add(key)
        self._priority[key] = priority
        self._adds.inc()
        self._due_at[key] = self._clock() if due is None else due
        if key not in self._processing:  # a processing key waits for done()
            self._push_ready(key)

    def _raise(self, key: K, priority: int) -> None:
        """A dirty key added again at a higher priority: it moves up, behind the keys
        already ready at that priority."""
        if priority <= self._priority[key]:
            return
        self._priority[key] = priority
        if key in self._ready:
            self._push_ready(key)  # from its old place

    def _push_ready(self, key: K) -> None:
        self._ready.push(key, self._priority[key], self._flow.get(key, DEFAULT_FLOW))
        self._has_work.notify()

    def _pop_ready(self) -> K | None:
        return self._ready.pop()

    def _promote_due(self) -> None:
        """Make every delayed key whose time has come dirty."""
        if not self._heap:
            return
        now = self._clock()
        while self._heap and self._heap[0][0] <= now:
            due, _, key = heapq.heappop(self._heap)
            if self._delayed.get(key) == due:
                del self._delayed[key]
                self._make_dirty(key, self._priority.pop(key), due)

    def _next_due(self) -> float | None:
        """The earliest due time of a delayed key, dropping stale heap entries on the way."""
        while self._heap:
            due, _, key = self._heap[0]
            if self._delayed.get(key) == due:
                return due
            heapq.heappop(self._heap)
        return None

    def _seconds_to_next_due(self) -> float | None:
        due = self._next_due()
        return None if due is None else max(0.0, due - self._clock())

    def _compact_heap(self) -> None:
        """Rebuild the heap when stale entries outnumber live ones, bounding its size."""
        if len(self._heap) > 64 and len(self._heap) > 2 * len(self._delayed):
            self._heap = [(due, next(self._sequence), key) for key, due in self._delayed.items()]
            heapq.heapify(self._heap)
