"""Reconcile timeouts against a real API server (operator_kit/runtime/timeouts.py).

A reconcile that runs past ``reconcile_timeout`` is abandoned: its key is retried with
backoff (the retry may run while the abandoned thread still hangs), a new worker takes
its place, its later writes are refused before they reach the API server, and what it
returns at last is discarded.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import REGISTRY

from operator_kit import Action, Operator
from operator_kit.client.fencing import Fenced
from operator_kit.runtime.timeouts import REPLACEMENTS_PER_WORKER
from operator_kit.testing import Namespace, eventually

from .conftest import WidgetController, create_widget

pytestmark = pytest.mark.usefixtures("widget_kind")

RunOperator = Callable[..., Operator]


def size_in_config_map(ns: Namespace, name: str) -> str | None:
    cm = ns.get("v1", "ConfigMap", name)
    return cm["data"]["size"] if cm else None


def timeouts() -> float:
    return REGISTRY.get_sample_value("controller_runtime_reconcile_timeouts_total",
                                     {"controller": "widget", "cluster": ""}) or 0.0


def stuck() -> float:
    return REGISTRY.get_sample_value("operator_kit_controller_stuck_reconciles",
                                     {"controller": "widget", "cluster": ""}) or 0.0


def requeues_after() -> float:
    return REGISTRY.get_sample_value("controller_runtime_reconcile_total",
                                     {"controller": "widget", "cluster": "",
                                      "result": "requeue_after"}) or 0.0


def reconcile_workers() -> int:
    return sum(1 for t in threading.enumerate()
               if t.name.startswith("reconcile-widget-") and t.is_alive())


def test_a_hung_reconcile_times_out_so_its_key_is_retried_and_the_others_go_on(
        namespace: Namespace, run_operator: RunOperator,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("WARNING", logger="operator_kit.controller")
    release = threading.Event()
    attempts: list[float] = []  # when each reconcile of "hangs" began

    class HangsOnce(WidgetController):
        max_concurrent_reconciles = 1  # the hung reconcile holds the only worker
        reconcile_timeout = 1.0
        on_error = 0.5

        def reconcile(self, obj: Any, ctx: Any) -> Any:
            if obj.name == "hangs":
                attempts.append(time.monotonic())
                if len(attempts) == 1:
                    release.wait(60)  # a call without a timeout, say
            return super().reconcile(obj, ctx)

    before = timeouts()
    operator = run_operator(HangsOnce(namespace.name))
    try:
        create_widget(namespace, "hangs")
        eventually(10, lambda: len(attempts) == 1)
        for i in range(4):
            create_widget(namespace, f"fine-{i}", size=i)
        for i in range(4):
            eventually(20, lambda i=i: size_in_config_map(namespace, f"fine-{i}") == str(i),
                       message="the other keys are reconciled while one hangs")
        # The hung key is retried (after its timeout and a failure's backoff) and the
        # retry converges, while the first reconcile of it still hangs.
        eventually(10, lambda: size_in_config_map(namespace, "hangs") == "1")
        assert attempts[1] - attempts[0] >= 1.4  # the 1 s timeout, then the 0.5 s backoff
        assert not release.is_set() and stuck() == 1
        assert reconcile_workers() == 2  # the hung one and the one that took its place
        assert timeouts() - before == 1
        [timed_out] = [r for r in caplog.records if "timed out after" in r.getMessage()]
        assert timed_out.levelname == "ERROR"
        assert f"{namespace.name}/hangs timed out after 1s" in timed_out.getMessage()
        assert any(e["reason"] == "ReconcileTimeout" and e["involvedObject"]["name"] == "hangs"
                   for e in namespace.list("v1", "Event"))
    finally:
        release.set()
    # What the abandoned reconcile returns at last is discarded (its write was refused),
    # and its thread exits: back to one worker, and not a dead thread.
    eventually(10, lambda: "returned after" in caplog.text and "discarded" in caplog.text)
    eventually(10, lambda: reconcile_workers() == 1, message="one worker after the hang ends")
    assert stuck() == 0 and timeouts() - before == 1
    assert operator.dead_threads() == [] and operator.live()


def test_a_timed_out_reconciles_late_writes_are_refused_and_never_reach_the_api_server(
        namespace: Namespace, run_operator: RunOperator) -> None:
    timed_out = threading.Event()
    finished = threading.Event()
    outcomes: dict[str, str] = {}
    first = threading.Lock()

    class LateWriter(WidgetController):
        reconcile_timeout = 1.0
        on_error = 0.2

        def reconcile(self, obj: Any, ctx: Any) -> Any:
            if not first.acquire(blocking=False):
                return super().reconcile(obj, ctx)  # the retry: writes as usual
            timed_out.wait(30)  # until the test saw the timeout counted
            writes: dict[str, Callable[[], object]] = {
                "patch_status": lambda: ctx.patch_status(obj, {"observed_size": 99}),
                "apply_owned": lambda: ctx.apply_owned(obj, {
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": f"late-{obj.name}"}, "data": {"late": "yes"}}),
                "event": lambda: ctx.event(obj, True, "LateWrite", "after the timeout"),
            }
            for name, write in writes.items():
                try:
                    write()
                    outcomes[name] = "written"
                except Fenced as err:
                    outcomes[name] = str(err)
            finished.set()
            return Action.requeue(0.1)  # discarded: neither counted nor requeued

    before, requeued_before = timeouts(), requeues_after()
    run_operator(LateWriter(namespace.name))
    create_widget(namespace, "w", size=3)
    try:
        eventually(10, lambda: timeouts() - before == 1, message="the timeout is counted")
        # The retry ran and wrote (after the timeout and a 0.2 s backoff).
        eventually(10, lambda: size_in_config_map(namespace, "w") == "3")
    finally:
        timed_out.set()
    assert finished.wait(10)

    assert set(outcomes) == {"patch_status", "apply_owned", "event"}
    for name, outcome in outcomes.items():
        assert "refused" in outcome and "reconcile_timeout (1s)" in outcome, (name, outcome)
        assert f"{namespace.name}/w" in outcome
    time.sleep(0.5)  # time for anything that did get through to show
    widget = namespace.get("ctl.operator-kit.test/v1", "Widget", "w")
    assert widget is not None and widget["status"]["observed_size"] == 3
    assert namespace.get("v1", "ConfigMap", "late-w") is None
    assert not [e for e in namespace.list("v1", "Event") if e["reason"] == "LateWrite"]
    assert requeues_after() == requeued_before, "what it returned was not recorded"


def test_when_every_reconcile_hangs_the_replacement_workers_are_bounded(
        namespace: Namespace, run_operator: RunOperator,
        caplog: pytest.LogCaptureFixture) -> None:
    release = threading.Event()

    class AllHang(WidgetController):
        max_concurrent_reconciles = 2
        reconcile_timeout = 0.5
        on_error = 0.5

        def reconcile(self, obj: Any, ctx: Any) -> Any:
            release.wait(60)
            return super().reconcile(obj, ctx)

    run_operator(AllHang(namespace.name))
    try:
        for i in range(6):
            create_widget(namespace, f"hangs-{i}", size=i)
        eventually(15, lambda: "no new worker took its place" in caplog.text,
                   message="the watchdog stops replacing timed-out workers at its bound")
        # 2 workers, and at most 4 replacements each however many retries hang
        assert reconcile_workers() == 2 + 2 * REPLACEMENTS_PER_WORKER
    finally:
        release.set()
    for i in range(6):
        eventually(30, lambda i=i: size_in_config_map(namespace, f"hangs-{i}") == str(i))
    eventually(10, lambda: reconcile_workers() == 2, message="back to 2 workers")
    eventually(10, lambda: stuck() == 0)


def test_a_timed_out_cleanup_does_not_remove_the_finalizer_when_it_returns(
        namespace: Namespace, run_operator: RunOperator) -> None:
    finalizer = "ctl.operator-kit.test/cleanup"
    first_may_return = threading.Event()
    retry_may_return = threading.Event()
    cleanups: list[str] = []

    class SlowCleanup(WidgetController):
        reconcile_timeout = 1.0
        on_error = 0.2
        max_concurrent_reconciles = 1

        def cleanup(self, obj: Any, ctx: Any) -> None:
            cleanups.append(obj.name)
            (first_may_return if len(cleanups) == 1 else retry_may_return).wait(30)

    SlowCleanup.finalizer = finalizer
    before = timeouts()
    run_operator(SlowCleanup(namespace.name))
    create_widget(namespace, "w")

    def finalizers() -> list[str] | None:
        widget = namespace.get("ctl.operator-kit.test/v1", "Widget", "w")
        return None if widget is None else widget["metadata"].get("finalizers") or []

    eventually(10, lambda: finalizers() == [finalizer])
    namespace.api.request("DELETE", f"/apis/ctl.operator-kit.test/v1/namespaces/"
                                    f"{namespace.name}/widgets/w")
    try:
        # The first cleanup times out; its retry starts (and waits) beside it.
        eventually(10, lambda: len(cleanups) == 2 and timeouts() - before == 1)
        first_may_return.set()
        eventually(10, lambda: stuck() == 0, message="the abandoned cleanup returned")
        time.sleep(0.5)  # time for a removal that got through to show
        assert finalizers() == [finalizer], "the abandoned cleanup's removal was refused"
    finally:
        first_may_return.set()
        retry_may_return.set()
    eventually(10, lambda: finalizers() is None, message="the retry removes it: gone")


def test_stopping_waits_for_abandoned_reconciles_within_its_bound_in_all_not_each(
        namespace: Namespace, run_operator: RunOperator) -> None:
    release = threading.Event()

    class AllHang(WidgetController):
        max_concurrent_reconciles = 2
        reconcile_timeout = 0.3
        on_error = 0.2

        def reconcile(self, obj: Any, ctx: Any) -> Any:
            release.wait(60)
            return super().reconcile(obj, ctx)

    operator = run_operator(AllHang(namespace.name))
    try:
        for i in range(6):
            create_widget(namespace, f"hangs-{i}", size=i)
        eventually(15, lambda: stuck() >= 6, message="six abandoned reconciles hang")
        started = time.monotonic()
        operator.stop(timeout=1.0)
        took = time.monotonic() - started
        assert took < 3.0, f"stop took {took:.1f}s: a 1 s bound per hung thread, not in all"
    finally:
        release.set()
    eventually(10, lambda: reconcile_workers() == 0, message="every worker ends")
