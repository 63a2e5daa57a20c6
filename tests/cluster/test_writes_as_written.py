"""Writes mean what the user wrote, through the real API server: a status built around the
object's own list is still written, a misspelt status key is an error, another owner's
child is left alone, an apply that cannot change anything is not sent, and `ctx.list`
reads the reconciled object's namespace unless told otherwise."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from operator_kit import (
    ALL_NAMESPACES,
    AlreadyOwned,
    Condition,
    Context,
    Controller,
    CustomResource,
    Operator,
    set_condition,
)
from operator_kit.testing import Namespace, TestCluster, eventually

from .conftest import RequestCounter, Widget, create_widget, widget_path

pytestmark = pytest.mark.usefixtures("widget_kind")


@dataclass
class GaugeSpec:
    size: int = 1


@dataclass
class GaugeStatus:
    conditions: list[Condition] = field(default_factory=list)
    config_hash: str | None = None


class Gauge(CustomResource):
    group = "writes.operator-kit.test"
    version = "v1"
    kind = "Gauge"
    spec: GaugeSpec
    status: GaugeStatus


def start(cluster: TestCluster, *controllers: Controller[Any]) -> tuple[Operator, RequestCounter]:
    operator = Operator("writes-test", list(controllers))
    operator.use(cluster.client)
    spy = RequestCounter(operator)
    operator.start()
    assert operator.wait_synced(30)
    return operator, spy


# -- status: a snapshot, not the object the user's code changed -----------------------------

class ReadyGauge(Controller[Gauge]):
    """The starter's pattern: the new status built around the object's own conditions."""

    resource = Gauge

    def __init__(self, namespace: str) -> None:
        super().__init__()
        self.namespace = namespace
        self.passes = 0

    def reconcile(self, obj: Gauge, ctx: Context) -> None:
        status = GaugeStatus(conditions=obj.status.conditions)  # the same list as obj's
        set_condition(status.conditions, "Ready", "True", reason="Reconciled",
                      message="all good", observed_generation=obj.generation)
        ctx.patch_status(obj, status)
        self.passes += 1


def ready(namespace: Namespace, name: str) -> str | None:
    obj = namespace.api.get(f"/apis/{Gauge.api_version()}/namespaces/{namespace.name}"
                            f"/gauges/{name}")
    found = [c for c in (obj.get("status") or {}).get("conditions", [])
             if c.get("type") == "Ready"]
    return found[0]["status"] if found else None


def test_a_status_built_around_the_objects_own_list_is_still_written(
        cluster: TestCluster, namespace: Namespace) -> None:
    cluster.install_crd(Gauge)
    controller = ReadyGauge(namespace.name)
    operator, _ = start(cluster, controller)
    try:
        path = f"/apis/{Gauge.api_version()}/namespaces/{namespace.name}/gauges"
        namespace.api.request("POST", path, body=Gauge(
            "g", GaugeSpec(), namespace=namespace.name).to_dict())
        eventually(20, lambda: ready(namespace, "g") == "True", message="Ready written")
        # Someone sets Ready=False by hand; the next reconcile (a spec change) repairs it,
        # although set_condition changed obj.status.conditions too.
        current = namespace.api.get(f"{path}/g")
        conditions = current["status"]["conditions"]
        conditions[0]["status"] = "False"
        namespace.api.request("PATCH", f"{path}/g/status", body={
            "status": {"conditions": conditions}},
            content_type="application/merge-patch+json")
        passes = controller.passes
        namespace.api.request("PATCH", f"{path}/g", body={"spec": {"size": 2}},
                              content_type="application/merge-patch+json")
        eventually(20, lambda: controller.passes > passes, message="reconciled again")
        eventually(20, lambda: ready(namespace, "g") == "True",
                   message="the hand-set Ready=False repaired")
    finally:
        operator.stop(timeout=10)


def test_a_misspelt_status_key_is_a_type_error_naming_it_before_any_request(
        cluster: TestCluster, namespace: Namespace) -> None:
    cluster.install_crd(Gauge)
    results: list[Any] = []

    class Misspelt(Controller[Gauge]):
        resource = Gauge

        def reconcile(self, obj: Gauge, ctx: Context) -> None:
            try:
                ctx.patch_status(obj, {"confg_hash": "abc"})
            except TypeError as err:
                results.append(err)

    controller = Misspelt()
    controller.namespace = namespace.name
    operator, spy = start(cluster, controller)
    try:
        path = f"/apis/{Gauge.api_version()}/namespaces/{namespace.name}/gauges"
        namespace.api.request("POST", path, body=Gauge(
            "g", GaugeSpec(), namespace=namespace.name).to_dict())
        eventually(20, lambda: results, message="reconciled")
    finally:
        operator.stop(timeout=10)
    message = str(results[0])
    assert "'confg_hash'" in message and "config_hash" in message and "conditions" in message
    assert spy.count("PATCH", "/status") == 0


# -- owned children: another owner's is left alone; unchanged ones are not re-applied ----

class Sharer(Controller[Widget]):
    """Every widget applies the same ConfigMap, ``shared``: only one can control it."""

    resource = Widget
    owns = ("v1/ConfigMap",)
    on_error = 0.2

    def __init__(self, namespace: str, adopt: set[str] | None = None) -> None:
        super().__init__()
        self.namespace = namespace
        self.adopt = adopt or set()
        self.refused: list[AlreadyOwned] = []
        self.applied: list[str] = []

    def reconcile(self, obj: Widget, ctx: Context) -> None:
        try:
            ctx.apply_owned(obj, {"apiVersion": "v1", "kind": "ConfigMap",
                                  "metadata": {"name": "shared"},
                                  "data": {"from": obj.name}}, adopt=obj.name in self.adopt)
            self.applied.append(obj.name)
        except AlreadyOwned as err:
            self.refused.append(err)
            raise


def configmap(namespace: Namespace, name: str) -> dict[str, Any]:
    found: dict[str, Any] = namespace.api.get(
        f"/api/v1/namespaces/{namespace.name}/configmaps/{name}")
    return found


def controller_of(obj: dict[str, Any]) -> str:
    refs = [r for r in obj["metadata"].get("ownerReferences", []) if r.get("controller")]
    return str(refs[0]["name"]) if len(refs) == 1 else f"{len(refs)} controllers"


def test_another_owners_child_is_left_alone_with_a_warning_event(
        cluster: TestCluster, namespace: Namespace) -> None:
    controller = Sharer(namespace.name)
    operator, spy = start(cluster, controller)
    try:
        create_widget(namespace, "first")
        eventually(20, lambda: "first" in controller.applied)
        create_widget(namespace, "second")
        eventually(20, lambda: controller.refused, message="the second apply refused")
        time.sleep(1.0)  # a retry or two, were it retried at once
    finally:
        operator.stop(timeout=10)
    shared = configmap(namespace, "shared")
    assert controller_of(shared) == "first" and shared["data"] == {"from": "first"}
    err = controller.refused[0]
    assert "Widget first" in str(err) and "ConfigMap" in str(err) and "adopt=True" in str(err)
    assert len(controller.refused) == 1, "not retried as if transient"
    applies_by_second = [p for m, p in spy.sent if m == "PATCH" and p.endswith("/shared")]
    assert len(applies_by_second) == 1, "only the first widget's apply was sent"
    events = namespace.list("v1", "Event", fieldSelector="reason=AlreadyOwned")
    assert [e["involvedObject"]["name"] for e in events] == ["second"]
    assert events[0]["type"] == "Warning" and "Widget first" in events[0]["message"]


def test_a_child_controlled_through_another_field_manager_is_refused_too(
        cluster: TestCluster, namespace: Namespace) -> None:
    # Controlled by an object of another kind, written by another field manager.
    configmaps = f"/api/v1/namespaces/{namespace.name}/configmaps"
    holder = namespace.api.request("POST", configmaps, body={
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "holder"}})
    namespace.api.request("POST", configmaps, body={
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "shared", "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": "holder",
            "uid": holder["metadata"]["uid"], "controller": True}]},
        "data": {"from": "someone else"}})
    controller = Sharer(namespace.name, adopt={"adopter"})
    operator, _ = start(cluster, controller)
    try:
        create_widget(namespace, "mine")
        eventually(20, lambda: controller.refused, message="refused, not a 422 loop")
        assert configmap(namespace, "shared")["data"] == {"from": "someone else"}
        # Adoption only when asked for: this one takes it over.
        create_widget(namespace, "adopter")
        eventually(20, lambda: "adopter" in controller.applied)
    finally:
        operator.stop(timeout=10)
    shared = configmap(namespace, "shared")
    assert controller_of(shared) == "adopter" and shared["data"] == {"from": "adopter"}


class Applier(Controller[Widget]):
    resource = Widget
    owns = ("v1/ConfigMap",)

    def __init__(self, namespace: str) -> None:
        super().__init__()
        self.namespace = namespace
        self.passes = 0

    def reconcile(self, obj: Widget, ctx: Context) -> None:
        ctx.apply_owned(obj, {"apiVersion": "v1", "kind": "ConfigMap",
                              "metadata": {"name": obj.name}, "data": {"size": "1"}})
        self.passes += 1


def test_an_unchanged_child_costs_no_apply_and_an_outside_change_is_applied_over(
        cluster: TestCluster, namespace: Namespace) -> None:
    controller = Applier(namespace.name)
    operator, spy = start(cluster, controller)
    child = f"/api/v1/namespaces/{namespace.name}/configmaps/w"
    try:
        create_widget(namespace, "w")
        eventually(20, lambda: controller.passes >= 1)
        time.sleep(0.5)  # the cache catches up with the first apply
        for i in range(5):  # five reconciles of an unchanged child
            passes = controller.passes
            namespace.api.request("PATCH", widget_path(namespace, "w"), body={
                "spec": {"size": 2 + i}}, content_type="application/merge-patch+json")
            eventually(20, lambda p=passes: controller.passes > p)  # type: ignore[misc]
        assert spy.count("PATCH", child) == 1, spy.sent
        # Someone changes the child: the next reconcile's apply goes out and restores it.
        namespace.api.request("PATCH", child, body={"data": {"size": "99"}},
                              content_type="application/merge-patch+json")
        eventually(20, lambda: configmap(namespace, "w")["data"] == {"size": "1"},
                   message="the outside change applied over")
    finally:
        operator.stop(timeout=10)
    assert spy.count("PATCH", child) == 2, spy.sent


class TemplateApplier(Controller[Widget]):
    """Applies the same dict, a module-level template say, on every pass."""

    resource = Widget

    def __init__(self, namespace: str, template: dict[str, Any]) -> None:
        super().__init__()
        self.namespace = namespace
        self.template = template
        self.applied: list[dict[str, Any]] = []

    def reconcile(self, obj: Widget, ctx: Context) -> None:
        self.applied.append(ctx.apply_owned(obj, self.template))


def test_apply_owned_leaves_the_dict_it_was_given_as_it_was(
        cluster: TestCluster, namespace: Namespace) -> None:
    template: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"name": "shared", "labels": {"app": "w"}},
                                "data": {"size": "1"}}
    written = {**template, "metadata": {"name": "shared", "labels": {"app": "w"}},
               "data": {"size": "1"}}  # a copy to compare with, built apart
    controller = TemplateApplier(namespace.name, template)
    operator, _ = start(cluster, controller)
    try:
        create_widget(namespace, "w")
        eventually(20, lambda: len(controller.applied) >= 1)
    finally:
        operator.stop(timeout=10)
    assert template == written  # no namespace, ownerReferences or labels added to it
    child = configmap(namespace, "shared")
    assert child["metadata"]["namespace"] == namespace.name
    assert [r["name"] for r in child["metadata"]["ownerReferences"]] == ["w"]
    assert child["metadata"]["labels"] == {"app": "w"} and child["data"] == {"size": "1"}
    assert controller.applied[0]["metadata"]["uid"] == child["metadata"]["uid"]


# -- ctx.list reads the reconciled object's namespace ---------------------------------------

def test_ctx_list_defaults_to_the_objects_namespace_and_all_only_when_asked(
        cluster: TestCluster, namespace: Namespace) -> None:
    other = cluster.namespace("writes-other")
    try:
        for ns in (namespace, other):
            ns.api.request("POST", f"/api/v1/namespaces/{ns.name}/configmaps", body={
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "listed", "labels": {"writes-test": "1"}}})
        seen: list[tuple[list[str], list[str]]] = []

        class Lister(Controller[Widget]):
            resource = Widget

            def reconcile(self, obj: Widget, ctx: Context) -> None:
                mine = ctx.list("v1/ConfigMap", labels={"writes-test": "1"})
                every = ctx.list("v1/ConfigMap", ALL_NAMESPACES, labels={"writes-test": "1"})
                seen.append(([c["metadata"]["namespace"] for c in mine],
                             sorted(c["metadata"]["namespace"] for c in every)))

        lister = Lister()
        lister.namespace = namespace.name
        operator, _ = start(cluster, lister)
        try:
            create_widget(namespace, "w")
            eventually(20, lambda: seen)
        finally:
            operator.stop(timeout=10)
        assert seen[0] == ([namespace.name], sorted([namespace.name, other.name]))
    finally:
        other.delete()
