"""A fleet member's metrics: the controller's own name in ``controller``, the member in
``cluster`` (the hub's series: ``cluster=""``), dropped once the member has left."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes.client import ApiClient
from prometheus_client import REGISTRY

from operator_kit import metrics
from operator_kit.client.events import EventRecorder
from operator_kit.client.transport import Api
from operator_kit.fleet import Fleet, KubeconfigDirectory
from operator_kit.runtime.runner import ControllerRunner
from operator_kit.runtime.watching import Informers
from operator_kit.testing import eventually
from tests.unit.test_fleet import ThingController, closed_port, write_kubeconfig


def series(cluster: str) -> dict[str, dict[str, str]]:
    """Every sample (by name and labels) of `cluster`, from a scrape."""
    return {f"{s.name}{sorted(s.labels.items())}": s.labels
            for family in REGISTRY.collect() for s in family.samples
            if s.labels.get("cluster") == cluster}


def reconciles(cluster: str) -> float | None:
    """The member's successful reconciles: 0 from its start, None once dropped."""
    return REGISTRY.get_sample_value("controller_runtime_reconcile_total", {
        "controller": "thing", "cluster": cluster, "result": "success"})


@pytest.fixture
def runners() -> Iterator[tuple[ControllerRunner, ControllerRunner]]:
    api = Api(ApiClient())
    stop = threading.Event()
    made = tuple(ControllerRunner(ThingController(), api, field_manager="test",
                                  recorder=EventRecorder(api, "test"), stop=stop,
                                  informers=Informers(api, stop), cluster=cluster)
                 for cluster in (None, "metrics-east"))
    yield made[0], made[1]
    stop.set()
    for runner in made:
        runner.queue.shut_down()


def test_a_member_s_series_name_the_controller_and_the_cluster_apart(
        runners: tuple[ControllerRunner, ControllerRunner]) -> None:
    hub, member = runners
    assert member.name == "thing@metrics-east"  # threads and logs say both
    assert member.labels == ("thing", "metrics-east") and hub.labels == ("thing", "")
    member.queue.add(("ns", "a"))
    found = series("metrics-east")
    assert found and all(labels["controller"] == "thing" for labels in found.values())
    assert REGISTRY.get_sample_value("controller_runtime_reconcile_total", {
        "controller": "thing", "cluster": "metrics-east", "result": "success"}) == 0
    assert REGISTRY.get_sample_value("controller_runtime_max_concurrent_reconciles", {
        "controller": "thing", "cluster": "metrics-east"}) == 1
    assert REGISTRY.get_sample_value("workqueue_depth", {
        "name": "thing", "controller": "thing", "cluster": "metrics-east",
        "priority": "0"}) == 1
    assert REGISTRY.get_sample_value("operator_kit_controller_reconcile_triggers_total", {
        "controller": "thing", "cluster": "metrics-east", "trigger": "primary"}) == 0
    assert REGISTRY.get_sample_value("operator_kit_controller_stuck_reconciles", {
        "controller": "thing", "cluster": "metrics-east"}) == 0

    metrics.forget_cluster("metrics-east")
    member.queue.shut_down()  # the member's queue gone too: its gauges with it
    assert series("metrics-east") == {}
    assert REGISTRY.get_sample_value("controller_runtime_reconcile_total", {
        "controller": "thing", "cluster": "", "result": "success"}) == 0  # the hub's stay


def test_the_hub_s_series_cannot_be_forgotten() -> None:
    with pytest.raises(ValueError, match="hub"):
        metrics.forget_cluster(metrics.HUB)


def test_a_member_that_leaves_drops_its_series_and_one_that_rejoins_keeps_them(
        tmp_path: Path) -> None:
    port = closed_port()
    write_kubeconfig(tmp_path / "metrics-west.yaml", port)
    fleet = Fleet("metrics-fleet", [ThingController()], KubeconfigDirectory(tmp_path),
                  poll_interval=0.05, shutdown_timeout=2.0)
    fleet.start()
    try:
        first = eventually(10, lambda: fleet.members().get("metrics-west"),
                           message="the member")
        eventually(10, lambda: series("metrics-west"), message="its series")
        # Its API server does not answer: its watch fails, and says so as its own.
        eventually(10, lambda: REGISTRY.get_sample_value("operator_kit_watch_failing", {
            "resource": "things.fleet.operator-kit.test", "cluster": "metrics-west"}) == 1,
            message="the member's watch failing, by cluster")
        # Rewritten: it leaves and joins again at once; the old member stopping later
        # must not take the new one's series with it.
        write_kubeconfig(tmp_path / "metrics-west.yaml", closed_port())
        eventually(10, lambda: fleet.members().get("metrics-west") not in (None, first),
                   message="the member rejoining")
        eventually(10, lambda: not first.alive(), message="the old member stopping")
        eventually(10, lambda: reconciles("metrics-west") == 0, message="its new series")
        assert first.on_left is not None
        first.on_left(first)  # as if the old member ended only now: nothing is dropped
        assert reconciles("metrics-west") == 0
        (tmp_path / "metrics-west.yaml").unlink()
        eventually(10, lambda: fleet.members() == {} and fleet.leaving() == [],
                   message="the member leaving")
        eventually(5, lambda: series("metrics-west") == {}, message="its series dropped")
    finally:
        fleet.stop()
