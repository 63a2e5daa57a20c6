"""Fairness between flows: the declaration, the deficit round robin over flows within
each priority, the flow of a key (and a flow function that fails), the work queue's
guarantees with flows, and the bounded per-flow metrics."""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

import pytest
from prometheus_client import REGISTRY

from operator_kit import Action, Context, Controller, CustomResource, Fairness, metrics
from operator_kit.runtime.controller import queue_flows
from operator_kit.runtime.fairness import DEFAULT_FLOW, FairQueue, ObjectFlows
from operator_kit.runtime.queueing import LOW_PRIORITY, NORMAL_PRIORITY, Backoff, Key, WorkQueue


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def drain(queue: WorkQueue[Key]) -> list[Key]:
    keys = []
    while (key := queue.get(timeout=0)) is not None:
        keys.append(key)
        queue.done(key)
    return keys


def by_namespace(name: str = "fair-test", clock: Clock | None = None,
                 fairness: Fairness | None = None) -> WorkQueue[Key]:
    flows = ObjectFlows(fairness or Fairness(), name)
    return WorkQueue(name, flows=flows, clock=clock or Clock())


def pops(queue: FairQueue[str], n: int) -> list[str]:
    return [item for _ in range(n) if (item := queue.pop()) is not None]


# -- 1. the declaration ---------------------------------------------------------------


@pytest.mark.parametrize("weight", [0, -1, 0.0, math.nan, math.inf, "2", True, None])
def test_a_weight_that_is_not_a_positive_number_is_refused_at_declaration(
        weight: object) -> None:
    with pytest.raises(ValueError, match=r"weight of flow 'team-a' is .*positive number"):
        Fairness(weights={"team-a": weight})  # type: ignore[dict-item]


def test_weights_that_are_not_a_mapping_or_not_by_name_are_refused() -> None:
    with pytest.raises(TypeError, match="map flow names to positive numbers"):
        Fairness(weights=[("team-a", 2)])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="flow names are str"):
        Fairness(weights={3: 2})  # type: ignore[dict-item]


def test_a_flow_that_is_not_a_function_is_refused() -> None:
    with pytest.raises(TypeError, match="must be a function of the object"):
        Fairness(flow="tenant")  # type: ignore[arg-type]


def test_the_declared_weights_cannot_be_changed_afterwards() -> None:
    weights = {"team-a": 2.0}
    fairness = Fairness(weights=weights)
    weights["team-a"] = -1

    assert fairness.weights["team-a"] == 2.0
    with pytest.raises(TypeError):
        fairness.weights["team-b"] = 3  # type: ignore[index]


def test_quanta_scale_the_weights_so_that_the_smallest_serves_one_key() -> None:
    quantum = Fairness(weights={"big": 3, "small": 0.5}).quanta()

    assert (quantum("small"), quantum("other"), quantum("big")) == (1.0, 2.0, 6.0)
    assert Fairness().quanta()("any") == 1.0


@dataclass
class ItemSpec:
    size: int = 1


class Item(CustomResource):
    group = "fair.operator-kit.test"
    version = "v1"
    kind = "Item"
    plural = "items"
    spec: ItemSpec


def test_a_controller_is_fair_by_namespace_unless_told_otherwise() -> None:
    class Items(Controller[Item]):
        resource = Item

    class Unfair(Items):
        fairness = None

    flows = queue_flows(Items(), ("items", ""), lambda key: None)
    assert flows is not None and flows.of(("team-a", "x")) == "team-a"
    assert queue_flows(Unfair(), ("items", ""), lambda key: None) is None


def test_a_controller_with_something_else_as_fairness_is_refused() -> None:
    class Items(Controller[Item]):
        resource = Item
        fairness = {"team-a": 2}  # type: ignore[assignment]

    with pytest.raises(TypeError, match=r"Items.fairness must be a Fairness\(flow=..."):
        Items()


# -- 2. the fair queue (one priority: deficit round robin; FIFO within a flow) ---------


