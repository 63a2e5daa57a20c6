"""operator_kit.testing's helpers against the real API server: one synchronous reconcile."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from operator_kit import Action, Context, Controller
from operator_kit.client.transport import request_counts
from operator_kit.testing import Namespace, TestCluster, reconcile_once

from .conftest import Widget, WidgetController, create_widget, widget_path

pytestmark = pytest.mark.usefixtures("widget_kind")

FINALIZER = "helpers.operator-kit.test/cleanup"


class Finalizing(WidgetController):
    """The tests' Widget controller with a finalizer; requeues after a minute."""

    finalizer = FINALIZER

    def __init__(self, namespace: str) -> None:
        super().__init__(namespace, action=lambda _obj: Action.requeue(60))
        self.cleaned: list[str] = []
        self.seen: list[Widget] = []

    def reconcile(self, obj: Widget, ctx: Context) -> Action:
        self.seen.append(obj)
        return super().reconcile(obj, ctx)

    def cleanup(self, obj: Widget, ctx: Context) -> None:
        self.cleaned.append(obj.name)


def operator_threads() -> set[str]:
    return {t.name for t in threading.enumerate()
            if t.name.startswith(("reconcile-", "watch-", "watchdog-"))}


def test_reconcile_once_runs_one_reconcile_with_the_finalizer_and_returns_its_action(
        cluster: TestCluster, namespace: Namespace) -> None:
    created = create_widget(namespace, "w", size=3)
    controller = Finalizing(namespace.name)
    threads = operator_threads()
    action = reconcile_once(controller, cluster, "w", namespace)
    assert action == Action.requeue(60)
    assert controller.recorder.count("w") == 1
    seen = controller.seen[0]  # as the finalizer write left it, without managedFields
    assert seen.finalizers == [FINALIZER] and "managedFields" not in seen.metadata
    assert int(str(seen.resource_version)) > int(created["metadata"]["resourceVersion"])
    assert seen.spec.size == 3 and seen.uid == created["metadata"]["uid"]
    assert operator_threads() == threads, "no informer, worker or watchdog thread started"
    stored = namespace.api.get(widget_path(namespace, "w"))
    assert stored["metadata"]["finalizers"] == [FINALIZER]
    assert stored["status"] == {"observed_size": 3, "observed_generation": 1}
    child = namespace.get("v1", "ConfigMap", "w")
    assert child is not None and child["data"]["size"] == "3"
    assert child["metadata"]["ownerReferences"][0]["uid"] == stored["metadata"]["uid"]
    # Again: the finalizer is there, the status already says it: no write but the apply.
    before = request_counts()
    assert reconcile_once(controller, cluster, "w", namespace.name) == Action.requeue(60)
    writes = {key: n for key, n in (request_counts() - before).items() if key[0] != "GET"}
    assert writes == {("PATCH", f"/api/v1/namespaces/{namespace.name}/configmaps/w"): 1}
    # Deleted, it goes with its cleanup: no finalizer holds the namespace afterwards.
    namespace.api.request("DELETE", widget_path(namespace, "w"))
    assert reconcile_once(controller, cluster, "w", namespace) is None
    assert not cluster.exists(widget_path(namespace, "w"))


def test_reconcile_once_on_an_object_being_deleted_runs_cleanup_and_lets_it_go(
        cluster: TestCluster, namespace: Namespace) -> None:
    create_widget(namespace, "gone", finalizers=[FINALIZER])
    namespace.api.request("DELETE", widget_path(namespace, "gone"))
    controller = Finalizing(namespace.name)
    assert reconcile_once(controller, cluster, "gone", namespace) is None
    assert controller.cleaned == ["gone"] and controller.recorder.count("gone") == 0
    assert not cluster.exists(widget_path(namespace, "gone")), "the finalizer was removed"


class Raising(Controller[Widget]):
    resource = Widget

    def reconcile(self, obj: Widget, ctx: Context) -> Any:
        if obj.spec.size > 5:
            raise ValueError(f"size {obj.spec.size} is too big")
        return 30


def test_reconcile_once_raises_what_reconcile_raised_and_checks_what_it_returns(
        cluster: TestCluster, namespace: Namespace) -> None:
    create_widget(namespace, "big", size=9)
    create_widget(namespace, "odd", size=1)
    with pytest.raises(ValueError, match="size 9 is too big"):
        reconcile_once(Raising(), cluster, "big", namespace)
    with pytest.raises(TypeError, match=r"reconcile returned 30 \(int\)"):
        reconcile_once(Raising(), cluster, "odd", namespace)
    with pytest.raises(LookupError, match=f"sees no Widget {namespace.name}/nothing"):
        reconcile_once(Raising(), cluster, "nothing", namespace)
    with pytest.raises(ValueError, match="Widget is namespaced"):
        reconcile_once(Raising(), cluster, "odd")


def test_a_namespace_a_finalizer_holds_names_the_object_when_its_deletion_is_awaited(
        cluster: TestCluster, namespace: Namespace) -> None:
    """No operator runs to remove the finalizer: the wait fails naming the object, its
    finalizer and the command that drops it; once dropped, the namespace goes."""
    create_widget(namespace, "held", finalizers=[FINALIZER])
    with pytest.raises(AssertionError) as stuck:
        namespace.delete(wait=True, timeout=3, kinds=[Widget])
    message = str(stuck.value)
    assert f"namespace {namespace.name} finishing deletion did not hold within 3s" in message
    assert f"Widget {namespace.name}/held is still there (finalizers {FINALIZER})" in message
    assert (f"kubectl patch widgets.ctl.operator-kit.test held -n {namespace.name} "
            "--type=merge") in message
    namespace.api.request("PATCH", widget_path(namespace, "held"),
                          body={"metadata": {"finalizers": None}},
                          content_type="application/merge-patch+json")
    namespace.delete(wait=True, timeout=60, kinds=[Widget])
