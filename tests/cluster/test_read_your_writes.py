"""Read-your-writes across reconciles, through the real API server: the next reconcile of
an object reads what its previous one wrote, so "create a child when none is listed"
creates exactly one child however fast the events come."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from operator_kit import Context, Controller, Operator
from operator_kit.runtime.consistency import CaughtUp
from operator_kit.runtime.watching import Informer
from operator_kit.testing import Namespace, TestCluster, eventually

from .conftest import Widget, create_widget, widget_path

pytestmark = pytest.mark.usefixtures("widget_kind")


class OneChild(Controller[Widget]):
    """Creates a child (a generated name: a second create would make a twin) when it lists
    none — the duplicate-Job pattern."""

    resource = Widget
    owns = ("v1/ConfigMap",)
    max_concurrent_reconciles = 2

    def __init__(self, namespace: str) -> None:
        super().__init__()
        self.namespace = namespace
        self.passes = 0
        self._lock = threading.Lock()

    def reconcile(self, obj: Widget, ctx: Context) -> None:
        with self._lock:
            self.passes += 1
        if not ctx.owned(obj, "v1/ConfigMap"):
            ctx.create({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"generateName": f"{obj.name}-"}}, owner=obj)


@pytest.fixture(autouse=True)
def lagging_child_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ConfigMap watch applies each event 50 ms late, as under a loaded API server."""
    apply = Informer._apply

    def late(self: Informer, kind: str, obj: dict[str, Any]) -> None:
        if self.resource.plural == "configmaps":
            threading.Event().wait(0.05)
        apply(self, kind, obj)

    monkeypatch.setattr(Informer, "_apply", late)


def storm(cluster: TestCluster, namespace: Namespace, widgets: int, patches: int) -> int:
    """Children made for `widgets` widgets, each patched `patches` times at once."""
    controller = OneChild(namespace.name)
    operator = Operator("ryw-test", [controller])
    operator.use(cluster.client)
    operator.start()
    try:
        assert operator.wait_synced(30)
        names = [f"w{i}" for i in range(widgets)]
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda n: create_widget(namespace, n), names))
            list(pool.map(lambda i: namespace.api.request(
                "PATCH", widget_path(namespace, names[i % widgets]),
                body={"spec": {"size": 2 + i}},
                content_type="application/merge-patch+json"), range(widgets * patches)))

        def children() -> list[Any]:
            return list(namespace.list("v1", "ConfigMap", labelSelector=""))

        def settled() -> bool:
            passes = controller.passes
            threading.Event().wait(1.5)
            return controller.passes == passes

        eventually(60, settled, message="the storm's reconciles finished")
        made = [c for c in children() if c["metadata"]["name"] != "kube-root-ca.crt"]
        print(f"\nread-your-writes: {widgets} widgets x {patches} patches -> "
              f"{controller.passes} reconciles, {len(made)} children")
        return len(made)
    finally:
        operator.stop(timeout=10)


def test_create_when_none_is_listed_makes_exactly_one_child_under_an_event_storm(
        cluster: TestCluster, namespace: Namespace) -> None:
    assert storm(cluster, namespace, widgets=10, patches=10) == 10


def test_without_waiting_for_the_caches_the_same_storm_makes_twins(
        cluster: TestCluster, namespace: Namespace, monkeypatch: pytest.MonkeyPatch) -> None:
    # The baseline the rule is there for: the next reconcile reads a cache that has not
    # seen its previous pass's create yet, and creates a twin.
    monkeypatch.setattr(CaughtUp, "ready", lambda self, key, stop: True)
    assert storm(cluster, namespace, widgets=10, patches=10) > 10
