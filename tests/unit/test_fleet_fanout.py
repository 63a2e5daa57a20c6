"""FanOut: declarations, child labels, status entries, and the hub and member sides with
recording Apis (no API server; tests on one are in samples/fleet/tests)."""

from __future__ import annotations

import datetime as dt
import threading
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes.client import ApiClient, Configuration
from kubernetes.client.exceptions import ApiException

from operator_kit import Context, CustomResource, LeaderElection, Operator, Sharding
from operator_kit.client.events import EventRecorder
from operator_kit.client.fencing import Fenced, FencedApi
from operator_kit.client.transport import Api
from operator_kit.fleet import Cluster, ClusterStatuses, FanOut, Fleet, Member, StaticClusters
from operator_kit.fleet.fanout import (
    HUB_KIND,
    HUB_NAME,
    HUB_NAMESPACE,
    HUB_UID,
    NOT_RUNNING,
    MemberSide,
    MembersUnreachable,
    child_labels,
    entries,
    hub_key,
    member_problem,
    ready_entry,
    same_entry,
    status_manager,
)
from operator_kit.manifests import crd
from operator_kit.runtime.objects import resource_of
from operator_kit.runtime.runner import ControllerRunner
from operator_kit.runtime.watching import Informers


@dataclass
class CrewSpec:
    size: int = 0


@dataclass
class CrewStatus:
    clusters: ClusterStatuses = field(default_factory=list)


class Crew(CustomResource):
    group = "fanout.operator-kit.test"
    version = "v1"
    kind = "Crew"
    plural = "crews"
    spec: CrewSpec
    status: CrewStatus


@dataclass
class PlainStatus:
    note: str = ""


class Plain(CustomResource):
    group = "fanout.operator-kit.test"
    version = "v1"
    kind = "Plain"
    plural = "plains"
    spec: CrewSpec
    status: PlainStatus


class CrewSync(FanOut[Crew]):
    resource = Crew
    finalizer = "fanout.operator-kit.test/children"
    child_kinds = ("v1/ConfigMap",)

    def children(self, obj: Crew, cluster: str) -> list[dict[str, Any]]:
        return [{"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": obj.name, "namespace": "crews"}}]


def crew(uid: str | None = "u-1", namespace: str | None = "ns") -> Crew:
    obj = Crew("alpha", CrewSpec(), namespace=namespace)
    if uid:
        obj.metadata["uid"] = uid
    return obj


def test_children_are_labelled_with_the_hub_objects_identity() -> None:
    assert child_labels(crew()) == {HUB_UID: "u-1", HUB_NAME: "alpha", HUB_NAMESPACE: "ns",
                                    HUB_KIND: "Crew.fanout.operator-kit.test"}
    assert HUB_NAMESPACE not in child_labels(crew(namespace=None))


def test_a_hub_object_never_read_from_the_api_cannot_label_children() -> None:
    with pytest.raises(ValueError, match="no uid: read it from the API first"):
        child_labels(crew(uid=None))


def test_a_childs_labels_name_its_hub_objects_key() -> None:
    labelled = {"metadata": {"labels": child_labels(crew())}}
    assert hub_key(labelled) == [("ns", "alpha")]
    assert hub_key({"metadata": {"labels": child_labels(crew(namespace=None))}}) == [
        ("", "alpha")]
    assert hub_key({"metadata": {"name": "stray"}}) == []


def test_an_entrys_transition_time_moves_only_when_its_status_changes() -> None:
    t0 = dt.datetime(2026, 1, 1, 12, 0, 0, 123, tzinfo=dt.timezone.utc)
    first = ready_entry("east", "True", "Applied", "3 children applied", 1, None, now=t0)
    assert first == {"name": "east", "conditions": [{
        "type": "Ready", "status": "True", "reason": "Applied",
        "message": "3 children applied", "lastTransitionTime": "2026-01-01T12:00:00Z",
        "observedGeneration": 1}]}
    later = t0 + dt.timedelta(minutes=5)
    same = ready_entry("east", "True", "Applied", "3 children applied", 2, first, now=later)
    assert same["conditions"][0]["lastTransitionTime"] == "2026-01-01T12:00:00Z"
    assert same["conditions"][0]["observedGeneration"] == 2
    failed = ready_entry("east", "False", "ApplyFailed", "boom", 2, same, now=later)
    assert failed["conditions"][0]["lastTransitionTime"] == "2026-01-01T12:05:00Z"


def test_an_entry_equal_to_the_current_one_is_not_written_again() -> None:
    entry = ready_entry("east", "True", "Applied", "ok", 1, None)
    assert same_entry(entry, ready_entry("east", "True", "Applied", "ok", 1, entry))
    assert not same_entry(entry, ready_entry("east", "True", "Applied", "ok", 2, entry))
    assert not same_entry(None, entry)