def test_flows_take_turns_and_each_flow_stays_first_in_first_out() -> None:
    queue: FairQueue[str] = FairQueue()
    for i in range(4):
        queue.push(f"noisy-{i}", 0, "noisy")
    queue.push("quiet-0", 0, "quiet")
    queue.push("quiet-1", 0, "quiet")

    assert pops(queue, 6) == ["noisy-0", "quiet-0", "noisy-1", "quiet-1", "noisy-2", "noisy-3"]
    assert queue.pop() is None and len(queue) == 0


def test_a_flow_that_becomes_active_waits_one_turn_of_each_other_flow_not_their_backlog(
) -> None:
    queue: FairQueue[str] = FairQueue()
    for flow in ("a", "b", "c"):
        for i in range(1000):
            queue.push(f"{flow}-{i}", 0, flow)
    pops(queue, 10)

    queue.push("new", 0, "d")

    assert pops(queue, 4).index("new") == 3  # after one turn of each of a, b and c


def test_weights_share_the_turns_in_their_ratio() -> None:
    fairness = Fairness(weights={"b": 2, "c": 0.5})
    queue: FairQueue[str] = FairQueue(fairness.quanta())
    for flow in "abc":
        for i in range(1000):
            queue.push(f"{flow}-{i}", 0, flow)

    served = Counter(item[0] for item in pops(queue, 350))

    assert served == {"a": 100, "b": 200, "c": 50}


def test_fractional_quanta_carry_over_from_turn_to_turn() -> None:
    queue: FairQueue[str] = FairQueue(Fairness(weights={"b": 1.5}).quanta())
    for flow in "ab":
        for i in range(100):
            queue.push(f"{flow}-{i}", 0, flow)

    served = Counter(item[0] for item in pops(queue, 50))

    assert served == {"a": 20, "b": 30}


def test_a_higher_priority_comes_first_whatever_the_flows() -> None:
    queue: FairQueue[str] = FairQueue()
    for i in range(3):
        queue.push(f"listed-{i}", LOW_PRIORITY, "quiet")
    queue.push("live", NORMAL_PRIORITY, "noisy")
    queue.push("urgent", 5, "noisy")

    assert pops(queue, 5) == ["urgent", "live", "listed-0", "listed-1", "listed-2"]
    assert queue.by_priority() == {}


def test_push_moves_an_item_and_remove_takes_it_out() -> None:
    queue: FairQueue[str] = FairQueue()
    queue.push("a", LOW_PRIORITY, "x")
    queue.push("b", LOW_PRIORITY, "x")
    queue.push("a", NORMAL_PRIORITY, "y")  # raised: it leaves its old place

    assert len(queue) == 2 and "a" in queue
    assert queue.by_priority() == {LOW_PRIORITY: 1, NORMAL_PRIORITY: 1}
    assert queue.remove("b") is True and queue.remove("b") is False
    assert pops(queue, 3) == ["a"]


def test_a_flow_emptied_by_removal_is_skipped_or_keeps_its_turn_when_pushed_again() -> None:
    queue: FairQueue[str] = FairQueue()
    for flow in "xyz":
        queue.push(f"{flow}-0", 0, flow)
    queue.remove("y-0")

    assert sorted((flow, n) for flow, n, _ in queue.flows()) == [("x", 1), ("z", 1)]
    assert queue.pop() == "x-0"
    queue.push("y-1", 0, "y")
    assert pops(queue, 3) == ["y-1", "z-0"]
    queue.push("w-0", 0, "w")
    queue.remove("w-0")
    assert queue.pop() is None and len(queue) == 0


def test_the_fair_queue_matches_a_model_under_random_operations() -> None:
    """Random pushes, moves and removals: every item comes out once, none is invented, and
    each flow's items come out in the order they were last pushed."""
    rng = random.Random(39)
    queue: FairQueue[int] = FairQueue(Fairness(weights={"f1": 2.5, "f2": 0.4}).quanta())
    where: dict[int, tuple[int, str, int]] = {}  # item -> (priority, flow, push number)
    out: list[tuple[int, tuple[int, str, int]]] = []
    for step in range(20000):
        action = rng.random()
        if action < 0.55:
            item = rng.randrange(300)
            place = (rng.choice((LOW_PRIORITY, 0, 7)), f"f{rng.randrange(5)}", step)
            queue.push(item, place[0], place[1])
            where[item] = place
        elif action < 0.65 and where:
            item = rng.choice(sorted(where))
            assert queue.remove(item)
            del where[item]
        else:
            popped = queue.pop()
            if popped is None:
                assert not where
                continue
            top = max(priority for priority, _, _ in where.values())
            assert where[popped][0] == top
            out.append((popped, where.pop(popped)))
        assert len(queue) == len(where)
    by_flow: dict[tuple[int, str], list[int]] = defaultdict(list)
    for _, (priority, flow, pushed) in out:
        by_flow[priority, flow].append(pushed)
    assert all(pushes == sorted(pushes) for pushes in by_flow.values())  # FIFO in a flow


