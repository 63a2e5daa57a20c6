"""Controllers against the real API server: one behaviour per test."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from prometheus_client import REGISTRY

from operator_kit import Action, Context, Operator
from operator_kit.testing import Namespace, eventually

from .conftest import Recorder, Widget, WidgetController, WidgetSpec, create_widget, widget_path

pytestmark = pytest.mark.usefixtures("widget_kind")

RunOperator = Callable[..., Operator]


def settle(recorder: Recorder, name: str, quiet: float = 1.0) -> int:
    """Wait until `name` has not been reconciled for `quiet` seconds; its count then."""
    while True:
        count = recorder.count(name)
        time.sleep(quiet)
        if recorder.count(name) == count:
            return count


def config_map(ns: Namespace, name: str) -> dict[str, Any] | None:
    result: dict[str, Any] | None = ns.get("v1", "ConfigMap", name)
    return result


def widget(ns: Namespace, name: str) -> dict[str, Any]:
    result: dict[str, Any] = ns.api.get(widget_path(ns, name))
    return result


def test_created_object_is_reconciled_into_its_owned_child_and_status(
        namespace: Namespace, run_operator: RunOperator) -> None:
    run_operator(WidgetController(namespace.name))
    create_widget(namespace, "w1", size=3)
    cm = eventually(20, lambda: config_map(namespace, "w1"))
    assert cm["data"]["size"] == "3"
    owner = cm["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("Widget", "w1", True)
    assert any(m["manager"] == "test-operator" and m["operation"] == "Apply"
               for m in cm["metadata"]["managedFields"]), "applied with the operator's name"
    status = eventually(20, lambda: widget(namespace, "w1").get("status", {}).get("observed_size"))
    assert status == 3


@pytest.mark.parametrize(("skip_own_echoes", "expected"), [(False, 4), (True, 2)],
                         ids=["echoes-reconcile", "skip-own-echoes"])
def test_spec_change_is_reconciled_but_own_status_patch_does_not_loop(
        namespace: Namespace, run_operator: RunOperator, skip_own_echoes: bool,
        expected: int) -> None:
    recorder = Recorder()
    controller = WidgetController(namespace.name, recorder)
    controller.skip_own_echoes = skip_own_echoes
    run_operator(controller)
    create_widget(namespace, "w", size=1)
    eventually(20, lambda: widget(namespace, "w").get("status", {}).get("observed_size") == 1)
    namespace.api.request("PATCH", widget_path(namespace, "w"), body={"spec": {"size": 2}},
                          content_type="application/merge-patch+json")
    eventually(20, lambda: config_map(namespace, "w")["data"]["size"] == "2")  # type: ignore[index]
    settled = settle(recorder, "w")
    time.sleep(2)
    assert recorder.count("w") == settled, "status patches must not trigger reconciles"
    # The creation and the spec change, never the status patches. By default (as in
    # controller-runtime) the watch's echo of each ConfigMap write reconciles once more,
    # and that reconcile's apply changes nothing, so it ends there; with skip_own_echoes
    # the echoes are dropped (even when they beat the apply's answer).
    assert settled == expected


def test_owned_child_changed_by_hand_is_restored(namespace: Namespace,
                                                 run_operator: RunOperator) -> None:
    run_operator(WidgetController(namespace.name))
    create_widget(namespace, "w", size=5)
    eventually(20, lambda: config_map(namespace, "w"))
    namespace.api.request("PATCH", f"/api/v1/namespaces/{namespace.name}/configmaps/w",
                          body={"data": {"size": "999"}},
                          content_type="application/merge-patch+json")
    eventually(20, lambda: config_map(namespace, "w")["data"]["size"] == "5")  # type: ignore[index]


def test_owned_child_deleted_by_hand_is_recreated(namespace: Namespace,
                                                  run_operator: RunOperator) -> None:
    run_operator(WidgetController(namespace.name))
    create_widget(namespace, "w", size=5)
    first = eventually(20, lambda: config_map(namespace, "w"))
    namespace.api.request("DELETE", f"/api/v1/namespaces/{namespace.name}/configmaps/w")
    again = eventually(20, lambda: (cm := config_map(namespace, "w")) and
                       cm["metadata"]["uid"] != first["metadata"]["uid"] and cm)
    assert again["data"]["size"] == "5"


def test_requeue_reconciles_again_after_the_delay(namespace: Namespace,
                                                  run_operator: RunOperator) -> None:
    recorder = Recorder()
    run_operator(WidgetController(namespace.name, recorder, lambda _o: Action.requeue(1.0)))
    create_widget(namespace, "w")
    eventually(20, lambda: recorder.count("w") >= 3)
    times = recorder.times("w")
    gaps = [b - a for a, b in itertools.pairwise(times[1:])]
    assert all(0.9 <= gap < 3.0 for gap in gaps), gaps


def test_await_change_waits_for_the_next_change(namespace: Namespace,
                                                run_operator: RunOperator) -> None:
    recorder = Recorder()
    run_operator(WidgetController(namespace.name, recorder))
    create_widget(namespace, "w")
    eventually(20, lambda: config_map(namespace, "w"))
    # Creating the owned ConfigMap is itself a change that reconciles once more.
    before = settle(recorder, "w")
    assert before <= 2
    time.sleep(2)
    assert recorder.count("w") == before, "await_change must not reconcile again by itself"
    namespace.api.request("PATCH", widget_path(namespace, "w"), body={"spec": {"size": 7}},
                          content_type="application/merge-patch+json")
    eventually(20, lambda: recorder.count("w") > before)


class FailingController(WidgetController):
    on_error = 0.2
    max_backoff = 60.0

    def __init__(self, namespace: str, failures: int) -> None:
        super().__init__(namespace)
        self.failures_left = failures

    def reconcile(self, obj: Widget, ctx: Context) -> Action:
        self.recorder.record(obj.name, time.monotonic())
        if self.failures_left > 0:
            self.failures_left -= 1
            raise RuntimeError("the database is down")
        return Action.await_change()


def test_failure_backoff_doubles_per_failure_and_a_success_resets_it(
        namespace: Namespace, run_operator: RunOperator) -> None:
    controller = FailingController(namespace.name, failures=4)
    operator = run_operator(controller)
    runner = operator._runners[0]
    create_widget(namespace, "w")
    key = (namespace.name, "w")
    seen: list[tuple[int, float]] = []

    def backoff_recorded() -> bool:
        failures = runner.queue.failures(key)
        if failures and (not seen or seen[-1][0] != failures):
            seen.append((failures, runner.queue.scheduled_in(key) or 0.0))
        return failures == 0 and controller.failures_left == 0

    eventually(30, backoff_recorded, interval=0.005)
    # Read from the queue right after each failure: 0.2 s, doubling per failure.
    assert [n for n, _ in seen] == [1, 2, 3, 4], seen
    for failures, delay in seen:
        expected = 0.2 * 2 ** (failures - 1)
        assert expected - 0.1 <= delay <= expected, seen
    assert runner.queue.failures(key) == 0, "a success resets the failure count"
    times = controller.recorder.times("w")
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert [round(g / 0.2) for g in gaps[:4]] == [1, 2, 4, 8], gaps
    errors = REGISTRY.get_sample_value("operator_kit_controller_reconcile_errors_total",
                                       {"controller": "widget", "cluster": ""})
    assert errors is not None and errors >= 4


class FinalizingController(WidgetController):
    finalizer = "ctl.operator-kit.test/cleanup"

    def __init__(self, namespace: str, fail_cleanup: bool = False) -> None:
        super().__init__(namespace)
        self.fail_cleanup = fail_cleanup
        self.cleaned: list[str] = []

    def cleanup(self, obj: Widget, ctx: Context) -> None:
        if self.fail_cleanup:
            raise RuntimeError("cannot reach the backup store")
        self.cleaned.append(obj.name)


def test_finalizer_is_added_once_and_cleanup_runs_before_deletion(
        namespace: Namespace, run_operator: RunOperator) -> None:
    controller = FinalizingController(namespace.name)
    run_operator(controller)
    create_widget(namespace, "w")
    eventually(20, lambda: widget(namespace, "w")["metadata"].get("finalizers"))
    eventually(20, lambda: config_map(namespace, "w"))
    # The creation, and the echo of its ConfigMap's creation; the finalizer's own write
    # coming back is not another.
    assert settle(controller.recorder, "w") == 2
    namespace.api.request("PATCH", widget_path(namespace, "w"), body={"spec": {"size": 4}},
                          content_type="application/merge-patch+json")
    eventually(20, lambda: config_map(namespace, "w")["data"]["size"] == "4")  # type: ignore[index]
    assert widget(namespace, "w")["metadata"]["finalizers"] == [controller.finalizer]
    namespace.api.request("DELETE", widget_path(namespace, "w"))

    def gone() -> bool:
        try:
            widget(namespace, "w")
        except ApiException as err:
            return err.status == 404
        return False

    eventually(20, gone)
    assert controller.cleaned == ["w"]


def test_failing_cleanup_keeps_the_finalizer_and_the_object(
        namespace: Namespace, run_operator: RunOperator) -> None:
    controller = FinalizingController(namespace.name, fail_cleanup=True)
    controller.on_error = 0.2
    operator = run_operator(controller)
    create_widget(namespace, "w")
    eventually(20, lambda: widget(namespace, "w")["metadata"].get("finalizers"))
    namespace.api.request("DELETE", widget_path(namespace, "w"))
    runner = operator._runners[0]
    eventually(20, lambda: runner.queue.failures((namespace.name, "w")) >= 2)
    held = widget(namespace, "w")
    assert held["metadata"]["deletionTimestamp"]
    assert held["metadata"]["finalizers"] == [controller.finalizer]
    warnings = namespace.list("v1", "Event", fieldSelector="reason=ReconcileError")
    assert any("cannot reach the backup store" in e["message"] for e in warnings)
    controller.fail_cleanup = False
    eventually(30, lambda: not namespace.list(Widget.api_version(), "Widget"))


def test_deleting_the_owner_garbage_collects_the_child(namespace: Namespace,
                                                       run_operator: RunOperator) -> None:
    run_operator(WidgetController(namespace.name))
    create_widget(namespace, "w")
    eventually(20, lambda: config_map(namespace, "w"))
    namespace.api.request("DELETE", widget_path(namespace, "w"))
    # The garbage collector re-reads discovery every 30 s; allow for a fresh CRD.
    eventually(90, lambda: config_map(namespace, "w") is None)


def test_status_patch_does_not_touch_spec(namespace: Namespace,
                                          run_operator: RunOperator) -> None:
    run_operator(WidgetController(namespace.name))
    create_widget(namespace, "w", size=6)
    eventually(20, lambda: widget(namespace, "w").get("status", {}).get("observed_size") == 6)
    assert widget(namespace, "w")["spec"] == {"size": 6, "message": "hello"}


def test_label_selector_excludes_objects_that_do_not_match(namespace: Namespace,
                                                           run_operator: RunOperator) -> None:
    recorder = Recorder()
    controller = WidgetController(namespace.name, recorder)
    controller.label_selector = "team=blue"
    run_operator(controller)
    create_widget(namespace, "red", labels={"team": "red"})
    create_widget(namespace, "blue", labels={"team": "blue"})
    eventually(20, lambda: config_map(namespace, "blue"))
    time.sleep(1)
    assert recorder.count("red") == 0
    assert config_map(namespace, "red") is None


def test_reconcile_counters_move(namespace: Namespace, run_operator: RunOperator) -> None:
    def total() -> float:
        return REGISTRY.get_sample_value("operator_kit_controller_reconciles_total",
                                         {"controller": "widget", "cluster": ""}) or 0.0

    before = total()
    run_operator(WidgetController(namespace.name))
    create_widget(namespace, "w")
    eventually(20, lambda: total() >= before + 1)
    depth = REGISTRY.get_sample_value("operator_kit_controller_queue_depth",
                                      {"controller": "widget", "cluster": ""})
    assert depth is not None


class ModelChildController(WidgetController):
    """Owns a ConfigMap given as a kubernetes client model rather than a dict."""

    def reconcile(self, obj: Widget, ctx: Context) -> Action:
        from kubernetes import client

        ctx.apply_owned(obj, client.V1ConfigMap(
            api_version="v1", kind="ConfigMap",
            metadata=client.V1ObjectMeta(name=f"{obj.name}-model"),
            data={"size": str(obj.spec.size)}))
        child = Widget(f"{obj.name}-child", WidgetSpec(size=obj.spec.size + 1),
                       labels={"child": "true"})  # excluded by the selector below
        ctx.apply_owned(obj, child)
        return Action.await_change()


def test_apply_owned_takes_client_models_and_custom_resources(
        namespace: Namespace, run_operator: RunOperator) -> None:
    controller = ModelChildController(namespace.name)
    controller.label_selector = "!child"
    run_operator(controller)
    create_widget(namespace, "w", size=2)
    cm = eventually(20, lambda: config_map(namespace, "w-model"))
    assert cm["data"] == {"size": "2"}
    assert cm["metadata"]["ownerReferences"][0]["name"] == "w"
    child = eventually(20, lambda: namespace.get(Widget.api_version(), "Widget", "w-child"))
    assert child["spec"]["size"] == 3
    owner_uid = widget(namespace, "w")["metadata"]["uid"]
    assert child["metadata"]["ownerReferences"][0]["uid"] == owner_uid