def test_the_entries_are_read_by_cluster_name() -> None:
    obj = Crew.from_dict({**crew().to_dict(), "status": {"clusters": [
        {"name": "east", "conditions": []}, {"name": "west", "conditions": []}]}})
    assert sorted(entries(obj, "clusters")) == ["east", "west"]
    assert status_manager("team-operator", "east") == "team-operator@east"


def test_the_status_clusters_field_is_a_list_map_keyed_by_name() -> None:
    schema = crd(Crew)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    clusters = schema["properties"]["status"]["properties"]["clusters"]
    assert clusters["x-kubernetes-list-type"] == "map"
    assert clusters["x-kubernetes-list-map-keys"] == ["name"]
    assert clusters["items"]["required"] == ["name"]


def test_a_fan_out_says_what_its_declaration_lacks() -> None:
    class NoFinalizer(CrewSync):
        finalizer = None

    class NoKinds(CrewSync):
        child_kinds = ()

    class OneNamespace(CrewSync):
        namespace = "ns"

    class NoClusters(FanOut[Plain]):
        resource = Plain
        finalizer = "fanout.operator-kit.test/children"
        child_kinds = ("v1/ConfigMap",)

    with pytest.raises(ValueError, match="needs a `finalizer`"):
        NoFinalizer()
    with pytest.raises(ValueError, match="child_kinds must name the kinds"):
        NoKinds()
    with pytest.raises(ValueError, match="leave `namespace` None"):
        OneNamespace()
    with pytest.raises(TypeError, match="`clusters: ClusterStatuses`"):
        NoClusters()


def test_a_fan_out_runs_on_the_hub_and_is_attached_to_the_fleet_of_its_operator() -> None:
    controller = CrewSync()
    operator = Operator("crew-operator", [controller])
    assert controller.fleet is False  # its hub side runs in the operator
    with pytest.raises(RuntimeError, match=r"Fleet.of\(operator, provider\)"):
        controller.hub_routes()
    fleet = Fleet.of(operator, StaticClusters({}))  # before the operator has a client
    assert fleet.controllers == [controller]
    assert controller.attached is fleet
    operator.use(ApiClient())
    assert controller.hub_routes() == {resource_of(Crew): operator.api}


def test_a_fan_out_is_refused_with_sharding_which_would_hide_the_other_replicas_clusters(
        ) -> None:
    """Under Sharding each replica runs only the clusters it holds: a FanOut's hub side
    would take the others for clusters that left (their entries removed, their children
    left behind on deletion), so the combination is refused, saying why."""
    operator = Operator("crew-operator", [CrewSync()], leader_election=LeaderElection(),
                        sharding=Sharding())
    with pytest.raises(ValueError, match=r"FanOut crew cannot run with Sharding yet: "
                                         r".*leave its children"):
        Fleet.of(operator, StaticClusters({}))


def test_a_member_not_started_yet_is_reported_as_such() -> None:
    member = Member(Cluster("east", "/nonexistent/kubeconfig"), [CrewSync()],
                    field_manager="crew-operator", may_reconcile=lambda: True,
                    shutdown_timeout=1.0, watch_stall_timeout=1.0)
    assert member_problem(member) == "not started yet"
    member.problem = None  # as if its controllers ran, before its informers exist
    assert member_problem(member) == "not started yet"


def test_the_member_rules_cover_the_children_and_binding_roles() -> None:
    class TeamLike(CrewSync):
        child_kinds = ("v1/Namespace", "v1/ConfigMap",
                       "rbac.authorization.k8s.io/v1/RoleBinding")

    rules = {(tuple(r.api_groups), tuple(r.resources)): set(r.verbs)
             for r in TeamLike().member_rules()}
    writes = {"get", "list", "watch", "create", "patch", "delete"}
    assert rules[("",), ("configmaps",)] == writes
    assert rules[("",), ("namespaces",)] == writes
    assert rules[("rbac.authorization.k8s.io",), ("rolebindings",)] == writes
    assert rules[("rbac.authorization.k8s.io",), ("clusterroles",)] == {"bind"}
    assert not any("crews" in resources for _, resources in rules)  # the hub kind: hub only
    assert all(r.api_groups != ["rbac.authorization.k8s.io"]
               for r in CrewSync().member_rules())  # no binding among its children


DISCOVERY = {
    "/api/v1": [{"name": "configmaps", "kind": "ConfigMap", "namespaced": True}],
    "/apis/fanout.operator-kit.test/v1": [{"name": "crews", "kind": "Crew",
                                           "namespaced": True}],
}


