"""Which reads a label-selected informer serves, counted in requests to a real API server.

A controller over Widgets declared with ``label_selector="app=web"`` and a ``Watch`` of
ConfigMaps with the same selector: in reconcile, a ``ctx.list`` whose selector implies
``app=web`` reads the cache (no LIST), one that does not is a LIST, a ``ctx.get`` is a
GET (a label-selected cache cannot tell that an object is absent) — and each answer is
the one the API server gives.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from operator_kit import Context, Controller, Operator, Watch
from operator_kit.client.transport import request_counts
from operator_kit.testing import Namespace, TestCluster, eventually

from .conftest import Widget, create_widget

pytestmark = pytest.mark.usefixtures("widget_kind")

Requests = dict[tuple[str, str], int]


def names(found: Any) -> list[str]:
    if found is None:
        return []
    if not isinstance(found, list):
        found = [found]
    return [item.name if isinstance(item, Widget) else item["metadata"]["name"]
            for item in found]


class SelectedReader(Controller[Widget]):
    """Reconciles the app=web Widgets; records each read's answer and its requests."""

    resource = Widget
    label_selector = "app=web"
    watches = (Watch("v1/ConfigMap", lambda cm, objects: [], label_selector="app=web"),)

    def __init__(self) -> None:
        super().__init__()
        self.reports: list[dict[str, tuple[list[str], Requests]]] = []

    def reconcile(self, obj: Widget, ctx: Context) -> None:
        ns = obj.namespace
        assert ns is not None
        reads: dict[str, Callable[[], Any]] = {
            "configmaps app=web,tier=db": lambda: ctx.list(
                "v1/ConfigMap", ns, labels="app=web,tier=db"),
            "configmaps app in (web),tier": lambda: ctx.list(
                "v1/ConfigMap", ns, labels="app in (web),tier"),
            "configmaps {app: web}": lambda: ctx.list("v1/ConfigMap", ns, labels={"app": "web"}),
            "configmaps tier=db": lambda: ctx.list("v1/ConfigMap", ns, labels="tier=db"),
            "configmaps app in (web,db)": lambda: ctx.list(
                "v1/ConfigMap", ns, labels="app in (web,db)"),
            "widgets app=web,tier=db": lambda: ctx.list(Widget, ns, labels="app=web,tier=db"),
            "widgets, no selector": lambda: ctx.list(Widget, ns),
            "get configmap web-db": lambda: ctx.get("v1/ConfigMap", "web-db"),
            "get configmap db-db": lambda: ctx.get("v1/ConfigMap", "db-db"),
        }
        report: dict[str, tuple[list[str], Requests]] = {}
        for name, read in reads.items():
            report[name] = self._counted(ns, read)
        ctx.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "name": "fresh", "namespace": ns, "labels": {"app": "web", "tier": "db"}}})
        report["after a create: configmaps app=web,tier=db"] = self._counted(
            ns, lambda: ctx.list("v1/ConfigMap", ns, labels="app=web,tier=db"))
        before = request_counts()
        try:
            ctx.list("v1/ConfigMap", ns, labels="app=web,")
        except ValueError as err:
            report["configmaps app=web, (invalid)"] = ([str(err)], _sent(ns, before))
        self.reports.append(report)

    @staticmethod
    def _counted(ns: str, read: Callable[[], Any]) -> tuple[list[str], Requests]:
        before = request_counts()
        found = read()
        return names(found), _sent(ns, before)


def _sent(ns: str, before: Any) -> Requests:
    """The requests for this namespace's objects since `before` (the informers' own
    requests are for every namespace, on other paths)."""
    sent = request_counts() - before
    return {key: n for key, n in sent.items() if f"/namespaces/{ns}/" in key[1]}


def test_a_list_implying_the_informers_selector_reads_the_cache_and_others_the_api_server(
        cluster: TestCluster, namespace: Namespace) -> None:
    ns = namespace.name
    for name, labels in {"web-db": {"app": "web", "tier": "db"}, "web": {"app": "web"},
                         "db-db": {"app": "db", "tier": "db"}, "none": {}}.items():
        namespace.apply({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": name, "labels": labels}})
    create_widget(namespace, "w", labels={"app": "web", "tier": "db"})
    create_widget(namespace, "x", labels={"app": "db", "tier": "db"})  # not reconciled
    controller = SelectedReader()
    operator = Operator("cache-reads-test", [controller])
    operator.use(cluster.client)
    operator.start()
    try:
        assert operator.wait_synced(30), "caches did not sync"
        eventually(20, lambda: controller.reports)
    finally:
        operator.stop(timeout=10)
    report = controller.reports[0]

    cm_list = ("GET", f"/api/v1/namespaces/{ns}/configmaps")
    widget_list = ("GET", f"/apis/{Widget.api_version()}/namespaces/{ns}/widgets")
    expected: dict[str, tuple[list[str], Requests]] = {
        # implied by app=web: the cache, no request
        "configmaps app=web,tier=db": (["web-db"], {}),
        "configmaps app in (web),tier": (["web-db"], {}),
        "configmaps {app: web}": (["web", "web-db"], {}),
        "widgets app=web,tier=db": (["w"], {}),
        # not implied: one LIST each, answered by the API server (objects outside app=web)
        "configmaps tier=db": (["db-db", "web-db"], {cm_list: 1}),
        "configmaps app in (web,db)": (["db-db", "web", "web-db"], {cm_list: 1}),
        "widgets, no selector": (["w", "x"], {widget_list: 1}),
        # get: a label-selected cache cannot say an object is absent: always a GET
        "get configmap web-db": (["web-db"], {("GET", f"{cm_list[1]}/web-db"): 1}),
        "get configmap db-db": (["db-db"], {("GET", f"{cm_list[1]}/db-db"): 1}),
        # read-your-writes through the selected cache, still no LIST
        "after a create: configmaps app=web,tier=db": (["fresh", "web-db"], {}),
        # refused before any request, in the API server's words
        "configmaps app=web, (invalid)": (
            ["label selector 'app=web,': found '', expected: identifier after ','"], {}),
    }
    assert report == expected
    lists = sum(n for key, n in request_counts().items() if key == cm_list)
    assert lists >= 2, "the request tally counts these LISTs (a sanity check of the count)"
