"""Metric names and labels: controller-runtime's and client-go's beside operator_kit's.

DASHBOARD lists every series kubebuilder's Grafana dashboards (its ``grafana/v1-alpha``
plugin: controller-runtime-metrics.json and controller-resources-metrics.json) query; a
name that disappears or changes its labels fails here, and
tests/cluster/test_cli_cluster.py checks that each has series against a running operator.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY, generate_latest

from operator_kit import metrics
from operator_kit.runtime.queueing import LOW_PRIORITY, WorkQueue
from operator_kit.webhooks.server import Denied, Webhooks
from tests.unit.test_webhooks import Widget, admission, widget

# The series kubebuilder's dashboards query, with the labels they group or filter by
# (besides job/namespace/pod/instance, which Prometheus adds), and `cluster`: a fleet
# member's name, "" on the hub, which Prometheus stores as no label (the dashboards'
# queries match the hub's series as they match controller-runtime's).
DASHBOARD: dict[str, tuple[str, ...]] = {
    "controller_runtime_reconcile_total": ("controller", "cluster", "result"),
    "controller_runtime_reconcile_errors_total": ("controller", "cluster"),
    "controller_runtime_active_workers": ("controller", "cluster"),
    "workqueue_depth": ("name", "controller", "cluster", "priority"),
    "workqueue_adds_total": ("name", "controller", "cluster"),
    "workqueue_queue_duration_seconds_bucket": ("name", "controller", "cluster", "le"),
    "workqueue_work_duration_seconds_bucket": ("name", "controller", "cluster", "le"),
    "workqueue_retries_total": ("name", "controller", "cluster"),
    "workqueue_unfinished_work_seconds": ("name", "controller", "cluster"),
    "process_cpu_seconds_total": (),
    "process_resident_memory_bytes": (),
}

# Every other controller-runtime / client-go name operator_kit exports, same labels.
CONTROLLER_RUNTIME: dict[str, tuple[str, ...]] = {
    "controller_runtime_reconcile_panics_total": ("controller", "cluster"),
    "controller_runtime_reconcile_timeouts_total": ("controller", "cluster"),
    "controller_runtime_reconcile_time_seconds_bucket": ("controller", "cluster", "le"),
    "controller_runtime_max_concurrent_reconciles": ("controller", "cluster"),
    "workqueue_longest_running_processor_seconds": ("name", "controller", "cluster"),
    "leader_election_master_status": ("name",),
    "controller_runtime_webhook_requests_total": ("webhook", "code"),
    "controller_runtime_webhook_latency_seconds_bucket": ("webhook", "le"),
    "controller_runtime_webhook_requests_in_flight": ("webhook",),
}

OURS = ("operator_kit_controller_reconciles_total",
        "operator_kit_controller_reconcile_errors_total")


def declared_labels(sample_name: str) -> tuple[str, ...] | None:
    """The label names of the metric that exports `sample_name`, from its declaration."""
    for value in vars(metrics).values():
        names = getattr(value, "_labelnames", None)
        base = getattr(value, "_name", None)
        if names is None or base is None:
            continue
        kind = getattr(value, "_type", "")
        exported = {base, f"{base}_total"} if kind == "counter" else {base}
        if kind == "histogram":
            exported = {f"{base}_bucket", f"{base}_sum", f"{base}_count"}
        if sample_name in exported:
            extra = ("le",) if sample_name.endswith("_bucket") else ()
            return tuple(names) + extra
    return None


def sample(metric: str, /, **labels: str) -> float:
    return REGISTRY.get_sample_value(metric, labels) or 0.0


def queue_sample(metric: str, name: str, **labels: str) -> float:
    """A ``workqueue_*`` sample of the hub's queue `name` (its controller label is its
    name)."""
    return sample(metric, name=name, controller=name, cluster="", **labels)


@pytest.mark.parametrize("name", sorted({**DASHBOARD, **CONTROLLER_RUNTIME}))
def test_each_controller_runtime_name_is_exported_with_its_labels(name: str) -> None:
    expected = {**DASHBOARD, **CONTROLLER_RUNTIME}[name]
    if name.startswith("process_"):
        assert f"\n{name} ".encode() in generate_latest(REGISTRY), name
        return
    if name.startswith("workqueue_") and name.split("_")[1] in ("depth", "unfinished",
                                                                "longest"):
        queue: WorkQueue[str] = WorkQueue(f"labels-{name}")
        families = {m.name: m for m in metrics.WORKQUEUE_GAUGES.collect()}
        family = families[name]
        assert {tuple(s.labels) for s in family.samples if s.labels["name"] == queue.name} == {
            expected}
        return
    assert declared_labels(name) == expected, name


def test_operator_kit_keeps_its_own_reconcile_counters() -> None:
    assert declared_labels(OURS[0]) == ("controller", "cluster")
    assert declared_labels(OURS[1]) == ("controller", "cluster")


def test_reconcile_results_are_those_of_controller_runtime() -> None:
    assert metrics.RESULTS == ("success", "error", "requeue", "requeue_after")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_workqueue_depth_counts_ready_keys_not_those_in_backoff_or_being_worked() -> None:
    clock = Clock()
    queue: WorkQueue[str] = WorkQueue("depth-test", clock=clock)
    queue.add("ready")
    queue.add("later", delay=30)
    queue.add_failure("failed")  # 5 s of backoff
    assert queue.stats() == ({0: 1}, 0.0, 0.0)
    assert queue_sample("workqueue_depth", "depth-test", priority="0") == 1
    assert queue.get(timeout=0) == "ready"
    assert queue_sample("workqueue_depth", "depth-test", priority="0") == 0  # being worked on
    clock.now += 5
    assert queue_sample("workqueue_depth", "depth-test", priority="0") == 1  # backoff is over
    queue.shut_down()
    assert "depth-test" not in {s.labels["name"] for m in metrics.WORKQUEUE_GAUGES.collect()
                                for s in m.samples}


def test_workqueue_depth_is_by_priority_and_always_shows_normal_and_low() -> None:
    queue: WorkQueue[str] = WorkQueue("priority-depth-test")
    assert queue_sample("workqueue_depth", queue.name, priority="0") == 0
    assert queue_sample("workqueue_depth", queue.name, priority="-100") == 0
    for key in ("a", "b", "c"):
        queue.add(key, priority=LOW_PRIORITY)
    queue.add("d")
    queue.add("e", priority=7)
    assert queue_sample("workqueue_depth", queue.name, priority="-100") == 3
    assert queue_sample("workqueue_depth", queue.name, priority="0") == 1
    assert queue_sample("workqueue_depth", queue.name, priority="7") == 1
    queue.add("a")  # raised: it moves from the low count to the normal one
    assert queue_sample("workqueue_depth", queue.name, priority="-100") == 2
    assert queue_sample("workqueue_depth", queue.name, priority="0") == 2


def test_workqueue_metrics_carry_the_controller_label() -> None:
    queue: WorkQueue[str] = WorkQueue("queue-name", controller="its-controller")
    queue.add("a")
    assert sample("workqueue_adds_total", name="queue-name", controller="its-controller",
                  cluster="") == 1
    assert sample("workqueue_depth", name="queue-name", controller="its-controller",
                  cluster="", priority="0") == 1


def test_workqueue_times_the_wait_from_due_to_taken_and_the_work_from_taken_to_done() -> None:
    clock = Clock()
    queue: WorkQueue[str] = WorkQueue("timing-test", clock=clock)
    queue.add("a", delay=10)
    clock.now += 12  # due 2 s ago
    assert queue.get(timeout=0) == "a"
    clock.now += 3
    assert queue.stats() == ({}, 3.0, 3.0)
    assert queue_sample("workqueue_unfinished_work_seconds", "timing-test") == 3.0
    assert queue_sample("workqueue_longest_running_processor_seconds", "timing-test") == 3.0
    queue.done("a")
    assert queue_sample("workqueue_queue_duration_seconds_sum", "timing-test") == 2.0
    assert queue_sample("workqueue_work_duration_seconds_sum", "timing-test") == 3.0
    assert queue_sample("workqueue_queue_duration_seconds_count", "timing-test") == 1


def test_workqueue_adds_count_a_key_once_until_it_is_taken() -> None:
    queue: WorkQueue[str] = WorkQueue("adds-test")
    for _ in range(3):
        queue.add("a")
    assert queue_sample("workqueue_adds_total", "adds-test") == 1
    assert queue.get(timeout=0) == "a"
    queue.add("a")  # changed while being worked on: it will be worked on again
    assert queue_sample("workqueue_adds_total", "adds-test") == 2


def test_both_updates_an_operator_kit_metric_and_its_twin_together() -> None:
    both = metrics.Both(metrics.IN_FLIGHT.labels("both-test", ""),
                        metrics.CR_ACTIVE_WORKERS.labels("both-test", ""))
    both.inc()
    both.inc()
    both.dec()
    assert sample("operator_kit_controller_reconciles_in_flight", controller="both-test",
                  cluster="") == 1
    assert sample("controller_runtime_active_workers", controller="both-test", cluster="") == 1


def test_webhook_requests_are_counted_by_status_code_timed_and_in_flight() -> None:
    app = Webhooks()
    inside: list[float] = []

    @app.validate(Widget, "/metrics-validate")
    def check(request: Any) -> None:
        inside.append(sample("controller_runtime_webhook_requests_in_flight",
                             webhook="/metrics-validate"))
        if request.object and request.object.spec.schedule == "":
            raise Denied("no")

    http = app.test_client()
    before = sample("controller_runtime_webhook_requests_total", webhook="/metrics-validate",
                    code="200")
    assert http.post("/metrics-validate", json=admission(widget())).status_code == 200
    assert http.post("/metrics-validate", data="x",
                     content_type="text/plain").status_code == 415
    assert http.get("/metrics-validate").status_code == 405
    assert sample("controller_runtime_webhook_requests_total", webhook="/metrics-validate",
                  code="200") == before + 1
    assert sample("controller_runtime_webhook_requests_total", webhook="/metrics-validate",
                  code="415") == 1
    assert sample("controller_runtime_webhook_requests_total", webhook="/metrics-validate",
                  code="405") == 1
    assert inside == [1.0]
    assert sample("controller_runtime_webhook_requests_in_flight",
                  webhook="/metrics-validate") == 0
    assert sample("controller_runtime_webhook_latency_seconds_count",
                  webhook="/metrics-validate") == 2


class FailingWatch:
    """A watch as the gauges see it (`metrics.WatchHealth`): failing for 12.5 s."""

    metric_resource = "widgets.example.com"
    metric_cluster = ""

    def __init__(self, failing_for: float | None = 12.5) -> None:
        self.seconds = failing_for

    def failing_for(self) -> float | None:
        return self.seconds


def test_watch_gauges_say_which_resource_fails_and_for_how_long() -> None:
    """Per resource, the longest-failing watch; a watch that does not run is not there."""
    watches = [FailingWatch(0.0), FailingWatch(3.0), FailingWatch(None)]
    healthy = FailingWatch(0.0)
    healthy.metric_resource = "gadgets.example.com"
    for watch in [*watches, healthy]:
        metrics.WATCH_GAUGES.track(watch)

    def sample(name: str, resource: str, cluster: str = "") -> float | None:
        return REGISTRY.get_sample_value(name, {"resource": resource, "cluster": cluster})

    assert sample("operator_kit_watch_failing", "widgets.example.com") == 1.0
    assert sample("operator_kit_watch_failing_seconds", "widgets.example.com") == 3.0
    assert sample("operator_kit_watch_failing", "gadgets.example.com") == 0.0
    assert sample("operator_kit_watch_failing_seconds", "gadgets.example.com") == 0.0
    watches[1].seconds = None  # stopped
    assert sample("operator_kit_watch_failing", "widgets.example.com") == 0.0
    member = FailingWatch(7.0)  # a fleet member's: apart from the hub's
    member.metric_cluster = "east"
    metrics.WATCH_GAUGES.track(member)
    assert sample("operator_kit_watch_failing", "widgets.example.com", "east") == 1.0
    assert sample("operator_kit_watch_failing", "widgets.example.com") == 0.0


def promtool() -> str | None:
    found = os.environ.get("PROMTOOL") or shutil.which("promtool")
    default = Path.home() / "go" / "bin" / "promtool"
    return found or (str(default) if default.exists() else None)


def test_promtool_finds_nothing_to_lint_in_the_metrics() -> None:
    tool = promtool()
    if tool is None:
        pytest.skip("promtool not found: set PROMTOOL, or build it with go install "
                    "github.com/prometheus/prometheus/cmd/promtool@v0.316.0 (.ci/run does)")
    queue: WorkQueue[str] = WorkQueue("promtool-test")  # a sample of each gauge
    queue.add("a")
    watch = FailingWatch()
    metrics.WATCH_GAUGES.track(watch)
    result = subprocess.run([tool, "check", "metrics"], input=generate_latest(REGISTRY),
                            capture_output=True, timeout=60, check=False)
    problems = result.stdout.decode() + result.stderr.decode()
    assert result.returncode == 0, problems


SCRAPE_BOTH_SERVERS = """
import urllib.request
from operator_kit import Operator, metrics
from operator_kit.cli import servers
from operator_kit.settings import Address, Settings

