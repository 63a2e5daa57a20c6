"""A controller's own writes to its owned objects do not reconcile their owner again,
whichever comes first: the write's answer or its echo on the watch."""

from __future__ import annotations

from typing import Any

from operator_kit.runtime.changes import WatchEvent
from operator_kit.runtime.own_writes import LastApplies, OwnWrites


def config_map(name: str, version: str, namespace: str = "ns") -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name, "resourceVersion": version}}


def event(name: str, version: str, kind: str = "MODIFIED") -> WatchEvent:
    return WatchEvent(kind, config_map(name, version))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_echo_after_the_answer_is_skipped_once_and_later_changes_count() -> None:
    delivered: list[WatchEvent] = []
    writes = OwnWrites(delivered.append)
    writes.begin("ns", "cm")
    writes.end("ns", "cm", config_map("cm", "10"))
    assert writes.take(event("cm", "10")) is True  # our echo
    assert writes.take(event("cm", "10")) is False  # only once
    assert writes.take(event("cm", "11")) is False  # someone else's change
    assert delivered == []


def test_the_echo_before_the_answer_is_held_then_dropped_and_others_passed_on() -> None:
    delivered: list[WatchEvent] = []
    writes = OwnWrites(delivered.append)
    writes.begin("ns", "cm")
    early_other = event("cm", "9")  # someone else's change, just before ours
    echo = event("cm", "10")
    assert writes.take(early_other) is True  # held while our write is in flight
    assert writes.take(echo) is True
    assert writes.take(event("other", "8")) is False  # other names are not held
    assert delivered == []
    writes.end("ns", "cm", config_map("cm", "10"))
    assert delivered == [early_other]
    assert len(writes) == 0  # nothing left behind to leak


def test_events_held_for_a_write_that_failed_are_all_passed_on() -> None:
    delivered: list[WatchEvent] = []
    writes = OwnWrites(delivered.append)
    writes.begin("ns", "cm")
    held = event("cm", "12")
    assert writes.take(held) is True
    writes.end("ns", "cm", None)
    assert delivered == [held]
    assert writes.take(event("cm", "13")) is False


def test_with_two_writes_to_one_name_in_flight_events_wait_for_both() -> None:
    delivered: list[WatchEvent] = []
    writes = OwnWrites(delivered.append)
    writes.begin("ns", "cm")
    writes.begin("ns", "cm")
    assert writes.take(event("cm", "20")) is True
    assert writes.take(event("cm", "21")) is True
    writes.end("ns", "cm", config_map("cm", "21"))
    assert delivered == []  # the other write may yet claim one
    writes.end("ns", "cm", config_map("cm", "20"))
    assert delivered == []
    assert len(writes) == 0


def test_a_version_whose_echo_never_comes_is_forgotten_after_the_ttl() -> None:
    clock = Clock()
    writes = OwnWrites(lambda _e: None, ttl=60, clock=clock)
    writes.begin("ns", "cm")
    writes.end("ns", "cm", config_map("cm", "30"))  # an apply that changed nothing
    clock.now = 61
    writes.begin("ns", "cm2")
    writes.end("ns", "cm2", config_map("cm2", "31"))
    assert len(writes) == 1
    assert writes.take(event("cm", "30")) is False
    assert writes.take(event("cm2", "31")) is True


def test_at_most_limit_versions_are_kept() -> None:
    writes = OwnWrites(lambda _e: None, limit=3)
    for version in range(10):
        writes.begin("ns", "cm")
        writes.end("ns", "cm", config_map("cm", str(version)))
    assert len(writes) == 3
    assert writes.take(event("cm", "9")) is True
    assert writes.take(event("cm", "0")) is False


# -- LastApplies: the exact rule for skipping an apply ---------------------------------------

def _child(data: dict[str, str], rv: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "c", "namespace": "ns"}
    if rv is not None:
        meta["resourceVersion"] = rv
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def test_an_apply_is_unchanged_only_for_the_same_body_at_the_version_it_left() -> None:
    last = LastApplies()
    body = _child({"a": "1"})
    assert not last.unchanged(body, "5"), "never applied: send it"
    last.remember(body, _child({"a": "1"}, rv="7"))
    assert last.unchanged(_child({"a": "1"}), "7")
    assert not last.unchanged(body, "8"), "changed since (by anyone): send it"
    assert not last.unchanged(_child({"a": "2"}), "7"), "another body: send it"
    assert not last.unchanged(body, None), "not known to exist: send it"


def test_last_applies_keep_at_most_their_limit() -> None:
    last = LastApplies(limit=2)
    for name in ("a", "b", "c"):
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}
        last.remember(body, {"metadata": {"resourceVersion": "1"}})
    first = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}
    third = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    assert not last.unchanged(first, "1") and last.unchanged(third, "1")
