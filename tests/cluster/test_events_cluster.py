"""events.k8s.io/v1 Events against a real API server: every field read back through
events.k8s.io, repeats as one Event whose series count grows (from one replica's threads,
from two replicas, after the Event expired), ``kubectl describe`` showing them, and the
generated RBAC sufficing to record them.

The Event's construction alone is in tests/unit/test_events.py."""

from __future__ import annotations

import datetime
import logging
import re
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from operator_kit import Action, Context, Operator
from operator_kit.client.events import EventRecorder
from operator_kit.client.transport import Api, api_client, request_counts
from operator_kit.localcluster import find_or_build
from operator_kit.testing import Namespace, TestCluster, eventually
from operator_kit.testing.deploy import service_account_kubeconfig

from .conftest import Widget, WidgetController, create_widget, widget_path

pytestmark = pytest.mark.usefixtures("widget_kind")
RunOperator = Callable[..., Operator]

EVENTS = "events.k8s.io/v1"
MICRO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


def regarding(ns: Namespace, uid: str, namespace: str | None = None) -> list[dict[str, Any]]:
    """The events.k8s.io/v1 Events about the object with `uid`."""
    path = f"/apis/{EVENTS}/namespaces/{namespace or ns.name}/events"
    return [e for e in ns.cluster.api.get(path)["items"] if e["regarding"].get("uid") == uid]


def count(event: dict[str, Any]) -> int:
    return int((event.get("series") or {}).get("count") or 1)


def config_map(ns: Namespace, name: str) -> dict[str, Any]:
    created: dict[str, Any] = ns.api.request(
        "POST", f"/api/v1/namespaces/{ns.name}/configmaps",
        body={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}})
    return created


def touch(ns: Namespace, name: str, value: str) -> None:
    """A label change: reconciled again, the note unchanged."""
    ns.api.request("PATCH", widget_path(ns, name), body={"metadata": {"labels": {"t": value}}},
                   content_type="application/merge-patch+json")


class Configuring(WidgetController):
    def reconcile(self, obj: Widget, ctx: Context) -> Action:
        ctx.event(obj, False, "Configured", f"size is {obj.spec.size}", action="Configure")
        return Action.await_change()


def test_an_event_is_read_back_through_events_k8s_io_with_every_field_set(
        namespace: Namespace, run_operator: RunOperator,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "test-operator-7d9c-x2x4q")  # as the Deployment sets it
    run_operator(Configuring(namespace.name))
    before = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=5)
    created = create_widget(namespace, "w", size=2)
    uid = created["metadata"]["uid"]
    [event] = eventually(20, lambda: regarding(namespace, uid))
    assert event["reportingController"] == "test-operator"
    assert event["reportingInstance"] == "test-operator-7d9c-x2x4q"
    assert (event["action"], event["reason"], event["type"]) == ("Configure", "Configured",
                                                                 "Normal")
    assert event["note"] == "size is 2"
    assert event["regarding"] == {
        "apiVersion": Widget.api_version(), "kind": "Widget", "name": "w",
        "namespace": namespace.name, "uid": uid,
        "resourceVersion": event["regarding"]["resourceVersion"]}
    assert MICRO_TIME.fullmatch(event["eventTime"]), event["eventTime"]
    when = datetime.datetime.strptime(event["eventTime"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc)
    assert before <= when <= datetime.datetime.now(datetime.timezone.utc)
    assert "series" not in event, "seen once: no series yet"


def test_a_repeated_event_is_one_object_whose_series_grows_and_kubectl_describe_shows_it(
        cluster: TestCluster, namespace: Namespace, run_operator: RunOperator) -> None:
    run_operator(Configuring(namespace.name))
    uid = create_widget(namespace, "w", size=3)["metadata"]["uid"]
    [first] = eventually(20, lambda: regarding(namespace, uid))
    touch(namespace, "w", "1")
    [second] = eventually(20, lambda: [e for e in regarding(namespace, uid) if count(e) == 2])
    touch(namespace, "w", "2")
    [third] = eventually(20, lambda: [e for e in regarding(namespace, uid) if count(e) == 3])
    assert len(regarding(namespace, uid)) == 1
    assert third["metadata"]["name"] == first["metadata"]["name"]
    assert third["eventTime"] == first["eventTime"], "the first occurrence's time stays"
    assert MICRO_TIME.fullmatch(third["series"]["lastObservedTime"])
    assert third["series"]["lastObservedTime"] >= second["series"]["lastObservedTime"] \
        >= first["eventTime"]

    kubectl = find_or_build(log=False).kubectl
    assert kubectl is not None, "operator_kit.localcluster builds kubectl with the plane"
    described = subprocess.run(
        [str(kubectl), "--kubeconfig", cluster.kubeconfig, "describe", "-n", namespace.name,
         f"{Widget.plural}.{Widget.group}", "w"],
        capture_output=True, text=True, timeout=60, check=True).stdout
    events = described[described.index("Events:"):]
    line = next((row for row in events.splitlines() if "Configured" in row), None)
    assert line is not None, described
    assert line.split()[0] == "Normal" and "size is 3" in line, line
    assert "test-operator" in line, "From: the reportingController"
    assert "(x3 over" in line, "Age: the series"


def test_the_threads_of_one_replica_count_every_repeat_with_one_patch_each(
        cluster: TestCluster, namespace: Namespace) -> None:
    target = config_map(namespace, "target")
    recorder = EventRecorder(cluster.api, "test-operator", "replica-a")

    def record(_: int) -> None:
        recorder.event(target, warning=True, reason="Flapping", note="it flaps",
                       action="Reconcile")

    record(0)
    before = request_counts()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(record, range(40)))
    sent = request_counts() - before
    [event] = regarding(namespace, target["metadata"]["uid"])
    assert count(event) == 41 and event["type"] == "Warning"
    by_verb = {verb: n for (verb, path), n in sent.items() if "/events" in path}
    assert by_verb == {"PATCH": 40}, f"one PATCH a repeat, no read, no conflict: {sent}"