class Recording(Api):
    """An Api that records the requests it would send, but discovery, instead of sending
    them (each answered with an empty object)."""

    def __init__(self) -> None:
        super().__init__(ApiClient(Configuration()))
        self.sent: list[tuple[str, str]] = []

    def request(self, method: str, path: str, **options: Any) -> Any:
        if method == "GET" and path in DISCOVERY:
            return {"resources": DISCOVERY[path]}
        self.sent.append((method, path))
        return {}


def test_a_member_that_may_no_longer_write_writes_no_entry_on_the_hub_either() -> None:
    """A reconcile whose writes to the member are fenced (past its reconcile_timeout, or
    on a replica that lost the cluster's Lease) has its entry on the hub object refused
    the same way, so a stale "ApplyFailed" never lands over what the retry wrote."""
    member, hub = Recording(), Recording()
    fenced = FencedApi(member, lambda: "this replica no longer holds cluster m1's Lease")
    ctx = Context(fenced, field_manager="crews", controller="crewsync",
                  recorder=EventRecorder(member, "crews"), cluster="m1")
    side = MemberSide(CrewSync(), "m1", hub, "crews")
    obj = crew()
    obj.metadata["finalizers"] = [CrewSync.finalizer]
    with pytest.raises(Fenced, match="no longer holds cluster m1's Lease"):
        side.reconcile(obj, ctx)
    assert [m for m, _p in hub.sent if m != "GET"] == []  # read, never written
    assert [m for m, _p in member.sent if m != "GET"] == []


def test_a_member_that_may_write_writes_its_entry_on_the_hub() -> None:
    """The same reconcile with its fence open: the child applied on the member, the
    entry written on the hub (the fence is the only difference)."""
    member, hub = Recording(), Recording()
    fenced = FencedApi(member, lambda: None)
    ctx = Context(fenced, field_manager="crews", controller="crewsync",
                  recorder=EventRecorder(member, "crews"), cluster="m1")
    side = MemberSide(CrewSync(), "m1", hub, "crews")
    obj = crew()
    obj.metadata["finalizers"] = [CrewSync.finalizer]
    side.reconcile(obj, ctx)
    assert ("PATCH", "/api/v1/namespaces/crews/configmaps/alpha") in member.sent
    assert [m for m, p in hub.sent if p.endswith("/crews/alpha/status")] == ["PATCH"]


class Writes(Recording):
    """A Recording that keeps each request's body too."""

    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[tuple[str, str, Any]] = []

    def request(self, method: str, path: str, **options: Any) -> Any:
        self.bodies.append((method, path, options.get("body")))
        answer = super().request(method, path, **options)
        return {"metadata": {"resourceVersion": "1"}} if method == "POST" else answer

    def entries_written(self) -> list[tuple[str, Any]]:
        """(field manager's cluster, the clusters list written) for each status apply."""
        return [(path, (body.get("status") or {}).get("clusters"))
                for method, path, body in self.bodies
                if method == "PATCH" and path.endswith("/status")]


def read_crew(entries: list[dict[str, Any]], deleting: bool = False) -> Crew:
    meta: dict[str, Any] = {"name": "alpha", "namespace": "ns", "uid": "u-1",
                            "generation": 1, "finalizers": [CrewSync.finalizer]}
    if deleting:
        meta["deletionTimestamp"] = dt.datetime.now(dt.timezone.utc).strftime(
            "%Y-%m-%dT%H:%M:%SZ")
    return Crew.from_dict({"apiVersion": Crew.api_version(), "kind": "Crew", "metadata": meta,
                           "spec": {"size": 1}, "status": {"clusters": entries}})


def hub_side(provider: StaticClusters, *, answered: bool) -> tuple[CrewSync, Context, Writes]:
    """A FanOut's hub side on a fleet whose members have not started (this replica does
    not lead yet: nothing joins), after the provider's first answer or before it."""
    controller = CrewSync()
    hub = Writes()
    fleet = Fleet("crew-operator", [controller], provider, may_reconcile=lambda: False)
    if answered:
        fleet.sync()
    assert fleet.members() == {}
    controller.attach(fleet, lambda: hub)
    ctx = Context(hub, field_manager="crew-operator", controller="crew",
                  recorder=EventRecorder(hub, "crew-operator"))
    return controller, ctx, hub


APPLIED = ready_entry("east", "True", "Applied", "1 children applied", 1, None)


