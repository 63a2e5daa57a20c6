"""The webhook server's pure bounds: the body budget, the memory limit formula, log throttling
(operator_kit.webhooks.limits; the server under attack is in test_webhook_edges.py)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import threading
import time

import pytest

from operator_kit.webhooks.limits import (
    BYTES_PER_BODY_BYTE,
    CONTROLLERS_MEMORY_MIB,
    SMALL_BODY_BYTES,
    BodyBudget,
    LogThrottle,
    limit_malloc_arenas,
    memory_limit_mib,
)

MIB = 1024 * 1024


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# An interpreter whose eight threads each allocate at the same moment, then glibc's count of
# malloc arenas (malloc_stats prints one "Arena N:" block per arena on stderr).
ARENA_PROBE = """
import ctypes, sys, threading
from operator_kit.webhooks.limits import limit_malloc_arenas
print(limit_malloc_arenas() if sys.argv[1] == "limit" else None)
barrier = threading.Barrier(8)
held = []
def allocate():
    barrier.wait()
    held.append([bytes(4096 + i) for i in range(64)])  # malloc's, not pymalloc's
threads = [threading.Thread(target=allocate, name=f"allocate-{i}") for i in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
sys.stdout.flush()
ctypes.CDLL(None).malloc_stats()
"""


def arenas(mode: str, **env: str) -> tuple[str, int]:
    """What the probe printed (the call's answer) and how many arenas glibc reported."""
    environ = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"} | env
    done = subprocess.run([sys.executable, "-c", ARENA_PROBE, mode], capture_output=True,
                          text=True, timeout=60, env=environ, check=True)
    return done.stdout.strip(), done.stderr.count("Arena ")


glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="arenas are glibc's")


@glibc
def test_eight_threads_share_two_malloc_arenas_once_limited() -> None:
    assert arenas("none")[1] > 2  # the control: by default each thread gets its own
    assert arenas("limit") == ("True", 2)


@glibc
def test_malloc_arena_max_in_the_environment_wins() -> None:
    assert arenas("limit", MALLOC_ARENA_MAX="3") == ("False", 3)  # the call changed nothing


def test_the_arena_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match="arenas must be positive, got 0"):
        limit_malloc_arenas(0)


# ---------------------------------------------------------------------- the body budget


def test_small_bodies_never_take_from_the_budget_or_wait() -> None:
    budget = BodyBudget(MIB)
    assert budget.take(MIB)  # full
    assert budget.take(SMALL_BODY_BYTES - 1, wait=0)
    budget.give_back(SMALL_BODY_BYTES - 1)
    assert budget.used == MIB


def test_a_large_body_waits_for_room_and_gets_it_when_another_is_given_back() -> None:
    budget = BodyBudget(MIB)
    assert budget.take(600 * 1024)
    got: list[bool] = []
    waiter = threading.Thread(target=lambda: got.append(budget.take(600 * 1024, wait=5)),
                              name="waiter")
    waiter.start()
    time.sleep(0.1)
    assert got == []  # waiting: 1200 KiB would not fit
    budget.give_back(600 * 1024)
    waiter.join(timeout=5)
    assert got == [True]
    assert budget.used == 600 * 1024


def test_a_large_body_that_finds_no_room_in_time_is_refused() -> None:
    budget = BodyBudget(MIB)
    assert budget.take(MIB)
    started = time.monotonic()
    assert budget.take(SMALL_BODY_BYTES, wait=0.2) is False
    assert 0.15 < time.monotonic() - started < 2
    assert budget.used == MIB  # nothing taken by the refused one


def test_a_body_larger_than_the_whole_budget_is_refused_without_waiting() -> None:
    budget = BodyBudget(MIB)
    started = time.monotonic()
    assert budget.take(MIB + 1, wait=5) is False
    assert time.monotonic() - started < 1


def test_a_budget_must_be_positive() -> None:
    with pytest.raises(ValueError, match="the body budget must be positive, got 0"):
        BodyBudget(0)


# ---------------------------------------------------------------------- the memory limit


def test_the_memory_limit_is_the_controllers_share_plus_the_bodies_at_their_measured_cost(
) -> None:
    # 8 MiB budget, 8 threads: 256 + 12 x (8 + 8 x 0.25) = 376, rounded up to 384 MiB.
    assert memory_limit_mib(8 * MIB, 8) == 416
    assert memory_limit_mib(8 * MIB, 8) >= (
        CONTROLLERS_MEMORY_MIB + BYTES_PER_BODY_BYTE * (8 + 8 * SMALL_BODY_BYTES / MIB))
    assert memory_limit_mib(8 * MIB, 8) % 16 == 0
    assert memory_limit_mib(32 * MIB, 8) > memory_limit_mib(8 * MIB, 8)
    assert memory_limit_mib(8 * MIB, 16) > memory_limit_mib(8 * MIB, 8)
    with pytest.raises(ValueError, match="must be positive"):
        memory_limit_mib(0, 8)


# ---------------------------------------------------------------------- log throttling


def test_a_repeated_bad_request_is_logged_once_per_interval_with_the_count_left_out() -> None:
    clock = Clock()
    throttle = LogThrottle(60, clock=clock)
    key = ("10.0.0.7", "/validate", 400)
    assert throttle.admit(key) == 0  # the first: logged
    for _ in range(5):
        clock.now += 1
        assert throttle.admit(key) is None  # counted, not logged
    clock.now += 55  # 60 s after the first line
    assert throttle.admit(key) == 5  # logged, saying 5 were left out
    assert throttle.admit(key) is None
    clock.now += 60
    assert throttle.admit(key) == 1


def test_each_source_and_reason_has_its_own_interval() -> None:
    throttle = LogThrottle(60, clock=Clock())
    assert throttle.admit(("10.0.0.7", "/validate", 400)) == 0
    assert throttle.admit(("10.0.0.7", "/validate", 413)) == 0  # another reason
    assert throttle.admit(("10.0.0.8", "/validate", 400)) == 0  # another source
    assert throttle.admit(("10.0.0.7", "/convert", 400)) == 0  # another path
    assert throttle.admit(("10.0.0.7", "/validate", 400)) is None


def test_a_flood_from_many_sources_is_bounded_in_keys_and_shares_one_line() -> None:
    clock = Clock()
    throttle = LogThrottle(60, max_keys=4, clock=clock)
    logged = [throttle.admit((f"10.0.0.{i}", "/validate", 400)) for i in range(100)]
    assert len(throttle) <= 4
    # 4 sources have lines of their own, then one line for all the others together
    assert logged[:5] == [0] * 5 and logged[5:] == [None] * 95
    assert throttle.admit((LogThrottle.OTHER_SOURCES, "/validate", 400)) is None
    clock.now += 61  # the interval has passed: old sources are forgotten, room again
    assert throttle.admit(("10.0.0.200", "/validate", 400)) == 0
    assert len(throttle) <= 4


def test_a_throttle_needs_a_positive_interval() -> None:
    with pytest.raises(ValueError, match="must be positive"):
        LogThrottle(0)
