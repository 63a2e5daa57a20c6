"""The work queue: de-duplication, one worker per key, delays, failure backoff, shutdown,
priorities."""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict

import pytest

from operator_kit.runtime.queueing import (
    LOW_PRIORITY,
    NORMAL_PRIORITY,
    Backoff,
    Key,
    WorkQueue,
)


class FakeClock:
    """A clock that moves only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.calls = 0

    def __call__(self) -> float:
        self.calls += 1
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def queue(clock: FakeClock) -> WorkQueue[Key]:
    return WorkQueue("test", clock=clock)


A: Key = ("default", "a")
B: Key = ("default", "b")
C: Key = ("", "c")


def drain(queue: WorkQueue[Key]) -> list[Key]:
    """Every key due now, in order, each marked done."""
    keys = []
    while (key := queue.get(timeout=0)) is not None:
        keys.append(key)
        queue.done(key)
    return keys


def in_thread(target: object, *args: object) -> tuple[threading.Thread, list[object]]:
    """Run target(*args) in a thread; the list receives its result."""
    result: list[object] = []

    def run() -> None:
        result.append(target(*args))  # type: ignore[operator]

    thread = threading.Thread(target=run, name="test-getter", daemon=True)
    thread.start()
    return thread, result


# -- 1. de-duplication ------------------------------------------------------------------


def test_key_added_twice_while_waiting_is_returned_once(queue: WorkQueue[Key]) -> None:
    queue.add(A)
    queue.add(B)
    queue.add(A)

    assert len(queue) == 2
    assert drain(queue) == [A, B]


def test_keys_are_returned_in_the_order_they_became_ready(queue: WorkQueue[Key]) -> None:
    for key in (C, A, B):
        queue.add(key)

    assert drain(queue) == [C, A, B]


# -- 2. one worker per key --------------------------------------------------------------


def test_key_added_while_processing_is_not_handed_to_another_worker(
    queue: WorkQueue[Key],
) -> None:
    assert queue.get(timeout=0) is None
    queue.add(A)
    assert queue.get(timeout=0) == A

    queue.add(A)

    assert queue.get(timeout=0) is None
    assert queue.in_flight() == 1


def test_key_added_while_processing_is_returned_again_after_done_only_once(
    queue: WorkQueue[Key],
) -> None:
    queue.add(A)
    key = queue.get(timeout=0)
    for _ in range(5):
        queue.add(A)
    assert len(queue) == 1

    queue.done(A)

    assert key == A
    assert queue.get(timeout=0) == A
    queue.done(A)
    assert queue.get(timeout=0) is None


def test_key_not_added_again_is_not_returned_after_done(queue: WorkQueue[Key]) -> None:
    queue.add(A)
    queue.get(timeout=0)
    queue.done(A)

    assert queue.get(timeout=0) is None
    assert len(queue) == 0
    assert queue.in_flight() == 0


def test_other_keys_are_served_while_one_is_processing(queue: WorkQueue[Key]) -> None:
    queue.add(A)
    queue.get(timeout=0)
    queue.add(A)
    queue.add(B)

    assert queue.get(timeout=0) == B


def test_done_for_a_key_not_being_processed_does_nothing(queue: WorkQueue[Key]) -> None:
    queue.add(A)
    queue.done(A)

    assert drain(queue) == [A]


# -- 3. delays --------------------------------------------------------------------------


def test_delayed_key_becomes_ready_only_after_its_delay(
    queue: WorkQueue[Key], clock: FakeClock
) -> None:
    queue.add(A, delay=10)
    assert queue.scheduled_in(A) == 10
    assert len(queue) == 1

    clock.advance(9.9)
    assert queue.get(timeout=0) is None

    clock.advance(0.1)
    assert queue.get(timeout=0) == A
    assert queue.scheduled_in(A) is None


def test_shorter_delay_moves_a_delayed_key_earlier(queue: WorkQueue[Key], clock: FakeClock) -> None:
    queue.add(A, delay=60)
    queue.add(A, delay=5)

    assert queue.scheduled_in(A) == 5
    clock.advance(5)
    assert drain(queue) == [A]
    clock.advance(60)
    assert drain(queue) == []


def test_longer_delay_than_pending_is_ignored(queue: WorkQueue[Key], clock: FakeClock) -> None:
    queue.add(A, delay=5)
    queue.add(A, delay=60)

    assert queue.scheduled_in(A) == 5
    clock.advance(5)
    assert drain(queue) == [A]


def test_add_without_delay_makes_a_delayed_key_ready_now(
    queue: WorkQueue[Key], clock: FakeClock
) -> None:
    queue.add(A, delay=30)

    queue.add(A)

    assert queue.scheduled_in(A) is None
    assert drain(queue) == [A]
    clock.advance(30)
    assert drain(queue) == []


def test_delayed_add_of_a_ready_key_is_ignored(queue: WorkQueue[Key], clock: FakeClock) -> None:
    queue.add(A)
    queue.add(A, delay=30)

    assert queue.scheduled_in(A) is None
    assert drain(queue) == [A]
    clock.advance(30)
    assert drain(queue) == []


def test_key_delayed_during_processing_is_scheduled_from_the_add(
    queue: WorkQueue[Key], clock: FakeClock
) -> None:
    queue.add(A)
    queue.get(timeout=0)
    queue.add(A, delay=10)  # e.g. Action.requeue(10) returned by the reconcile
    queue.done(A)

    assert queue.scheduled_in(A) == 10
    assert drain(queue) == []
    clock.advance(10)
    assert drain(queue) == [A]


def test_key_falling_due_while_processing_waits_for_done(
    queue: WorkQueue[Key], clock: FakeClock
) -> None:
    queue.add(A)
    queue.get(timeout=0)
    queue.add(A, delay=1)
    clock.advance(1)

    assert queue.get(timeout=0) is None
    queue.done(A)
    assert queue.get(timeout=0) == A


def test_delayed_keys_become_ready_in_due_order(queue: WorkQueue[Key], clock: FakeClock) -> None:
    queue.add(A, delay=3)
    queue.add(B, delay=1)
    queue.add(C, delay=2)

    clock.advance(3)

    assert drain(queue) == [B, C, A]


def test_blocked_get_returns_a_delayed_key_when_it_falls_due() -> None:
    queue: WorkQueue[Key] = WorkQueue("real-clock")
    queue.add(A, delay=0.05)

    started = time.monotonic()
    key = queue.get(timeout=2)

    assert key == A
    assert 0.04 <= time.monotonic() - started < 1


def test_blocked_get_wakes_for_a_key_added_with_an_earlier_delay() -> None:
    queue: WorkQueue[Key] = WorkQueue("real-clock")
    queue.add(A, delay=60)
    getter, result = in_thread(queue.get, 2.0)
    time.sleep(0.02)  # let the getter block until A's time

    started = time.monotonic()
    queue.add(B, delay=0.05)
    getter.join(2)

    assert result == [B]
    assert time.monotonic() - started < 1


def test_blocked_get_rereads_a_fake_clock_when_woken(
    queue: WorkQueue[Key], clock: FakeClock
) -> None:
    queue.add(A, delay=60)
    getter, result = in_thread(queue.get, 2.0)
    time.sleep(0.02)

    clock.advance(60)
    queue._wake()
    getter.join(2)

    assert result == [A]


# -- 4. failure backoff -----------------------------------------------------------------


def test_failure_backoff_doubles_from_5_seconds_up_to_5_minutes(queue: WorkQueue[Key]) -> None:
    delays = [queue.add_failure(A) for _ in range(9)]

    assert delays == [5, 10, 20, 40, 80, 160, 300, 300, 300]
    assert queue.failures(A) == 9


def test_failed_key_is_queued_after_its_backoff(queue: WorkQueue[Key], clock: FakeClock) -> None:
    queue.add(A)
    queue.get(timeout=0)
    delay = queue.add_failure(A)
    queue.done(A)

    assert queue.scheduled_in(A) == delay == 5
    clock.advance(4.9)
    assert drain(queue) == []
    clock.advance(0.1)
    assert drain(queue) == [A]


def test_failure_counts_are_independent_per_key(queue: WorkQueue[Key]) -> None:
    queue.add_failure(A)
    queue.add_failure(A)
    queue.add_failure(A)

    assert queue.add_failure(B) == 5
    assert queue.failures(A) == 3
    assert queue.failures(B) == 1


def test_forget_resets_the_backoff_to_its_base(queue: WorkQueue[Key]) -> None:
    queue.add_failure(A)
    queue.add_failure(A)

    queue.forget(A)

    assert queue.failures(A) == 0
    assert queue.add_failure(A) == 5


def test_failure_of_a_key_changed_meanwhile_keeps_it_due_now(queue: WorkQueue[Key]) -> None:
    queue.add(A)
    queue.get(timeout=0)
    queue.add(A)  # the object changed during the failing reconcile
    queue.add_failure(A)
    queue.done(A)

    assert queue.get(timeout=0) == A


def test_failure_backoff_is_configurable() -> None:
    queue: WorkQueue[Key] = WorkQueue("fast", failure_backoff=Backoff(base=0.5, cap=1.5))

    assert [queue.add_failure(A) for _ in range(4)] == [0.5, 1.0, 1.5, 1.5]


# -- 5. timeouts, shutdown, no busy waiting -------------------------------------------


def test_get_returns_none_after_its_timeout() -> None:
    queue: WorkQueue[Key] = WorkQueue("empty")

    started = time.monotonic()
    assert queue.get(timeout=0.05) is None
    assert 0.04 <= time.monotonic() - started < 1


def test_get_times_out_before_a_later_delayed_key(queue: WorkQueue[Key]) -> None:
    queue.add(A, delay=60)

    assert queue.get(timeout=0.02) is None
    assert queue.scheduled_in(A) == 60


def test_shut_down_wakes_every_blocked_getter_with_none(queue: WorkQueue[Key]) -> None:
    getters = [in_thread(queue.get) for _ in range(4)]
    time.sleep(0.02)

    queue.shut_down()
    for thread, _ in getters:
        thread.join(2)

    assert [result for _, result in getters] == [[None]] * 4
    assert queue.shutting_down


def test_shut_down_is_idempotent_and_later_adds_are_ignored(queue: WorkQueue[Key]) -> None:
    queue.shut_down()
    queue.shut_down()

    queue.add(A)
    queue.add(B, delay=1)
    queue.add_failure(C)

    assert len(queue) == 0
    assert queue.get(timeout=0) is None


def test_get_after_shut_down_hands_out_no_more_keys(queue: WorkQueue[Key]) -> None:
    queue.add(A)
    queue.add(B)
    assert queue.get(timeout=0) == A

    queue.shut_down()

    assert queue.get() is None
    queue.done(A)
    assert queue.in_flight() == 0


def test_waiting_get_sleeps_instead_of_polling(queue: WorkQueue[Key], clock: FakeClock) -> None:
    queue.add(A, delay=60)
    clock.calls = 0

    assert queue.get(timeout=0.1) is None

    assert clock.calls <= 4  # one look before sleeping, one after: no spinning


def test_wait_idle_returns_once_the_last_key_is_done(queue: WorkQueue[Key]) -> None:
    queue.add(A)
    queue.add(B)
    queue.get(timeout=0)
    queue.get(timeout=0)
    assert queue.in_flight() == 2
    waiter, result = in_thread(queue.wait_idle, 2.0)

    queue.done(A)
    time.sleep(0.02)
    assert result == []
    queue.done(B)
    waiter.join(2)

    assert result == [True]


def test_wait_idle_times_out_while_a_key_is_in_flight(queue: WorkQueue[Key]) -> None:
    queue.add(A)
    queue.get(timeout=0)

    assert queue.wait_idle(0.02) is False
    queue.done(A)
    assert queue.wait_idle(0) is True


# -- 6. thread safety -------------------------------------------------------------------


def test_concurrent_producers_and_workers_never_share_a_key_and_miss_no_change() -> None:
    """Producers bump an object's version, then add its key; workers read the version.

    Level-based correctness: after the queue drains, the last reconcile of every key saw
    its final version -- no change was lost -- and no key was ever held by two workers.
    """
    queue: WorkQueue[Key] = WorkQueue("stress", failure_backoff=Backoff(base=0.001, cap=0.004))
    keys: list[Key] = [(f"ns{i % 3}", f"obj{i}") for i in range(40)]
    lock = threading.Lock()
    version: dict[Key, int] = defaultdict(int)
    seen: dict[Key, int] = defaultdict(lambda: -1)
    active: set[Key] = set()
    overlaps: list[Key] = []
    reconciles = 0

    def produce(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(1500):
            key = rng.choice(keys)
            with lock:
                version[key] += 1
            queue.add(key, delay=rng.choice([0, 0, 0, 0.001, 0.003]))

    def work(seed: int) -> None:
        nonlocal reconciles
        rng = random.Random(seed)
        while (key := queue.get()) is not None:
            with lock:
                if key in active:
                    overlaps.append(key)
                active.add(key)
                seen[key] = max(seen[key], version[key])
                reconciles += 1
            if rng.random() < 0.05:
                time.sleep(0.0005)
            with lock:
                active.discard(key)
            if rng.random() < 0.1:
                queue.add_failure(key)
            else:
                queue.forget(key)
            queue.done(key)

    workers = [threading.Thread(target=work, args=(i,), name=f"worker-{i}") for i in range(8)]
    producers = [
        threading.Thread(target=produce, args=(100 + i,), name=f"producer-{i}") for i in range(4)
    ]
    for thread in workers + producers:
        thread.start()
    for thread in producers:
        thread.join(10)

    deadline = time.monotonic() + 5
    while (len(queue) or queue.in_flight()) and time.monotonic() < deadline:
        time.sleep(0.005)
    queue.shut_down()
    for thread in workers:
        thread.join(5)

    assert not any(thread.is_alive() for thread in workers + producers)
    assert overlaps == []
    assert {key: seen[key] for key in version} == dict(version)
    assert reconciles < 4 * 1500  # de-duplication folded some adds together


# -- performance ------------------------------------------------------------------------


def test_five_thousand_keys_are_queued_and_drained_quickly(
    queue: WorkQueue[Key], clock: FakeClock
) -> None:
    keys: list[Key] = [("ns", f"obj-{i}") for i in range(5000)]
    started = time.monotonic()
    for i, key in enumerate(keys):
        queue.add(key, delay=(i * 7919) % 5000 / 100)  # scattered due times
        queue.add(key, delay=(i * 7919) % 5000 / 200)  # and each moved earlier once
    for key in keys:
        queue.add(key)

    assert len(queue) == 5000
    assert len(drain(queue)) == 5000
    for key in keys:
        queue.add(key, delay=1 + (hash(key) % 100) / 10)
    clock.advance(11)
    assert sorted(drain(queue)) == sorted(keys)
    assert time.monotonic() - started < 2


# -- 7. Backoff -------------------------------------------------------------------------


def test_backoff_grows_by_its_factor_from_base_up_to_cap() -> None:
    backoff = Backoff(base=1, cap=30, factor=3)

    assert [backoff.delay(n) for n in range(1, 6)] == [1, 3, 9, 27, 30]


def test_backoff_stays_at_cap_for_very_many_attempts() -> None:
    assert Backoff().delay(100_000) == 300


def test_jittered_backoff_stays_within_the_jitter_fraction_below_the_delay() -> None:
    backoff = Backoff(base=10, cap=100, jitter=0.25)
    rng = random.Random(7)

    delays = [backoff.delay(2, rng.random) for _ in range(1000)]

    assert all(15 <= d <= 20 for d in delays)
    assert max(delays) - min(delays) > 4  # it does spread
    assert backoff.delay(2, lambda: 0.0) == 20
    assert backoff.delay(2, lambda: 0.5) == 17.5
    assert backoff.delay(2, lambda: 0.5) == backoff.delay(2, lambda: 0.5)


def test_full_jitter_ranges_from_zero_to_the_delay() -> None:
    backoff = Backoff(base=4, jitter=1.0)

    assert backoff.delay(1, lambda: 0.0) == 4
    assert backoff.delay(1, lambda: 0.75) == 1


def test_backoff_without_jitter_never_calls_rand() -> None:
    def rand() -> float:
        raise AssertionError("rand must not be called without jitter")

    assert Backoff().delay(3, rand) == 20


@pytest.mark.parametrize(
    "settings",
    [{"base": -1}, {"base": 10, "cap": 5}, {"factor": 0.5}, {"jitter": 1.5}, {"jitter": -0.1}],
)
def test_backoff_rejects_invalid_settings(settings: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="Backoff"):
        Backoff(**settings)


def test_backoff_attempts_count_from_one() -> None:
    with pytest.raises(ValueError, match="from 1"):
        Backoff().delay(0)


# -- 6. priorities ----------------------------------------------------------------------

D: Key = ("default", "d")


def backlog(n: int) -> list[Key]:
    return [("listed", f"obj-{i}") for i in range(n)]


def test_a_normal_key_is_handed_out_before_a_low_priority_backlog(
    queue: WorkQueue[Key],
) -> None:
    for key in backlog(1000):
        queue.add(key, priority=LOW_PRIORITY)

    queue.add(A)  # a live watch event, after the whole initial list

    assert queue.get(timeout=0) == A


def test_keys_of_one_priority_are_first_in_first_out(queue: WorkQueue[Key]) -> None:
    listed = backlog(50)
    for key in listed:
        queue.add(key, priority=LOW_PRIORITY)
    for key in (C, A, B):
        queue.add(key)

    assert drain(queue) == [C, A, B, *listed]


def test_higher_priorities_come_first_whatever_the_numbers(queue: WorkQueue[Key]) -> None:
    queue.add(A, priority=-5)
    queue.add(B, priority=10)
    queue.add(C, priority=LOW_PRIORITY)
    queue.add(D)

    assert drain(queue) == [B, D, A, C]


def test_a_low_key_added_again_at_normal_priority_moves_up_behind_the_normal_ones(
    queue: WorkQueue[Key],
) -> None:
    for key in (A, B, C):
        queue.add(key, priority=LOW_PRIORITY)
    queue.add(D)

    queue.add(C)  # changed while waiting from the initial list

    assert len(queue) == 4
    assert queue.priority_of(C) == NORMAL_PRIORITY
    assert drain(queue) == [D, C, A, B]


def test_a_lower_priority_add_never_lowers_a_waiting_key(queue: WorkQueue[Key]) -> None:
    queue.add(A)
    queue.add(B)
    queue.add(A, priority=LOW_PRIORITY)

    assert queue.priority_of(A) == NORMAL_PRIORITY
    assert drain(queue) == [A, B]


def test_a_raised_key_is_not_returned_twice(queue: WorkQueue[Key]) -> None:
    queue.add(A, priority=LOW_PRIORITY)
    queue.add(A)
    queue.add(A, priority=50)

    assert drain(queue) == [A]
    assert drain(queue) == []


def test_a_delayed_key_keeps_its_highest_priority_and_its_earliest_time(
    queue: WorkQueue[Key], clock: FakeClock
) -> None:
    queue.add(A, delay=10, priority=LOW_PRIORITY)
    queue.add(A, delay=30)  # later, but at a higher priority

    assert queue.scheduled_in(A) == 10
    assert queue.priority_of(A) == NORMAL_PRIORITY
    for key in backlog(5):
        queue.add(key, priority=LOW_PRIORITY)
    clock.advance(10)

    assert queue.get(timeout=0) == A


def test_a_delayed_normal_key_made_due_now_by_a_low_add_stays_normal(
    queue: WorkQueue[Key],
) -> None:
    queue.add(B, priority=LOW_PRIORITY)
    queue.add(A, delay=30)  # a requeue the reconcile asked for

    queue.add(A, priority=LOW_PRIORITY)  # the relist saw it

    assert queue.scheduled_in(A) is None
    assert drain(queue) == [A, B]


def test_delayed_keys_fall_due_into_their_priority_by_due_time(
    queue: WorkQueue[Key], clock: FakeClock
) -> None:
    queue.add(A, delay=2, priority=LOW_PRIORITY)
    queue.add(B, delay=1, priority=LOW_PRIORITY)
    queue.add(C, delay=3)
    queue.add(D, priority=LOW_PRIORITY)  # ready at once, before them all

    clock.advance(3)

    assert drain(queue) == [C, D, B, A]


def test_a_key_added_while_processing_comes_back_at_the_priority_of_that_add(
    queue: WorkQueue[Key],
) -> None:
    queue.add(A, priority=LOW_PRIORITY)
    assert queue.get(timeout=0) == A
    for key in backlog(3):
        queue.add(key, priority=LOW_PRIORITY)
    queue.add(A)  # changed during its reconcile: a live event

    assert queue.get(timeout=0) == ("listed", "obj-0")  # A is held: never two workers
    queue.done(A)

    assert queue.get(timeout=0) == A


def test_a_failure_retries_at_the_priority_the_key_was_taken_at(
    queue: WorkQueue[Key], clock: FakeClock
) -> None:
    queue.add(A, priority=LOW_PRIORITY)
    queue.add(B)
    assert queue.get(timeout=0) == B
    assert queue.get(timeout=0) == A
    assert queue.priority_of(A) == LOW_PRIORITY
    queue.add_failure(A)
    queue.add_failure(B)
    queue.done(A)
    queue.done(B)

    assert queue.priority_of(A) == LOW_PRIORITY
    assert queue.priority_of(B) == NORMAL_PRIORITY
    queue.add(C, priority=LOW_PRIORITY)
    clock.advance(5)
    assert drain(queue) == [B, C, A]


def test_a_failure_of_a_key_no_worker_holds_retries_at_the_priority_asked(
    queue: WorkQueue[Key],
) -> None:
    queue.add_failure(A)
    queue.add_failure(B, priority=LOW_PRIORITY)

    assert queue.priority_of(A) == NORMAL_PRIORITY
    assert queue.priority_of(B) == LOW_PRIORITY


def test_priority_of_a_key_nowhere_is_none(queue: WorkQueue[Key]) -> None:
    queue.add(A)
    drain(queue)

    assert queue.priority_of(A) is None


def test_raising_many_keys_keeps_the_ready_heap_bounded(queue: WorkQueue[Key]) -> None:
    keys = backlog(500)
    for key in keys:
        queue.add(key, priority=LOW_PRIORITY)
    for priority in range(1, 6):
        for key in keys:
            queue.add(key, priority=priority)

    assert len(queue._ready) <= 2 * len(keys) + 1
    assert drain(queue) == keys


def test_stats_count_ready_keys_by_priority(queue: WorkQueue[Key], clock: FakeClock) -> None:
    queue.add(A, priority=LOW_PRIORITY)
    queue.add(B, priority=LOW_PRIORITY)
    queue.add(C)
    queue.add(D, delay=1, priority=3)
    clock.advance(1)  # due, not yet promoted by a get

    assert queue.stats() == ({LOW_PRIORITY: 2, NORMAL_PRIORITY: 1, 3: 1}, 0.0, 0.0)


def test_many_workers_never_hold_one_key_at_once_under_mixed_priorities() -> None:
    queue: WorkQueue[Key] = WorkQueue("mixed")
    keys = backlog(40)
    holders: dict[Key, int] = defaultdict(int)
    overlaps: list[Key] = []
    processed: list[Key] = []
    lock = threading.Lock()
    stop = threading.Event()

    def work() -> None:
        while (key := queue.get(timeout=0.5)) is not None:
            with lock:
                holders[key] += 1
                if holders[key] > 1:
                    overlaps.append(key)
            time.sleep(0.0005)
            with lock:
                holders[key] -= 1
                processed.append(key)
            queue.done(key)
            if stop.is_set() and len(queue) == 0:
                return

    workers = [threading.Thread(target=work, name=f"test-worker-{i}") for i in range(4)]
    for worker in workers:
        worker.start()
    rng = random.Random(7)
    for _ in range(2000):
        queue.add(rng.choice(keys), priority=rng.choice((LOW_PRIORITY, NORMAL_PRIORITY, 5)))
    stop.set()
    for worker in workers:
        worker.join(10)

    assert overlaps == []
    assert set(processed) <= set(keys)
    assert len(queue) == 0