def test_repeats_from_two_replicas_continue_one_series(
        cluster: TestCluster, namespace: Namespace) -> None:
    """Each replica finds the other's Event (a 409 on create) or its own stale (a 409 on
    the guarded patch), reads it again and counts on; the first reporter stays named."""
    target = config_map(namespace, "target")
    a = EventRecorder(cluster.api, "test-operator", "replica-a")
    b = EventRecorder(Api(cluster.client), "test-operator", "replica-b")
    for recorder in (a, b, a, b, b, a):
        recorder.event(target, warning=False, reason="Synced", note="in sync",
                       action="Reconcile")
    [event] = regarding(namespace, target["metadata"]["uid"])
    assert count(event) == 6
    assert event["reportingInstance"] == "replica-a"


def test_an_event_that_expired_starts_over(cluster: TestCluster, namespace: Namespace) -> None:
    target = config_map(namespace, "target")
    recorder = EventRecorder(cluster.api, "test-operator")
    for _ in range(3):
        recorder.event(target, warning=False, reason="Synced", note="in sync",
                       action="Reconcile")
    [event] = regarding(namespace, target["metadata"]["uid"])
    assert count(event) == 3
    # What the API server does after --event-ttl without a repeat.
    cluster.api.request("DELETE", f"/apis/{EVENTS}/namespaces/{namespace.name}/events/"
                        f"{event['metadata']['name']}")
    recorder.event(target, warning=False, reason="Synced", note="in sync", action="Reconcile")
    [again] = regarding(namespace, target["metadata"]["uid"])
    assert "series" not in again and again["metadata"]["uid"] != event["metadata"]["uid"]


def test_an_event_on_a_cluster_scoped_object_is_in_default(
        cluster: TestCluster, namespace: Namespace) -> None:
    ns = client.CoreV1Api(cluster.client).read_namespace(namespace.name).to_dict()
    ns = {"apiVersion": "v1", "kind": "Namespace",
          "metadata": {"name": ns["metadata"]["name"], "uid": ns["metadata"]["uid"]}}
    EventRecorder(cluster.api, "test-operator").event(
        ns, warning=False, reason="Labelled", note="a test's namespace", action="Reconcile")
    [event] = regarding(namespace, ns["metadata"]["uid"], namespace="default")
    cluster.api.request("DELETE", f"/apis/{EVENTS}/namespaces/default/events/"
                        f"{event['metadata']['name']}")
    assert event["regarding"]["kind"] == "Namespace" and "namespace" not in event["regarding"]


def test_the_operator_s_own_rbac_suffices_to_record_and_repeat_events(
        cluster: TestCluster, namespace: Namespace, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    """A ServiceAccount granted exactly what `Operator.rules()` says about Events records
    one, and repeats one another replica created (create, get, patch)."""
    rules = [r for r in Operator("test-operator", [WidgetController(namespace.name)]).rules()
             if "events" in r.resources]
    assert [(r.api_groups, r.verbs) for r in rules] == [
        (("events.k8s.io",), ("create", "get", "patch"))]
    core, rbac = client.CoreV1Api(cluster.client), client.RbacAuthorizationV1Api(cluster.client)
    core.create_namespaced_service_account(namespace.name, {"metadata": {"name": "op"}})
    rbac.create_namespaced_role(namespace.name, {
        "metadata": {"name": "operator"}, "rules": [r.to_dict() for r in rules]})
    rbac.create_namespaced_role_binding(namespace.name, {
        "metadata": {"name": "operator"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "operator"},
        "subjects": [{"kind": "ServiceAccount", "name": "op", "namespace": namespace.name}]})
    kubeconfig = service_account_kubeconfig(cluster, namespace.name, "op", tmp_path / "op")
    target = config_map(namespace, "target")
    EventRecorder(cluster.api, "test-operator", "replica-a").event(
        target, warning=False, reason="Synced", note="in sync", action="Reconcile")
    with api_client(kubeconfig) as restricted, caplog.at_level(logging.WARNING,
                                                                "operator_kit.events"):
        recorder = EventRecorder(Api(restricted), "test-operator", "replica-b")
        for _ in range(2):
            recorder.event(target, warning=False, reason="Synced", note="in sync",
                           action="Reconcile")
            recorder.event(target, warning=True, reason="Drifted", note="out of sync",
                           action="Reconcile")
    assert [r.getMessage() for r in caplog.records] == []
    assert sorted(count(e) for e in regarding(namespace, target["metadata"]["uid"])) == [2, 3]