metrics.RECONCILES.labels("created-test", "").inc()
metrics.RECONCILE_DURATION.labels("created-test", "").observe(0.2)
operator = Operator("created-test", [])
gunicorn = operator.app.test_client().get("/metrics").get_data(as_text=True)
cli = servers(operator, Settings(metrics_bind_address=Address("127.0.0.1", 0)))[0]
cli.start()
try:
    with urllib.request.urlopen(f"http://{cli.address}/metrics", timeout=10) as answer:
        served = answer.read().decode()
finally:
    cli.stop()
print(gunicorn + "\\n=====\\n" + served)
"""


def test_metrics_have_no_created_series_on_either_server() -> None:
    """``/metrics`` as gunicorn serves it (the operator's app) and as the operator's command
    line does (its metrics server), in a fresh interpreter that imports only what those
    do and has no ``PROMETHEUS_DISABLE_CREATED_SERIES``: counters and histograms have
    their samples and no ``_created`` line."""
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_DISABLE_CREATED_SERIES"}
    result = subprocess.run([sys.executable, "-c", SCRAPE_BOTH_SERVERS], capture_output=True,
                            text=True, timeout=60, check=True, env=env,
                            cwd=Path(__file__).parents[2])
    for body in result.stdout.split("\n=====\n"):
        lines = body.splitlines()
        assert ('operator_kit_controller_reconciles_total{cluster="",'
                'controller="created-test"} 1.0') in lines
        assert any(line.startswith("operator_kit_controller_reconcile_duration_seconds_count"
                                   '{cluster="",controller="created-test"}') for line in lines)
        created = [line for line in lines if "_created" in line]
        assert created == [], created[:5]


def test_the_created_series_are_off_in_this_process_too() -> None:
    metrics.RECONCILES.labels("created-test", "").inc()
    assert b"_created" not in metrics.exposition()