# -- 3. the flow of a key ------------------------------------------------------------


def test_the_default_flow_is_the_namespace_and_cluster_scoped_keys_share_one() -> None:
    flows = ObjectFlows(Fairness(), "ns-flows")

    assert flows.of(("team-a", "db")) == "team-a"
    assert flows.of(("", "node-1")) == DEFAULT_FLOW


def tenant(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["labels"]["tenant"])


def cache_of(*objects: dict[str, Any]) -> dict[Key, dict[str, Any]]:
    return {(o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in objects}


def obj(namespace: str, name: str, **labels: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name, "labels": labels}}


def flow_errors(controller: str) -> float | None:
    return REGISTRY.get_sample_value("operator_kit_workqueue_flow_errors_total",
                                     {"controller": controller, "cluster": ""})


def test_a_flow_function_names_the_flow_from_the_cached_object() -> None:
    cache = cache_of(obj("ns-1", "a", tenant="blue"), obj("ns-2", "b", tenant="blue"))
    flows = ObjectFlows(Fairness(flow=tenant), "tenant-flows", read=cache.get)

    assert flows.of(("ns-1", "a")) == flows.of(("ns-2", "b")) == "blue"
    assert flows.of(("ns-1", "gone")) == DEFAULT_FLOW  # deleted: not an error
    assert flow_errors("tenant-flows") == 0


def test_a_flow_function_that_raises_queues_the_key_in_the_default_flow_with_one_error(
        caplog: pytest.LogCaptureFixture) -> None:
    cache = cache_of(obj("ns", "unlabelled"), obj("ns", "also-unlabelled"))
    queue = WorkQueue("raising-flow", flows=ObjectFlows(Fairness(flow=tenant), "raising-flow",
                                                        read=cache.get))
    with caplog.at_level(logging.DEBUG, logger="operator_kit.controller"):
        queue.add(("ns", "unlabelled"))
        queue.add(("ns", "also-unlabelled"))
        queue.add_failure(("ns", "unlabelled"))

    assert drain(queue) == [("ns", "unlabelled"), ("ns", "also-unlabelled")]  # never lost
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "raising-flow: fairness flow function tenant raised KeyError: 'tenant' for " \
           "ns/unlabelled" in errors[0].getMessage()
    assert 'queued in the default flow ""' in errors[0].getMessage()
    assert len([r for r in caplog.records if r.levelno == logging.DEBUG]) == 2
    assert flow_errors("raising-flow") == 3


@pytest.mark.parametrize("value", [None, 7, ["team-a"], b"team-a"])
def test_a_flow_function_that_returns_no_str_queues_the_key_in_the_default_flow(
        value: object, caplog: pytest.LogCaptureFixture) -> None:
    name = f"bad-flow-{type(value).__name__}"
    flows = ObjectFlows(Fairness(flow=lambda o: value), name,  # type: ignore[arg-type,return-value]
                        read=cache_of(obj("ns", "a")).get)
    queue = WorkQueue(name, flows=flows)
    with caplog.at_level(logging.ERROR, logger="operator_kit.controller"):
        queue.add(("ns", "a"))

    assert drain(queue) == [("ns", "a")]
    [error] = [r.getMessage() for r in caplog.records]
    assert f"returned {value!r} ({type(value).__name__}), not a str" in error
    assert "<lambda>" in error
    assert flow_errors(name) == 1


def test_a_huge_value_from_a_flow_function_is_cut_in_the_log(
        caplog: pytest.LogCaptureFixture) -> None:
    flows = ObjectFlows(Fairness(flow=lambda o: ["x" * 100_000]),  # type: ignore[arg-type,return-value]
                        "huge-flow", read=cache_of(obj("ns", "a")).get)
    with caplog.at_level(logging.ERROR, logger="operator_kit.controller"):
        assert flows.of(("ns", "a")) == DEFAULT_FLOW

    assert len(caplog.records[0].getMessage()) < 600


