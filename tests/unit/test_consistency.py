"""Read-your-writes across reconciles (`CaughtUp`): the timing rules, without a cluster.

That the next reconcile really reads its previous pass's writes is tested through the
API server in tests/cluster/test_read_your_writes.py.
"""

from __future__ import annotations

import threading
from typing import Any, cast

from operator_kit.runtime.consistency import CaughtUp
from operator_kit.runtime.watching import Informer


class Cache:
    """An informer's `has_seen`/`wait_seen` over a version a test moves on."""

    description = "configmaps"

    def __init__(self, seen: int = 0) -> None:
        self.seen = seen
        self.waited = 0.0

    def has_seen(self, version: str) -> bool:
        return int(version) <= self.seen

    def wait_seen(self, version: str, timeout: float) -> bool:
        self.waited += timeout
        clock.now += timeout
        return self.has_seen(version)


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


clock = Clock()
KEY = ("ns", "w")


def caught_up() -> CaughtUp:
    return CaughtUp("widget", clock=clock)


def test_nothing_written_means_ready_at_once() -> None:
    assert caught_up().ready(KEY, threading.Event())


def test_a_write_the_cache_has_seen_is_not_waited_for() -> None:
    cache = Cache(seen=7)
    rules = caught_up()
    rules.remember(KEY, [(cast(Informer, cache), "7")])
    assert rules.ready(KEY, threading.Event()) and cache.waited == 0


def test_a_write_the_cache_has_not_seen_waits_then_requeues_then_gives_up() -> None:
    cache = Cache(seen=6)
    rules = caught_up()
    rules.remember(KEY, [(cast(Informer, cache), "7")])
    assert not rules.ready(KEY, threading.Event()), "requeued after WAIT"
    assert abs(cache.waited - CaughtUp.WAIT) < 0.11
    for _ in range(int(CaughtUp.GIVE_UP / CaughtUp.WAIT) + 1):
        if rules.ready(KEY, threading.Event()):
            break
    else:
        raise AssertionError("never gave up")
    assert rules.ready(KEY, threading.Event()), "forgotten once it went ahead"


def test_the_next_reconcile_starts_as_soon_as_the_cache_sees_the_write() -> None:
    cache = Cache(seen=6)
    rules = caught_up()
    rules.remember(KEY, [(cast(Informer, cache), "7")])
    original = cache.wait_seen

    def arrives(version: str, timeout: float) -> bool:
        cache.seen = 7  # the watch event arrives while the worker waits
        return original(version, timeout)

    cache.wait_seen = arrives  # type: ignore[method-assign]
    assert rules.ready(KEY, threading.Event())
    assert cache.waited <= 0.1


def test_other_keys_do_not_wait_for_one_keys_writes() -> None:
    rules = caught_up()
    rules.remember(KEY, [(cast(Informer, Cache(seen=0)), "7")])
    other: Any = ("ns", "other")
    assert rules.ready(other, threading.Event())