def test_before_the_provider_answers_no_entry_is_removed_and_no_deletion_completes() -> None:
    """Right after a start or a failover the fleet runs no member yet: that says nothing
    about which clusters exist, so nothing is taken for a cluster that left."""
    controller, ctx, hub = hub_side(StaticClusters({"east": "/nonexistent"}), answered=False)
    action = controller.reconcile(read_crew([APPLIED]), ctx)
    assert action is not None and action.requeue_after is not None
    assert hub.entries_written() == []
    with pytest.raises(MembersUnreachable, match="cluster provider has not answered yet"):
        controller.cleanup(read_crew([APPLIED], deleting=True), ctx)
    assert [m for m, _p, _b in hub.bodies if m == "DELETE"] == []


def test_a_named_cluster_that_runs_no_member_is_unreachable_not_gone() -> None:
    """A cluster still joining, or rejoining after its kubeconfig changed, keeps its entry
    (said Unreachable) and its children keep the hub object's finalizer."""
    controller, ctx, hub = hub_side(StaticClusters({"east": "/nonexistent"}), answered=True)
    controller.reconcile(read_crew([APPLIED]), ctx)
    [(_path, written)] = hub.entries_written()
    assert written is not None and written[0]["name"] == "east"
    assert written[0]["conditions"][0]["reason"] == "Unreachable"
    assert written[0]["conditions"][0]["message"] == NOT_RUNNING
    with pytest.raises(MembersUnreachable, match="east: not running here yet"):
        controller.cleanup(read_crew([APPLIED], deleting=True), ctx)


def test_a_cluster_the_provider_no_longer_names_has_its_entry_removed() -> None:
    controller, ctx, hub = hub_side(StaticClusters({}), answered=True)
    controller.reconcile(read_crew([APPLIED]), ctx)
    assert hub.entries_written() == [
        ("/apis/fanout.operator-kit.test/v1/namespaces/ns/crews/alpha/status", None)]
    controller.cleanup(read_crew([APPLIED], deleting=True), ctx)  # nothing left to wait for


class Serving(Recording):
    """A Recording that answers GETs of `objects` (path -> object) and 404 for others."""

    def __init__(self, objects: dict[str, Any]) -> None:
        super().__init__()
        self.objects = objects

    def request(self, method: str, path: str, **options: Any) -> Any:
        answer = super().request(method, path, **options)
        if method == "GET" and path not in DISCOVERY:
            if path not in self.objects:
                raise ApiException(status=404, reason="Not Found")
            return self.objects[path]
        return answer


def test_a_member_asks_the_hub_whether_its_hub_object_is_gone() -> None:
    """A member's child apply refused with 404 (its namespace missing, say) is a failure
    to retry: the hub object still exists. Asked of the member's API server, which does
    not serve the hub kind, the 404 read as 'deleted meanwhile', and the key was dropped."""
    path = resource_of(Crew).path("ns", "alpha")
    hub = Serving({path: {"metadata": {"name": "alpha", "uid": "u-1"}}})
    member = Serving({})
    stop = threading.Event()
    informers = Informers(member, stop, cluster="m1", elsewhere={resource_of(Crew): hub})
    side = MemberSide(CrewSync(), "m1", hub, "crews", informers)
    runner = ControllerRunner(side, member, field_manager="crews",
                              recorder=EventRecorder(member, "crews"), stop=stop,
                              informers=informers, cluster="m1")
    obj = crew()
    assert runner._gone(obj) is False
    hub.objects.clear()
    assert runner._gone(obj) is True
    assert [p for m, p in member.sent if m == "GET" and p == path] == []


class Refusing(Serving):
    """A member whose API server refuses every apply (404: the namespace is missing)."""

    def request(self, method: str, path: str, **options: Any) -> Any:
        if method == "PATCH":
            self.sent.append((method, path))
            raise ApiException(status=404, reason="Not Found")
        return super().request(method, path, **options)


def test_a_failed_pass_still_deletes_what_it_applied_when_the_hub_object_is_gone() -> None:
    """The hub side's cleanup may run while a member's pass applies children; when the
    pass then fails, its retry finds the hub object gone and does nothing — so the failed
    pass itself looks at the hub object and deletes its children again."""
    hub = Serving({})  # the hub object is gone (its cleanup ran, the finalizer removed)
    member = Refusing({"/api/v1/configmaps": {"items": [
        {"metadata": {"name": "alpha", "namespace": "crews"}}]}})
    ctx = Context(member, field_manager="crews", controller="crewsync",
                  recorder=EventRecorder(member, "crews"), cluster="m1")
    side = MemberSide(CrewSync(), "m1", hub, "crews")
    obj = crew()
    obj.metadata["finalizers"] = [CrewSync.finalizer]
    with pytest.raises(ApiException):
        side.reconcile(obj, ctx)
    assert ("DELETE", "/api/v1/namespaces/crews/configmaps/alpha") in member.sent