# -- 4. the work queue with flows: fair, and every guarantee kept ----------------------


def test_a_flood_in_one_namespace_does_not_delay_another_namespaces_key() -> None:
    queue = by_namespace()
    for i in range(5000):
        queue.add(("noisy", f"obj-{i}"))
    queue.add(("quiet", "change"))

    first = [queue.get(timeout=0) for _ in range(2)]

    assert first == [("noisy", "obj-0"), ("quiet", "change")]


def test_without_flows_the_same_key_waits_for_the_whole_flood() -> None:
    queue: WorkQueue[Key] = WorkQueue("fifo-test", clock=Clock())
    for i in range(500):
        queue.add(("noisy", f"obj-{i}"))
    queue.add(("quiet", "change"))

    assert drain(queue).index(("quiet", "change")) == 500


def test_flows_are_fair_within_a_priority_and_the_priority_comes_first() -> None:
    queue = by_namespace()
    for i in range(3):
        queue.add(("noisy", f"live-{i}"))
    queue.add(("quiet", "listed"), priority=LOW_PRIORITY)
    queue.add(("quiet", "live"))

    assert drain(queue) == [("noisy", "live-0"), ("quiet", "live"), ("noisy", "live-1"),
                            ("noisy", "live-2"), ("quiet", "listed")]


def test_a_weighted_flow_gets_its_share_of_the_workers() -> None:
    queue = by_namespace(fairness=Fairness(weights={"platform": 3}))
    for i in range(100):
        queue.add(("team", f"t-{i}"))
        queue.add(("platform", f"p-{i}"))

    served = Counter(key[0] for key in drain(queue)[:40])

    assert served == {"platform": 30, "team": 10}


def test_with_flows_a_key_is_still_deduplicated_held_once_and_backed_off() -> None:
    clock = Clock()
    queue = by_namespace(clock=clock)
    queue.add(("a", "x"))
    queue.add(("a", "x"))
    assert len(queue) == 1
    assert queue.get(timeout=0) == ("a", "x")
    queue.add(("a", "x"))  # changed while held
    assert queue.get(timeout=0) is None  # never two workers
    assert queue.add_failure(("a", "x")) == 5
    queue.done(("a", "x"))
    assert queue.get(timeout=0) == ("a", "x")  # dirty meanwhile: due now
    assert queue.add_failure(("a", "x")) == 10
    queue.done(("a", "x"))
    clock.now += 9.9
    assert queue.get(timeout=0) is None
    clock.now += 0.1
    assert queue.get(timeout=0) == ("a", "x")


def test_with_flows_a_delayed_key_joins_its_flow_when_due() -> None:
    clock = Clock()
    queue = by_namespace(clock=clock)
    queue.add(("quiet", "requeued"), delay=10)
    for i in range(50):
        queue.add(("noisy", f"obj-{i}"))
    clock.now += 10

    assert [queue.get(timeout=0) for _ in range(2)] == [("noisy", "obj-0"),
                                                          ("quiet", "requeued")]


