"""The pure parts of ``--metrics-secure``: reading the bearer token, the answers' cache.

What the API server answers (TokenReview, SubjectAccessReview) and what a scrape then
gets is tested against a real one in tests/cluster/test_metrics_secure.py."""

from __future__ import annotations

import threading

import pytest

from operator_kit.client.delegated import Decision, TtlCache, bearer_token


@pytest.mark.parametrize(("header", "token"), [
    ("Bearer abc.def", "abc.def"),
    ("bearer abc", "abc"),
    ("BEARER abc", "abc"),
    ("  Bearer   abc  ", "abc"),
    (None, None),
    ("", None),
    ("Bearer", None),
    ("Bearer ", None),
    ("Basic dXNlcjpwYXNz", None),
    ("Bearer abc def", None),
    ("abc", None),
])
def test_the_bearer_token_is_read_as_the_api_server_reads_it(header: str | None,
                                                             token: str | None) -> None:
    assert bearer_token(header) == token


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_cached_answer_is_forgotten_after_its_own_ttl() -> None:
    clock = Clock()
    cache: TtlCache[str, str] = TtlCache(10, clock)
    cache.put("allowed", "yes", 300)
    cache.put("denied", "no", 30)
    clock.now += 29.9
    assert (cache.get("allowed"), cache.get("denied")) == ("yes", "no")
    clock.now += 0.1
    assert (cache.get("allowed"), cache.get("denied")) == ("yes", None)
    clock.now += 270
    assert cache.get("allowed") is None
    assert len(cache) == 0, "expired entries are dropped when looked up"


def test_putting_again_renews_the_entry() -> None:
    clock = Clock()
    cache: TtlCache[str, int] = TtlCache(10, clock)
    cache.put("k", 1, 10)
    clock.now += 9
    cache.put("k", 2, 10)
    clock.now += 9
    assert cache.get("k") == 2


def test_the_cache_keeps_at_most_its_size_dropping_the_oldest() -> None:
    cache: TtlCache[int, int] = TtlCache(3, Clock())
    for key in range(5):
        cache.put(key, key, 60)
    assert len(cache) == 3
    assert [cache.get(key) for key in range(5)] == [None, None, 2, 3, 4]


def test_the_cache_is_safe_to_share_between_threads() -> None:
    cache: TtlCache[tuple[int, int], int] = TtlCache(100, Clock())

    def fill(thread: int) -> None:
        for i in range(2000):
            cache.put((thread, i), i, 60)
            cache.get((thread, i - 1))

    threads = [threading.Thread(target=fill, args=(t,), name=f"fill-{t}") for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(cache) == 100


def test_only_a_200_decision_lets_the_request_in() -> None:
    assert Decision(200, "allowed", "u").allowed
    assert not any(Decision(status, "x").allowed for status in (401, 403, 503))


def test_concurrent_misses_of_one_key_load_it_once() -> None:
    cache: TtlCache[str, int] = TtlCache(10, Clock())
    calls: list[int] = []
    gate = threading.Event()

    def load() -> tuple[int, float]:
        calls.append(1)
        gate.wait(5)
        return 42, 60

    got: list[int] = []
    threads = [threading.Thread(target=lambda: got.append(cache.get_or_load("k", load)),
                                name=f"scrape-{i}") for i in range(8)]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join()
    assert (got, len(calls)) == ([42] * 8, 1)
    assert cache.get_or_load("k", load) == 42 and len(calls) == 1, "then from the cache"


def test_a_failed_load_is_not_kept_and_the_next_caller_loads_again() -> None:
    cache: TtlCache[str, str] = TtlCache(10, Clock())

    def fails() -> tuple[str, float]:
        raise OSError("the API server is down")

    with pytest.raises(OSError):
        cache.get_or_load("k", fails)
    assert cache.get("k") is None
    assert cache.get_or_load("k", lambda: ("back", 60)) == "back"


def test_an_expired_entry_is_loaded_again() -> None:
    clock = Clock()
    cache: TtlCache[str, int] = TtlCache(10, clock)
    assert cache.get_or_load("k", lambda: (1, 30)) == 1
    clock.now += 30
    assert cache.get_or_load("k", lambda: (2, 30)) == 2
