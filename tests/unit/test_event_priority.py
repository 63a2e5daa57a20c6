"""Which priority each watch event gives its keys in the work queue: what a list brought
is low, a live change normal, and `Controller.priority` can say otherwise. No cluster
needed (no request is sent)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes.client import ApiClient

from operator_kit.api.resources import CustomResource
from operator_kit.client.events import EventRecorder
from operator_kit.client.transport import Api
from operator_kit.runtime.changes import WatchEvent
from operator_kit.runtime.controller import Controller, Owns, Watch
from operator_kit.runtime.objects import Objects, resource_of
from operator_kit.runtime.queueing import LOW_PRIORITY, NORMAL_PRIORITY
from operator_kit.runtime.runner import ControllerRunner
from operator_kit.runtime.watching import Informers, Key


@dataclass
class Spec:
    size: int = 1


class Pot(CustomResource):
    group = "priority.operator-kit.test"
    version = "v1"
    kind = "Pot"
    plural = "pots"
    spec: Spec


class Lid(CustomResource):
    group = "priority.operator-kit.test"
    version = "v1"
    kind = "Lid"
    plural = "lids"
    spec: Spec


def lid_to_pot(obj: Any, objects: Objects) -> Any:
    return [("ns", f"pot-of-{obj.name}")]


class PotController(Controller[Pot]):
    resource = Pot
    filters = ()  # every event passes: this file is about priorities, not filters
    owns = (Owns(Lid),)
    watches = (Watch(Lid, lid_to_pot),)


class GoldFirst(PotController):
    """Pots labelled tier=gold go before any other, even from the initial list."""

    def priority(self, event: WatchEvent) -> int:
        if event.object["metadata"].get("labels", {}).get("tier") == "gold":
            return 10
        return super().priority(event)


class Broken(PotController):
    def priority(self, event: WatchEvent) -> int:
        if event.object["metadata"]["name"] == "raises":
            raise RuntimeError("priority bug")
        return "high"  # type: ignore[return-value]


def make_runner(controller: Controller[Any]) -> Iterator[ControllerRunner]:
    api = Api(ApiClient())
    stop = threading.Event()
    yield ControllerRunner(controller, api, field_manager="test",
                           recorder=EventRecorder(api, "test"), stop=stop,
                           informers=Informers(api, stop))
    stop.set()


@pytest.fixture
def runner() -> Iterator[ControllerRunner]:
    yield from make_runner(PotController())


def pot(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    raw = Pot(name, Spec(), namespace="ns").to_dict()
    raw["metadata"]["labels"] = labels or {}
    raw["metadata"]["resourceVersion"] = "1"
    return raw


def lid(name: str, owner: str) -> dict[str, Any]:
    raw = Lid(name, Spec(), namespace="ns").to_dict()
    raw["metadata"]["ownerReferences"] = [{
        "apiVersion": "priority.operator-kit.test/v1", "kind": "Pot", "name": owner,
        "uid": "u", "controller": True}]
    return raw


def taken(runner: ControllerRunner) -> list[tuple[Key, int | None]]:
    """Every key due now, in the order workers get them, with the priority of each."""
    found = []
    while (key := runner.queue.get(timeout=0)) is not None:
        found.append((key, runner.queue.priority_of(key)))
        runner.queue.done(key)
    return found


def test_a_watch_event_is_live_unless_a_list_brought_it() -> None:
    assert WatchEvent("ADDED", pot("a")).from_list is False


def test_the_initial_list_is_low_and_a_live_event_after_it_goes_first(
        runner: ControllerRunner) -> None:
    for i in range(100):
        runner.on_primary(WatchEvent("ADDED", pot(f"old-{i}"), from_list=True))
    runner.on_primary(WatchEvent("ADDED", pot("new")))

    order = taken(runner)

    assert order[0] == (("ns", "new"), NORMAL_PRIORITY)
    assert order[1:] == [(("ns", f"old-{i}"), LOW_PRIORITY) for i in range(100)]


def test_a_listed_object_changed_while_it_waits_moves_up(runner: ControllerRunner) -> None:
    for name in ("a", "b", "c"):
        runner.on_primary(WatchEvent("ADDED", pot(name), from_list=True))
    runner.on_primary(WatchEvent("MODIFIED", pot("c", {"changed": "yes"}), pot("c")))

    assert [key for key, _ in taken(runner)] == [("ns", "c"), ("ns", "a"), ("ns", "b")]


def test_owned_and_watched_kinds_pass_the_priority_of_their_event(
        runner: ControllerRunner) -> None:
    on_owned, on_watched = (handler for _, handler in runner._sources)
    on_owned(WatchEvent("ADDED", lid("listed-lid", "p1"), from_list=True))
    on_watched(WatchEvent("ADDED", lid("listed", "p9"), from_list=True))
    on_owned(WatchEvent("ADDED", lid("live-lid", "p2")))
    on_watched(WatchEvent("ADDED", lid("live", "p9")))

    assert taken(runner) == [
        (("ns", "p2"), NORMAL_PRIORITY), (("ns", "pot-of-live"), NORMAL_PRIORITY),
        (("ns", "p1"), LOW_PRIORITY), (("ns", "pot-of-listed"), LOW_PRIORITY)]


def test_a_controller_can_put_some_objects_first() -> None:
    runner = next(make_runner(GoldFirst()))
    runner.on_primary(WatchEvent("ADDED", pot("plain-listed"), from_list=True))
    runner.on_primary(WatchEvent("ADDED", pot("plain-live")))
    runner.on_primary(WatchEvent("ADDED", pot("gold", {"tier": "gold"}), from_list=True))

    assert taken(runner) == [(("ns", "gold"), 10), (("ns", "plain-live"), NORMAL_PRIORITY),
                             (("ns", "plain-listed"), LOW_PRIORITY)]


def test_a_priority_hook_that_fails_still_queues_the_key_at_normal_priority(
        caplog: pytest.LogCaptureFixture) -> None:
    runner = next(make_runner(Broken()))
    with caplog.at_level(logging.ERROR, logger="operator_kit.controller"):
        runner.on_primary(WatchEvent("ADDED", pot("raises"), from_list=True))
        runner.on_primary(WatchEvent("ADDED", pot("not-an-int"), from_list=True))

    assert taken(runner) == [(("ns", "raises"), NORMAL_PRIORITY),
                             (("ns", "not-an-int"), NORMAL_PRIORITY)]
    messages = [r.getMessage() for r in caplog.records]
    assert "pot: priority() failed for a ADDED event: queued at normal priority" in messages
    assert ("pot: priority() returned 'high' for a ADDED event, not an int: queued at "
            "normal priority") in messages


def test_a_handler_added_late_gets_the_cache_as_listed_events() -> None:
    api = Api(ApiClient())
    informer = Informers(api, threading.Event()).informer(resource_of(Pot))
    informer.store.put(pot("cached"))
    seen: list[WatchEvent] = []

    informer.add_handler(seen.append)

    assert [(e.type, e.object["metadata"]["name"], e.from_list) for e in seen] == [
        ("ADDED", "cached", True)]