def test_many_workers_with_flows_never_share_a_key_and_miss_no_change() -> None:
    """Producers bump an object's version and add its key, over 6 namespaces and three
    priorities; 8 workers reconcile, failing now and then. After the queue drains, the
    last reconcile of every key saw its final version, and no key was held twice."""
    queue = WorkQueue("fair-stress", flows=ObjectFlows(Fairness(weights={"ns0": 2}),
                                                       "fair-stress"),
                      failure_backoff=Backoff(base=0.001, cap=0.004))
    keys: list[Key] = [(f"ns{i % 6}", f"obj{i}") for i in range(60)]
    lock = threading.Lock()
    version: dict[Key, int] = defaultdict(int)
    seen: dict[Key, int] = defaultdict(lambda: -1)
    active: set[Key] = set()
    overlaps: list[Key] = []

    def produce(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(1500):
            key = rng.choice(keys)
            with lock:
                version[key] += 1
            queue.add(key, delay=rng.choice([0, 0, 0, 0.001]),
                      priority=rng.choice([LOW_PRIORITY, NORMAL_PRIORITY, 5]))

    def work(seed: int) -> None:
        rng = random.Random(seed)
        while (key := queue.get()) is not None:
            with lock:
                if key in active:
                    overlaps.append(key)
                active.add(key)
                seen[key] = max(seen[key], version[key])
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
    producers = [threading.Thread(target=produce, args=(100 + i,), name=f"producer-{i}")
                 for i in range(4)]
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
    assert len(queue._flow) == 0  # nothing left behind for keys that went


def test_five_thousand_keys_in_many_flows_are_queued_and_drained_quickly() -> None:
    queue = by_namespace()
    keys: list[Key] = [(f"ns-{i % 500}", f"obj-{i}") for i in range(5000)]
    started = time.monotonic()
    for key in keys:
        queue.add(key, priority=LOW_PRIORITY)
    for key in keys[::2]:
        queue.add(key)  # raised: moves to another level

    assert sorted(drain(queue)) == sorted(keys)
    assert time.monotonic() - started < 2


# -- 5. metrics: bounded, and a starving flow visible ---------------------------------


def flow_samples(controller: str) -> dict[str, dict[str, float]]:
    """family -> flow -> value, for the hub's `controller`."""
    found: dict[str, dict[str, float]] = defaultdict(dict)
    for family in metrics.WORKQUEUE_FLOW_GAUGES.collect():
        for sample in family.samples:
            if sample.labels["controller"] == controller:
                found[sample.name][sample.labels.get("flow", "")] = sample.value
    return found


def test_ten_thousand_namespaces_make_at_most_twenty_one_flow_series() -> None:
    clock = Clock()
    queue = by_namespace("many-flows", clock=clock)
    queue.add(("starved", "first"))  # oldest of all, though its flow is shallow
    clock.now += 60
    for i in range(10_000):
        queue.add((f"ns-{i:05d}", "obj"))
    for i in range(50):
        queue.add(("deep", f"obj-{i}"))

    found = flow_samples("many-flows")

    assert found["operator_kit_workqueue_flows"] == {"": 10_002}
    depth = found["operator_kit_workqueue_flow_depth"]
    assert len(depth) <= 21
    assert depth["deep"] == 50
    assert sum(depth.values()) == 10_051
    oldest = found["operator_kit_workqueue_flow_oldest_seconds"]
    assert oldest["starved"] == 60  # named: the longest waiting are shown by name
    assert oldest["(other)"] == 0
    queue.shut_down()
    assert flow_samples("many-flows") == {}


def test_few_flows_are_each_shown_and_the_default_flow_has_a_name() -> None:
    queue = by_namespace("few-flows")
    queue.add(("team-a", "x"))
    queue.add(("", "cluster-scoped"))

    depth = flow_samples("few-flows")["operator_kit_workqueue_flow_depth"]

    assert depth == {"team-a": 1, "(default)": 1}


def test_a_queue_without_flows_exports_no_flow_series() -> None:
    queue: WorkQueue[Key] = WorkQueue("no-flows")
    queue.add(("team-a", "x"))

    assert flow_samples("no-flows") == {}


def test_long_flow_names_are_cut_and_their_series_merged() -> None:
    cache = cache_of(obj("ns", "a", tenant="t" * 300 + "a"), obj("ns", "b", tenant="t" * 300))
    queue = WorkQueue("long-flows", flows=ObjectFlows(Fairness(flow=tenant), "long-flows",
                                                      read=cache.get))
    queue.add(("ns", "a"))
    queue.add(("ns", "b"))

    depth = flow_samples("long-flows")["operator_kit_workqueue_flow_depth"]

    assert depth == {"t" * 100: 2}


def test_a_controller_with_fairness_tells_its_queue_what_to_read() -> None:
    class Tenants(Controller[Item]):
        resource = Item
        fairness = Fairness(flow=tenant)

        def reconcile(self, obj: Item, ctx: Context) -> Action | None:
            return None

    cache = cache_of(obj("ns", "a", tenant="blue"))
    flows = queue_flows(Tenants(), ("tenants", ""), cache.get)

    assert flows is not None and flows.of(("ns", "a")) == "blue"
