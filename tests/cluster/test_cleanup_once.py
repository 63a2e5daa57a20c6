"""A cleanup that writes its own object's status runs once per deletion.

The status write moves the object's resourceVersion, so the finalizer's removal, which
carries the version read, gets a 409: the runner reads the object again from the API
server and retries the removal alone, instead of running cleanup again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from operator_kit import Action, Context, Controller, Operator
from operator_kit.runtime.finalizers import FINALIZER_REMOVAL_ATTEMPTS
from operator_kit.testing import Namespace, TestCluster, eventually, reconcile_once

from .conftest import Widget, create_widget, widget_path

pytestmark = pytest.mark.usefixtures("widget_kind")

RunOperator = Callable[..., Operator]
FINALIZER = "cleanup-once.operator-kit.test/cleanup"
OTHER = "cleanup-once.operator-kit.test/someone-else"
RETRIED = "removing the finalizer of"  # the start of the runner's retry log lines


class StatusCleanup(Controller[Widget]):
    """On deletion, reports in status that cleanup ran (a write that moves the
    resourceVersion) and counts its cleanups."""

    resource = Widget
    finalizer = FINALIZER

    def __init__(self, namespace: str) -> None:
        super().__init__()
        self.namespace = namespace
        self.cleanups: list[str] = []
        self._lock = threading.Lock()

    def reconcile(self, obj: Widget, ctx: Context) -> Action:
        return Action.await_change()

    def cleanup(self, obj: Widget, ctx: Context) -> None:
        with self._lock:
            self.cleanups.append(obj.name)
        ctx.patch_status(obj, {"observed_size": -len(self.cleanups)})

    def count(self, name: str) -> int:
        with self._lock:
            return self.cleanups.count(name)


def gone(ns: Namespace, name: str) -> bool:
    try:
        ns.api.get(widget_path(ns, name))
    except ApiException as err:
        return err.status == 404
    return False


def retry_lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "operator_kit.controller" and r.levelno == level
            and RETRIED in r.getMessage()]


def test_a_cleanup_that_writes_status_runs_once_and_the_object_goes(
        namespace: Namespace, run_operator: RunOperator,
        caplog: pytest.LogCaptureFixture) -> None:
    controller = StatusCleanup(namespace.name)
    run_operator(controller)
    create_widget(namespace, "w")
    eventually(20, lambda: namespace.api.get(widget_path(namespace, "w"))["metadata"].get(
        "finalizers") == [FINALIZER])
    with caplog.at_level(logging.DEBUG, logger="operator_kit.controller"):
        namespace.api.request("DELETE", widget_path(namespace, "w"))
        eventually(20, lambda: gone(namespace, "w"))
        time.sleep(1.0)  # time for a second cleanup, were one coming
    assert controller.count("w") == 1
    assert retry_lines(caplog, logging.DEBUG), "the removal conflicted and was retried"
    assert not retry_lines(caplog, logging.WARNING)


def test_the_retried_removal_keeps_the_finalizers_of_others(
        namespace: Namespace, run_operator: RunOperator) -> None:
    controller = StatusCleanup(namespace.name)
    run_operator(controller)
    create_widget(namespace, "w", finalizers=[OTHER])
    path = widget_path(namespace, "w")
    eventually(20, lambda: namespace.api.get(path)["metadata"].get("finalizers") == [
        OTHER, FINALIZER])
    namespace.api.request("DELETE", path)
    try:
        eventually(20, lambda: namespace.api.get(path)["metadata"]["finalizers"] == [OTHER])
        time.sleep(1.0)
        assert controller.count("w") == 1
        assert namespace.api.get(path)["status"]["observed_size"] == -1
    finally:  # let the namespace go
        namespace.api.request("PATCH", path, body={"metadata": {"finalizers": None}},
                              content_type="application/merge-patch+json")


def test_reconcile_once_runs_a_status_writing_cleanup_once_and_lets_the_object_go(
        cluster: TestCluster, namespace: Namespace) -> None:
    create_widget(namespace, "w", finalizers=[FINALIZER])
    namespace.api.request("DELETE", widget_path(namespace, "w"))
    controller = StatusCleanup(namespace.name)
    assert reconcile_once(controller, cluster, "w", namespace) is None
    assert controller.count("w") == 1
    assert gone(namespace, "w")


def test_a_removal_that_keeps_conflicting_is_given_up_logged_and_requeued(
        namespace: Namespace, run_operator: RunOperator,
        caplog: pytest.LogCaptureFixture) -> None:
    """Another writer changes the object before each removal: after the bounded tries
    the key is requeued (with a warning), and that next pass, unhindered, finishes."""
    controller = StatusCleanup(namespace.name)
    operator = run_operator(controller)
    create_widget(namespace, "w")
    path = widget_path(namespace, "w")
    eventually(20, lambda: namespace.api.get(path)["metadata"].get("finalizers"))
    api = operator._runners[0].api
    send = api.request
    fighting = threading.Event()
    fighting.set()
    removals: list[int] = []

    def another_writer_first(method: str, url: str, **options: Any) -> Any:
        body = options.get("body") or {}
        if fighting.is_set() and method == "PATCH" and url == path and "finalizers" in (
                body.get("metadata") or {}):
            removals.append(1)
            send("PATCH", path, body={"metadata": {"annotations": {
                "writer": str(len(removals))}}}, content_type="application/merge-patch+json")
            if len(removals) == FINALIZER_REMOVAL_ATTEMPTS:
                fighting.clear()
        return send(method, url, **options)

    api.request = another_writer_first  # type: ignore[method-assign]
    with caplog.at_level(logging.DEBUG, logger="operator_kit.controller"):
        namespace.api.request("DELETE", path)
        eventually(30, lambda: gone(namespace, "w"))
    assert len(removals) == FINALIZER_REMOVAL_ATTEMPTS
    warnings = retry_lines(caplog, logging.WARNING)
    assert len(warnings) == 1 and "requeued" in warnings[0], warnings
    lines = [r.getMessage() for r in caplog.records if RETRIED in r.getMessage()]
    attempts = [int(m.rpartition("(attempt ")[2].split(")")[0]) for m in lines
                if "(attempt " in m]
    # The first pass: a retry after each conflict but the last, then the warning; the
    # requeued pass: cleanup again, whose status write conflicts once, and one retry.
    assert attempts == [*range(1, FINALIZER_REMOVAL_ATTEMPTS), 1], lines
    assert lines.index(warnings[0]) == FINALIZER_REMOVAL_ATTEMPTS - 1
    assert controller.count("w") == 2, "the requeued pass runs cleanup again, once"
