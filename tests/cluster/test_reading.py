"""Reads from the cache, watches of related kinds, indexes and event filters — against
the real API server. Each test is one promise of ``ctx.get``/``ctx.list``/``ctx.owned``,
``Controller.watches``, ``Controller.indexes`` or the filters."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from operator_kit import (
    Action,
    Context,
    Controller,
    CustomResource,
    Index,
    Operator,
    Owns,
    Watch,
    filters,
)
from operator_kit.client.transport import Api, api_client
from operator_kit.manifests._deploy import operator_manifests
from operator_kit.runtime.objects import Objects
from operator_kit.testing import Namespace, TestCluster, eventually
from operator_kit.testing.deploy import service_account_kubeconfig

from .conftest import Recorder, Widget, create_widget, widget_path

pytestmark = pytest.mark.usefixtures("widget_kind")


# -- a client-side request log: what actually went to the API server ------------------------

class RequestLog:
    """Records every request an `Api` sends, with the thread that sent it."""

    def __init__(self, api: Api) -> None:
        self.calls: list[tuple[str, str, str]] = []  # (thread, method, path)
        self._lock = threading.Lock()
        send = api.request

        def spy(method: str, path: str, **options: Any) -> Any:
            with self._lock:
                self.calls.append((threading.current_thread().name, method, path))
            return send(method, path, **options)

        api.request = spy  # type: ignore[method-assign]

    def from_reconciles(self, method: str | None = None) -> list[tuple[str, str]]:
        """Requests sent by reconcile workers (not the watches), as (method, path)."""
        with self._lock:
            return [(m, p) for thread, m, p in self.calls if thread.startswith("reconcile-")
                    and (method is None or m == method)]


def operator_with(cluster: TestCluster, *controllers: Controller[Any],
                  name: str = "reading-test") -> tuple[Operator, RequestLog]:
    operator = Operator(name, controllers)
    operator.use(cluster.client)
    return operator, RequestLog(operator.api)


@contextmanager
def started(operator: Operator) -> Iterator[Operator]:
    """Run `operator` (already given its client) for a with-block."""
    operator.start()
    try:
        assert operator.wait_synced(30), "caches did not sync"
        yield operator
    finally:
        operator.stop(timeout=10)


def config_map(ns: Namespace, name: str, data: dict[str, str] | None = None,
               **labels: str) -> dict[str, Any]:
    result: dict[str, Any] = ns.apply({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns.name, "labels": labels},
        "data": data or {}})
    return result


def settle(recorder: Recorder, quiet: float = 1.0) -> int:
    """Wait until nothing has been reconciled for `quiet` seconds; the total count then."""
    while True:
        count = len(recorder.calls)
        time.sleep(quiet)
        if len(recorder.calls) == count:
            return count


# -- owned children from the cache, with read-your-writes ----------------------------------

class ChildrenController(Controller[Widget]):
    """Applies `size` ConfigMaps per Widget and records what ctx.owned returned just after."""

    resource = Widget
    owns = ("v1/ConfigMap",)

    def __init__(self, namespace: str) -> None:
        super().__init__()
        self.namespace = namespace
        self.seen: list[list[str]] = []

    def reconcile(self, obj: Widget, ctx: Context) -> Action:
        for i in range(obj.spec.size):
            ctx.apply_owned(obj, {"apiVersion": "v1", "kind": "ConfigMap",
                                  "metadata": {"name": f"{obj.name}-{i}"}})
        self.seen.append([cm["metadata"]["name"] for cm in ctx.owned(obj, "v1/ConfigMap")])
        return Action.await_change()


def test_owned_children_come_from_the_cache_in_name_order_and_include_this_reconciles_writes(
        cluster: TestCluster, namespace: Namespace) -> None:
    controller = ChildrenController(namespace.name)
    operator, requests = operator_with(cluster, controller)
    config_map(namespace, "unowned")  # same kind, same namespace, no owner: never listed
    with started(operator):
        create_widget(namespace, "w", size=3)
        eventually(20, lambda: controller.seen)
        assert controller.seen[0] == ["w-0", "w-1", "w-2"], \
            "the first reconcile sees the children it applied, before their watch events"
        eventually(20, lambda: len(controller.seen) >= 2)  # the children's echoes reconcile
        assert all(seen == ["w-0", "w-1", "w-2"] for seen in controller.seen)
        assert requests.from_reconciles("GET") == [], "owned reads make no request"


# -- ctx.get / ctx.list: cache for watched kinds, API server for the rest -----------------

@dataclass
class ReaderReport:
    referenced: Any = None
    labelled: list[str] = field(default_factory=list)
    missing: Any = "unset"
    secret: Any = "unset"


class ReaderController(Controller[Widget]):
    """Reads the ConfigMap named by spec.message (a watched kind) and a Secret (not)."""

    resource = Widget
    watches = (Watch("v1/ConfigMap", lambda cm, objects: []),)

    def __init__(self, namespace: str) -> None:
        super().__init__()
        self.namespace = namespace
        self.reports: list[ReaderReport] = []

    def reconcile(self, obj: Widget, ctx: Context) -> None:
        report = ReaderReport()
        report.referenced = ctx.get("v1/ConfigMap", obj.spec.message)
        report.labelled = [cm["metadata"]["name"]
                           for cm in ctx.list("v1/ConfigMap", obj.namespace, {"tier": "a"})]
        report.missing = ctx.get("v1/ConfigMap", "no-such-config-map")
        report.secret = ctx.get("v1/Secret", "no-such-secret")
        self.reports.append(report)


def test_get_and_list_of_a_watched_kind_come_from_the_cache_others_from_the_api(
        cluster: TestCluster, namespace: Namespace) -> None:
    config_map(namespace, "settings", {"mode": "fast"})
    config_map(namespace, "b", tier="a")
    config_map(namespace, "a", tier="a")
    config_map(namespace, "c", tier="b")
    controller = ReaderController(namespace.name)
    operator, requests = operator_with(cluster, controller)
    with started(operator):
        create_referencing(namespace, "w", "settings")
        eventually(20, lambda: controller.reports)
    report = controller.reports[0]
    assert report.referenced["data"] == {"mode": "fast"}
    assert report.labelled == ["a", "b"], "label-selected, in name order"
    assert report.missing is None, "get of an object that does not exist is None"
    assert report.secret is None
    secret_path = f"/api/v1/namespaces/{namespace.name}/secrets/no-such-secret"
    assert requests.from_reconciles("GET") == [("GET", secret_path)], \
        "only the read of the unwatched kind went to the API server"


def test_reads_decode_to_the_kind_form_given(cluster: TestCluster,
                                             namespace: Namespace) -> None:
    from kubernetes.client import V1ConfigMap

    config_map(namespace, "settings", {"mode": "fast"})
    create_widget(namespace, "w", size=4)
    objects = Objects(Api(cluster.client))  # no informers: every read from the API server
    model = objects.get(V1ConfigMap, "settings", namespace.name)
    assert isinstance(model, V1ConfigMap) and model.data == {"mode": "fast"}
    widget = objects.get(Widget, "w", namespace.name)
    assert isinstance(widget, Widget) and widget.spec.size == 4
    assert [w.name for w in objects.list(Widget, namespace.name)] == ["w"]
    raw = objects.get("v1/ConfigMap", "settings", namespace.name)
    assert raw["kind"] == "ConfigMap" and raw["data"] == {"mode": "fast"}


def test_writes_by_kind_create_patch_delete_and_their_dry_runs(
        cluster: TestCluster, namespace: Namespace) -> None:
    from kubernetes.client import V1ConfigMap, V1ObjectMeta

    objects = Objects(Api(cluster.client), field_manager="reading-test")
    dry = objects.create(V1ConfigMap(metadata=V1ObjectMeta(name="m", namespace=namespace.name),
                                     data={"a": "1"}), dry_run=True)
    assert isinstance(dry, V1ConfigMap) and dry.data == {"a": "1"}
    assert namespace.get("v1", "ConfigMap", "m") is None, "a dry run creates nothing"
    objects.create(V1ConfigMap(metadata=V1ObjectMeta(name="m", namespace=namespace.name),
                               data={"a": "1"}))
    objects.patch("v1/ConfigMap", "m", {"data": {"b": "2"}}, namespace.name, dry_run=True)
    assert namespace.get("v1", "ConfigMap", "m")["data"] == {"a": "1"}
    patched = objects.patch("v1/ConfigMap", "m", {"data": {"b": "2"}}, namespace.name)
    assert patched["data"] == {"a": "1", "b": "2"}
    assert objects.delete("v1/ConfigMap", "m", namespace.name, dry_run=True)
    assert namespace.get("v1", "ConfigMap", "m") is not None
    assert objects.delete(V1ConfigMap, "m", namespace.name)
    assert not objects.delete(V1ConfigMap, "m", namespace.name), "already gone: False"
    widget = objects.apply(Widget("applied", Widget.spec_type()(size=2),
                                  namespace=namespace.name))
    assert isinstance(widget, Widget) and widget.uid


# -- watches and indexes ---------------------------------------------------------------------

def widgets_using(cm: dict[str, Any], objects: Objects) -> list[Any]:
    """The Widgets whose spec.message names this ConfigMap (through the index)."""
    meta = cm["metadata"]
    return objects.list(Widget, meta["namespace"], index=("config", meta["name"]))


class ReferencingController(Controller[Widget]):
    """Widgets reference a ConfigMap by name in spec.message; a change to it reconciles them."""

    resource = Widget
    indexes = {"config": Index(Widget, lambda w: w.spec.message)}
    watches = (Watch("v1/ConfigMap", widgets_using),)

    def __init__(self, namespace: str) -> None:
        super().__init__()
        self.namespace = namespace
        self.recorder = Recorder()
        self.index_answers: list[list[str]] = []

    def reconcile(self, obj: Widget, ctx: Context) -> None:
        self.recorder.record(obj.name, time.monotonic())
        self.index_answers.append(
            [w.name for w in ctx.list(Widget, obj.namespace, index=("config", "shared"))])


def create_referencing(ns: Namespace, name: str, config: str) -> None:
    body = Widget(name, Widget.spec_type()(size=1, message=config), namespace=ns.name).to_dict()
    ns.api.request("POST", f"/apis/{Widget.api_version()}/namespaces/{ns.name}/widgets",
                   body=body)


def test_a_change_to_a_referenced_config_map_reconciles_exactly_the_widgets_using_it(
        cluster: TestCluster, namespace: Namespace) -> None:
    config_map(namespace, "shared", {"v": "1"})
    config_map(namespace, "other", {"v": "1"})
    controller = ReferencingController(namespace.name)
    operator, _ = operator_with(cluster, controller)
    with started(operator):
        for name, config in (("w1", "shared"), ("w2", "shared"), ("w3", "other")):
            create_referencing(namespace, name, config)
        eventually(20, lambda: all(controller.recorder.count(n) for n in ("w1", "w2", "w3")))
        settle(controller.recorder)
        before = {n: controller.recorder.count(n) for n in ("w1", "w2", "w3")}
        config_map(namespace, "shared", {"v": "2"})
        eventually(20, lambda: controller.recorder.count("w1") > before["w1"]
                   and controller.recorder.count("w2") > before["w2"])
        settle(controller.recorder)
        after = {n: controller.recorder.count(n) for n in ("w1", "w2", "w3")}
    assert after == {"w1": before["w1"] + 1, "w2": before["w2"] + 1, "w3": before["w3"]}
    assert controller.index_answers[-1] == ["w1", "w2"], "the index lookup, in name order"


def test_a_failing_mapper_is_logged_with_its_name_and_the_object_and_others_go_on(
        cluster: TestCluster, namespace: Namespace, caplog: pytest.LogCaptureFixture) -> None:
    def broken_mapper(cm: dict[str, Any], objects: Objects) -> list[str]:
        raise RuntimeError("mapper bug")

    def mapper_to_missing(cm: dict[str, Any], objects: Objects) -> list[str]:
        return ["no-such-widget"]

    class Mapped(ReferencingController):
        watches = (Watch("v1/ConfigMap", broken_mapper),
                   Watch("v1/ConfigMap", mapper_to_missing),
                   Watch("v1/ConfigMap", widgets_using))

    controller = Mapped(namespace.name)
    operator, _ = operator_with(cluster, controller)
    with caplog.at_level(logging.INFO), started(operator):
        create_referencing(namespace, "w", "cm")
        eventually(20, lambda: controller.recorder.count("w"))
        settle(controller.recorder)
        config_map(namespace, "cm", {"v": "2"})
        eventually(20, lambda: controller.recorder.count("w") >= 2,
                   message="the working mapper still reconciles")
        settle(controller.recorder, 0.5)
    failures = [r.getMessage() for r in caplog.records if "broken_mapper" in r.getMessage()]
    assert failures and all(f"{namespace.name}/cm" in m for m in failures)
    assert not [r for r in caplog.records if "no-such-widget" in r.getMessage()
                and r.levelno >= logging.WARNING], "keys of missing objects: no error spam"


def test_a_kind_the_api_server_does_not_serve_is_refused_at_start(
        cluster: TestCluster, namespace: Namespace) -> None:
    class Misspelled(Controller[Widget]):
        resource = Widget
        owns = ("batch/v1/Jobb",)

    operator = Operator("reading-test", [Misspelled()])
    operator.use(cluster.client)
    with pytest.raises(LookupError, match=r"controller widget: owns: batch/v1/Jobb: .*Jobb"):
        operator.start()

    class NoGroup(Controller[Widget]):
        resource = Widget
        watches = (Watch("nothing.example.com/v1/Thing", lambda obj, objects: []),)

    operator = Operator("reading-test", [NoGroup()])
    operator.use(cluster.client)
    with pytest.raises(LookupError, match=r"watches: nothing\.example\.com/v1/Thing"):
        operator.start()


# -- filters -----------------------------------------------------------------------------------

class Counting(Controller[Widget]):
    resource = Widget
    max_concurrent_reconciles = 4

    def __init__(self, namespace: str, name: str,
                 primary_filters: list[filters.Filter] | None) -> None:
        super().__init__()
        self.namespace = namespace
        self.name = name
        self.filters = primary_filters
        self.recorder = Recorder()

    def reconcile(self, obj: Widget, ctx: Context) -> None:
        self.recorder.record(obj.name, time.monotonic())


def test_label_storm_with_a_generation_filter_reconciles_nothing(
        cluster: TestCluster, namespace: Namespace) -> None:
    count = 1000
    filtered = Counting(namespace.name, "filtered", [filters.generation_changed])
    default = Counting(namespace.name, "default", None)
    operator, _ = operator_with(cluster, filtered, default)
    names = [f"w{i:04}" for i in range(count)]
    with started(operator), ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: create_widget(namespace, n), names))
        eventually(120, lambda: len({n for n, _ in filtered.recorder.calls}) == count
                   and len({n for n, _ in default.recorder.calls}) == count)
        settle(filtered.recorder)
        reconciled = len(filtered.recorder.calls), len(default.recorder.calls)
        list(pool.map(lambda n: namespace.api.request(
            "PATCH", widget_path(namespace, n), body={"metadata": {"labels": {"storm": "1"}}},
            content_type="application/merge-patch+json"), names))
        cache = operator.informers.covering(operator.informers.values()[0].resource,
                                            namespace.name)
        assert cache is not None
        eventually(60, lambda: all(o["metadata"].get("labels", {}).get("storm") == "1"
                                   for o in cache.objects()), message="the storm was seen")
        eventually(60, lambda: len(default.recorder.calls) >= reconciled[1] + count,
                   message="without the filter, each relabel reconciles (the control)")
        settle(filtered.recorder)
    assert len(filtered.recorder.calls) == reconciled[0], \
        "with generation_changed, a label-only change reconciles nothing"
    print(f"\nlabel storm: {count} relabels -> filtered "
          f"{len(filtered.recorder.calls) - reconciled[0]} reconciles, default "
          f"{len(default.recorder.calls) - reconciled[1]}")


def test_deletion_is_reconciled_whatever_the_filters_say(
        cluster: TestCluster, namespace: Namespace) -> None:
    class Finalizing(Counting):
        finalizer = "reading.operator-kit.test/cleanup"
        cleaned: list[str] = []

        def cleanup(self, obj: Widget, ctx: Context) -> None:
            self.cleaned.append(obj.name)

    controller = Finalizing(namespace.name, "finalizing", [lambda event: False])
    operator, _ = operator_with(cluster, controller)
    with started(operator):
        create_widget(namespace, "w", finalizers=["reading.operator-kit.test/cleanup"])
        namespace.api.request("DELETE", widget_path(namespace, "w"))
        eventually(20, lambda: controller.cleaned == ["w"],
                   message="the finalizer ran though the filter drops every event")
        eventually(20, lambda: not cluster.exists(widget_path(namespace, "w")))


@pytest.mark.parametrize(("owned_filter", "change", "reconciles"), [
    (filters.labels_changed, {"metadata": {"labels": {"x": "1"}}}, True),
    (filters.labels_changed, {"data": {"x": "1"}}, False),
    (filters.annotations_changed, {"metadata": {"annotations": {"x": "1"}}}, True),
    (filters.annotations_changed, {"metadata": {"labels": {"x": "1"}}}, False),
    (lambda event: bool(event.object.get("data", {}).get("poke")), {"data": {"poke": "1"}},
     True),
], ids=["labels-pass", "data-dropped", "annotations-pass", "labels-dropped", "callable"])
def test_owned_filters_decide_which_child_changes_reconcile_the_owner(
        cluster: TestCluster, namespace: Namespace, owned_filter: filters.Filter,
        change: dict[str, Any], reconciles: bool) -> None:
    class Filtered(ChildrenController):
        owns = (Owns("v1/ConfigMap", filters=[owned_filter]),)

    controller = Filtered(namespace.name)
    operator, _ = operator_with(cluster, controller)
    with started(operator):
        create_widget(namespace, "w", size=1)
        eventually(20, lambda: controller.seen)
        time.sleep(1.5)
        before = len(controller.seen)
        namespace.api.request("PATCH", f"/api/v1/namespaces/{namespace.name}/configmaps/w-0",
                              body=change, content_type="application/merge-patch+json")
        if reconciles:
            eventually(20, lambda: len(controller.seen) > before)
        else:
            time.sleep(2)
            assert len(controller.seen) == before


# -- metadata only -----------------------------------------------------------------------------

def test_an_owned_kind_cached_as_metadata_only_holds_no_data(
        cluster: TestCluster, namespace: Namespace) -> None:
    class Light(ChildrenController):
        owns = (Owns("v1/ConfigMap", metadata_only=True),)

        def reconcile(self, obj: Widget, ctx: Context) -> Action:
            if not ctx.owned(obj, "v1/ConfigMap"):
                ctx.apply_owned(obj, {"apiVersion": "v1", "kind": "ConfigMap",
                                      "metadata": {"name": f"{obj.name}-0"},
                                      "data": {"big": "x" * 10_000}})
            self.seen.append([cm["metadata"]["name"] for cm in ctx.owned(obj, "v1/ConfigMap")])
            return Action.await_change()

    controller = Light(namespace.name)
    operator, _ = operator_with(cluster, controller)
    with started(operator):
        create_widget(namespace, "w")
        eventually(20, lambda: len(controller.seen) >= 2)
        (informer,) = [i for i in operator.informers.values() if i.metadata_only]
        eventually(20, lambda: informer.get((namespace.name, "w-0")) is not None)
        cached = informer.get((namespace.name, "w-0"))
    assert cached is not None and "data" not in cached
    assert cached["kind"] == "ConfigMap" and cached["metadata"]["ownerReferences"]
    assert controller.seen[-1] == ["w-0"]


# -- the kubebuilder CronJob pattern -----------------------------------------------------------

@dataclass
class CronTabSpec:
    schedule: str = "*/1 * * * *"


@dataclass
class CronTabStatus:
    active: list[str] = field(default_factory=list)


class CronTab(CustomResource):
    group = "reading.operator-kit.test"
    version = "v1"
    kind = "CronTab"
    spec: CronTabSpec
    status: CronTabStatus


@pytest.fixture(scope="module")
def crontab_kind(cluster: TestCluster) -> type[CronTab]:
    cluster.install_crd(CronTab)
    return CronTab


class CronTabController(Controller[CronTab]):
    """As the tutorial writes it: list the owned Jobs, write status, then make the next Job."""

    resource = CronTab
    owns = ("batch/v1/Job",)

    def __init__(self, namespace: str) -> None:
        super().__init__()
        self.namespace = namespace
        self.created_at: dict[str, float] = {}
        self.status_patches = 0

    def reconcile(self, cron: CronTab, ctx: Context) -> None:
        jobs = ctx.owned(cron, "batch/v1/Job")
        active = [job["metadata"]["name"] for job in jobs
                  if not job.get("status", {}).get("completionTime")]
        if active != cron.status.active:
            ctx.patch_status(cron, CronTabStatus(active=active))
            self.status_patches += 1
        if not jobs:
            name = f"{cron.name}-1"
            ctx.create({"apiVersion": "batch/v1", "kind": "Job",
                        "metadata": {"name": name},
                        "spec": {"template": {"spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": "run", "image": "busybox"}]}}}},
                       owner=cron)
            self.created_at[name] = time.monotonic()


def test_the_cronjob_pattern_lists_its_new_job_in_status_within_a_second(
        cluster: TestCluster, namespace: Namespace, crontab_kind: type[CronTab]) -> None:
    controller = CronTabController(namespace.name)
    operator, _ = operator_with(cluster, controller)
    path = f"/apis/{CronTab.api_version()}/namespaces/{namespace.name}/crontabs"
    with started(operator):
        namespace.api.request("POST", path, body=CronTab(
            "nightly", CronTabSpec(), namespace=namespace.name).to_dict())
        eventually(20, lambda: controller.created_at)

        def listed() -> bool:
            status = namespace.api.get(f"{path}/nightly").get("status") or {}
            return bool(status.get("active") == ["nightly-1"])

        eventually(10, listed, interval=0.01)
        converged = time.monotonic() - controller.created_at["nightly-1"]
    print(f"\ncronjob pattern: status lists the new Job {converged * 1000:.0f} ms after "
          "it was created")
    assert converged < 1.0
    assert controller.status_patches == 1, "one status patch: the echo brings the new Job"


# -- RBAC derived for watched kinds, as the generated ServiceAccount ---------------------------

def test_watched_and_owned_kinds_work_as_the_generated_service_account(
        cluster: TestCluster, namespace: Namespace, tmp_path: Path) -> None:
    name = f"reading-rbac-{namespace.name}"[:60]
    declared = Operator(name, [ReferencingController(namespace.name)])
    docs = [d for d in operator_manifests(declared, app="x:operator", namespace=namespace.name,
                                          image="example.com/op:1")
            if d["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
                             "RoleBinding")]
    (role,) = [d for d in docs if d["kind"] == "ClusterRole"]
    assert {"apiGroups": [""], "resources": ["configmaps"],
            "verbs": ["get", "list", "watch"]} in role["rules"], "derived for the watch"
    try:
        for doc in docs:
            cluster.api.apply(doc, field_manager="reading-test")
        kubeconfig = service_account_kubeconfig(cluster, namespace.name, name,
                                                tmp_path / "kubeconfig")
        controller = ReferencingController(namespace.name)
        operator = Operator(name, [controller])
        operator.use(api_client(kubeconfig))  # every request as the ServiceAccount
        config_map(namespace, "shared")
        operator.start()
        try:
            assert operator.wait_synced(30), "its caches sync with the derived RBAC"
            create_referencing(namespace, "w", "shared")
            eventually(20, lambda: controller.recorder.count("w"))
            settle(controller.recorder, 0.5)
            before = controller.recorder.count("w")
            config_map(namespace, "shared", {"v": "2"})
            eventually(20, lambda: controller.recorder.count("w") > before)
        finally:
            operator.stop(timeout=10)
    finally:
        for doc in docs:
            if doc["kind"].startswith("Cluster"):
                try:
                    cluster.api.request("DELETE", _cluster_path(doc))
                except ApiException as err:
                    if err.status != 404:
                        raise


def _cluster_path(doc: dict[str, Any]) -> str:
    plural = {"ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings"}
    return f"/apis/rbac.authorization.k8s.io/v1/{plural[doc['kind']]}/{doc['metadata']['name']}"
