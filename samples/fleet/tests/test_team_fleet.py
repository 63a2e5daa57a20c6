"""The Team fleet against real API servers: a hub plane and two member planes.

The hub and the members m1, m2 come from conftest.py. A third member, ``gone``, is a
kubeconfig whose server port nothing listens on: an unreachable cluster.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException
from team_fleet_helpers import settle
from team_operator import Team, TeamSpec, TeamSync

from operator_kit import Context, Operator
from operator_kit.client.events import EventRecorder
from operator_kit.fleet import Fleet, KubeconfigDirectory
from operator_kit.fleet.fanout import HUB_UID, MemberSide, ready_entry, write_entry
from operator_kit.testing import TestCluster, eventually
from operator_kit.testing.faults import TcpProxy

TEAMS = "/apis/example.com/v1/teams"


@pytest.fixture(scope="module")
def teams(cluster: TestCluster, members: dict[str, TestCluster],
          directory: Path) -> Iterator[TeamSync]:
    """The hub operator and its fleet running; the controller."""
    cluster.install_crd(Team)
    settle(members)  # an earlier run's namespaces, still terminating
    controller = TeamSync()
    controller.status_interval = 1.0
    controller.orphan_after = 6.0
    operator = Operator("team-operator", [controller])
    operator.use(cluster.client)
    fleet = Fleet.of(operator, KubeconfigDirectory(directory), poll_interval=0.2)
    operator.start()
    fleet.start()
    try:
        yield controller
        for team in cluster.api.get(TEAMS)["items"]:  # while the operator still runs
            cluster.api.request("DELETE", f"{TEAMS}/{team['metadata']['name']}")
        eventually(60, lambda: not cluster.api.get(TEAMS)["items"],
                   message="every test Team finalized")
        settle(members)
    finally:
        operator.stop()
        fleet.stop()


def create_team(cluster: TestCluster, name: str, **spec: Any) -> dict[str, Any]:
    body = Team(name, TeamSpec(**spec)).to_dict()
    result: dict[str, Any] = cluster.api.request("POST", TEAMS, body=body)
    return result


def team(cluster: TestCluster, name: str) -> dict[str, Any] | None:
    found: dict[str, Any] | None = cluster.api.get_or_none(f"{TEAMS}/{name}")
    return found


def ready(cluster: TestCluster, name: str, clusters: dict[str, str],
          generation: int = 1) -> dict[str, dict[str, Any]]:
    """The Team's Ready conditions by cluster, once they are `clusters` (name: status)
    for `generation`; else an AssertionError for `eventually`."""
    status = (team(cluster, name) or {}).get("status") or {}
    found = {e["name"]: next(c for c in e["conditions"] if c["type"] == "Ready")
             for e in status.get("clusters") or ()}
    assert {n: c["status"] for n, c in found.items()} == clusters, found
    assert all(c.get("observedGeneration") == generation for c in found.values()), found
    return found


def child(member: TestCluster, path: str) -> dict[str, Any] | None:
    found: dict[str, Any] | None = member.api.get_or_none(path)
    if found is not None and found["metadata"].get("deletionTimestamp"):
        return None  # on its way out
    return found


def closed_port_kubeconfig(path: Path, like: str) -> None:
    """A kubeconfig like `like` whose server is a loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    text = Path(like).read_text()
    server = next(line for line in text.splitlines() if "server:" in line).split("server:")[1]
    path.write_text(text.replace(server.strip(), f"https://127.0.0.1:{port}"))


def events(cluster: TestCluster, name: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in cluster.api.get("/apis/events.k8s.io/v1/events")["items"]
            if e.get("regarding", {}).get("name") == name and e.get("reason") == reason]


def test_status_entries_written_at_once_by_many_clusters_are_all_kept(
        cluster: TestCluster) -> None:
    """The design's premise, on the API server: a list-map entry per field manager."""
    cluster.install_crd(Team)
    created = create_team(cluster, "ssa-entries")
    obj = Team.from_dict(created)
    names = [f"c{i}" for i in range(8)]
    start = threading.Barrier(len(names))

    def write(name: str) -> None:
        start.wait()
        for generation in (1, 2, 3):  # each writes its entry three times, all at once
            write_entry(cluster.api, obj, "clusters", name,
                        ready_entry(name, "True", "Applied", f"pass {generation}", 1, None),
                        "ssa-test")

    threads = [threading.Thread(target=write, args=(n,), name=f"write-{n}") for n in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    status = (team(cluster, "ssa-entries") or {})["status"]
    assert sorted(e["name"] for e in status["clusters"]) == names
    assert {e["conditions"][0]["message"] for e in status["clusters"]} == {"pass 3"}
    write_entry(cluster.api, obj, "clusters", "c3", None, "ssa-test")  # c3 leaves
    status = (team(cluster, "ssa-entries") or {})["status"]
    assert sorted(e["name"] for e in status["clusters"]) == [n for n in names if n != "c3"]
    cluster.api.request("DELETE", f"{TEAMS}/ssa-entries")


def test_a_team_gets_its_children_on_every_member_and_a_ready_condition_per_cluster(
        cluster: TestCluster, members: dict[str, TestCluster], teams: TeamSync) -> None:
    created = create_team(cluster, "payments", members=["ana", "bo"], role="view",
                          config={"tier": "gold"})
    conditions = eventually(60, lambda: ready(cluster, "payments",
                                              {"m1": "True", "m2": "True"}),
                            message="Ready on both members")
    assert all(c["reason"] == "Applied" for c in conditions.values())
    for name, member in members.items():
        namespace = member.api.get("/api/v1/namespaces/team-payments")
        assert namespace["metadata"]["labels"][HUB_UID] == created["metadata"]["uid"]
        config = member.api.get("/api/v1/namespaces/team-payments/configmaps/team-config")
        assert config["data"] == {"tier": "gold", "cluster": name}
        binding = member.api.get("/apis/rbac.authorization.k8s.io/v1/namespaces/"
                                 "team-payments/rolebindings/team-members")
        assert binding["roleRef"]["name"] == "view"
        assert [s["name"] for s in binding["subjects"]] == ["ana", "bo"]
    managers = {m["manager"] for m in cluster.api.get(f"{TEAMS}/payments")["metadata"][
        "managedFields"] if m.get("subresource") == "status"}
    assert {"team-operator@m1", "team-operator@m2"} <= managers
    assert (team(cluster, "payments") or {})["metadata"]["finalizers"] == [TeamSync.finalizer]


def test_an_edit_of_the_team_reaches_every_member(
        cluster: TestCluster, members: dict[str, TestCluster], teams: TeamSync) -> None:
    create_team(cluster, "search", members=["cy"], config={"tier": "silver"})
    eventually(60, lambda: ready(cluster, "search", {"m1": "True", "m2": "True"}),
               message="Ready on both members")
    cluster.api.request("PATCH", f"{TEAMS}/search",
                        body={"spec": {"members": ["cy", "dee"], "config": {"tier": "gold"}}},
                        content_type="application/merge-patch+json")
    for name, member in members.items():
        eventually(30, lambda m=member, n=name: m.api.get(
            "/api/v1/namespaces/team-search/configmaps/team-config")["data"]
            == {"tier": "gold", "cluster": n}, message=f"the new config on {name}")
        eventually(30, lambda m=member: [s["name"] for s in m.api.get(
            "/apis/rbac.authorization.k8s.io/v1/namespaces/team-search/rolebindings/"
            "team-members")["subjects"]] == ["cy", "dee"], message=f"the members on {name}")
    eventually(30, lambda: ready(cluster, "search", {"m1": "True", "m2": "True"},
                                 generation=2), message="Ready for generation 2")


def test_children_no_longer_declared_are_deleted_on_every_member(
        cluster: TestCluster, members: dict[str, TestCluster], teams: TeamSync) -> None:
    create_team(cluster, "moving")
    eventually(60, lambda: ready(cluster, "moving", {"m1": "True", "m2": "True"}),
               message="Ready on both members")
    cluster.api.request("PATCH", f"{TEAMS}/moving", body={"spec": {"namespace": "moved"}},
                        content_type="application/merge-patch+json")
    for name, member in members.items():
        eventually(30, lambda m=member: child(m, "/api/v1/namespaces/moved/configmaps/"
                                                 "team-config"), message=f"moved on {name}")
        eventually(30, lambda m=member: child(m, "/api/v1/namespaces/team-moving") is None,
                   message=f"the old namespace deleted on {name}")
    eventually(30, lambda: ready(cluster, "moving", {"m1": "True", "m2": "True"},
                                 generation=2), message="generation 2")


def test_a_child_deleted_by_hand_on_a_member_is_put_back(
        cluster: TestCluster, members: dict[str, TestCluster], teams: TeamSync) -> None:
    create_team(cluster, "ledger", config={"a": "1"})
    eventually(60, lambda: ready(cluster, "ledger", {"m1": "True", "m2": "True"}),
               message="Ready on both members")
    member = members["m2"]
    path = "/api/v1/namespaces/team-ledger/configmaps/team-config"
    before = member.api.get(path)["metadata"]["uid"]
    member.api.request("DELETE", path)
    again = eventually(20, lambda: child(member, path), message="the ConfigMap put back")
    assert again["metadata"]["uid"] != before and again["data"] == {"a": "1", "cluster": "m2"}
    member.api.request("PATCH", path, body={"data": {"a": "changed by hand"}},
                       content_type="application/merge-patch+json")
    eventually(20, lambda: member.api.get(path)["data"]["a"] == "1",
               message="a hand edit undone")


def test_an_unreachable_member_is_reported_and_the_others_stay_in_step(
        cluster: TestCluster, members: dict[str, TestCluster], directory: Path,
        teams: TeamSync) -> None:
    create_team(cluster, "billing", config={"v": "1"})
    eventually(60, lambda: ready(cluster, "billing", {"m1": "True", "m2": "True"}),
               message="Ready on both members")
    closed_port_kubeconfig(directory / "gone.yaml", members["m1"].kubeconfig)
    try:
        conditions = eventually(30, lambda: ready(
            cluster, "billing", {"m1": "True", "m2": "True", "gone": "Unknown"}),
            message="the unreachable member reported")
        assert conditions["gone"]["reason"] == "Unreachable"
        assert "cannot start on cluster gone" in conditions["gone"]["message"]
        cluster.api.request("PATCH", f"{TEAMS}/billing", body={"spec": {"config": {"v": "2"}}},
                            content_type="application/merge-patch+json")
        for name, member in members.items():
            eventually(20, lambda m=member: m.api.get(
                "/api/v1/namespaces/team-billing/configmaps/team-config")["data"]["v"] == "2",
                message=f"the edit on {name} with a member down")
        eventually(20, lambda: ready(cluster, "billing",
                                     {"m1": "True", "m2": "True", "gone": "Unknown"},
                                     generation=2), message="generation 2 reported")
    finally:
        (directory / "gone.yaml").unlink()
    eventually(20, lambda: ready(cluster, "billing", {"m1": "True", "m2": "True"},
                                 generation=2), message="the entry of the cluster that left")


@contextlib.contextmanager
def through_proxy(directory: Path, teams: TeamSync, name: str) -> Iterator[TcpProxy]:
    """Member `name` rejoined through a `TcpProxy` the test controls; afterwards it
    rejoins directly again."""
    direct = (directory / f"{name}.yaml").read_text()
    server = direct.split("server:")[1].split()[0]
    proxy = TcpProxy("127.0.0.1", int(server.rsplit(":", 1)[1]))
    fleet = teams.attached
    assert fleet is not None
    staged = directory.parent / f".{name}.yaml"
    try:
        before = fleet.members()[name]
        staged.write_text(direct.replace(server, f"https://{proxy.address}"))
        staged.rename(directory / f"{name}.yaml")
        eventually(30, lambda: fleet.members().get(name) not in (None, before)
                   and fleet.members()[name].synced(), message=f"{name} through the proxy")
        yield proxy
    finally:
        proxy.close()
        staged.write_text(direct)
        staged.rename(directory / f"{name}.yaml")


def test_a_member_that_goes_down_while_running_is_reported_and_comes_back(
        cluster: TestCluster, members: dict[str, TestCluster], directory: Path,
        teams: TeamSync) -> None:
    create_team(cluster, "audit", config={"v": "1"})
    eventually(60, lambda: ready(cluster, "audit", {"m1": "True", "m2": "True"}),
               message="Ready on both members")
    with through_proxy(directory, teams, "m2") as proxy:
        proxy.close()  # m2's API server unreachable from now on
        conditions = eventually(40, lambda: ready(cluster, "audit",
                                                  {"m1": "True", "m2": "Unknown"}),
                                message="m2 reported unreachable")
        # Said by the hub side ("the watches on cluster m2 have failed for 5s"), or by m2's
        # own workers when a reconcile's request found no server (the connection error).
        assert conditions["m2"]["reason"] == "Unreachable" and conditions["m2"]["message"]
        cluster.api.request("PATCH", f"{TEAMS}/audit", body={"spec": {"config": {"v": "2"}}},
                            content_type="application/merge-patch+json")
        eventually(20, lambda: members["m1"].api.get(
            "/api/v1/namespaces/team-audit/configmaps/team-config")["data"]["v"] == "2",
            message="the edit on m1 while m2 is down")
    eventually(60, lambda: ready(cluster, "audit", {"m1": "True", "m2": "True"},
                                 generation=2), message="m2 back and in step")
    assert members["m2"].api.get(
        "/api/v1/namespaces/team-audit/configmaps/team-config")["data"]["v"] == "2"


def test_a_member_reported_unreachable_that_answers_again_says_ready_again(
        cluster: TestCluster, members: dict[str, TestCluster], teams: TeamSync) -> None:
    """Its API server back without the member rejoining (no change to reconcile): the
    hub side queues the Team on that member, whose workers write Ready again."""
    created = create_team(cluster, "blip")
    eventually(60, lambda: ready(cluster, "blip", {"m1": "True", "m2": "True"}),
               message="Ready on both members")
    write_entry(cluster.api, Team.from_dict(created), "clusters", "m1", ready_entry(
        "m1", "Unknown", "Unreachable", "as if m1 had been down", 1, None), "team-operator")
    conditions = eventually(20, lambda: ready(cluster, "blip", {"m1": "True", "m2": "True"}),
                            message="m1 Ready again")
    assert conditions["m1"]["reason"] == "Applied"


def test_deleting_the_team_deletes_its_children_on_every_member(
        cluster: TestCluster, members: dict[str, TestCluster], teams: TeamSync) -> None:
    create_team(cluster, "archive", config={"k": "v"})
    eventually(60, lambda: ready(cluster, "archive", {"m1": "True", "m2": "True"}),
               message="Ready on both members")
    cluster.api.request("DELETE", f"{TEAMS}/archive")
    eventually(30, lambda: team(cluster, "archive") is None, message="the Team gone")
    for name, member in members.items():
        eventually(30, lambda m=member: child(m, "/api/v1/namespaces/team-archive") is None,
                   message=f"the namespace deleted on {name}")
        assert not member.api.get("/api/v1/configmaps",
                                  labelSelector="fleet.operator-kit.io/hub-name=archive")[
            "items"] or child(member, "/api/v1/namespaces/team-archive") is None


def test_deletion_waits_for_an_unreachable_member_then_gives_up_saying_so(
        cluster: TestCluster, members: dict[str, TestCluster], directory: Path,
        teams: TeamSync) -> None:
    create_team(cluster, "legacy")
    eventually(60, lambda: ready(cluster, "legacy", {"m1": "True", "m2": "True"}),
               message="Ready on both members")
    closed_port_kubeconfig(directory / "gone.yaml", members["m1"].kubeconfig)
    try:
        eventually(30, lambda: ready(cluster, "legacy",
                                     {"m1": "True", "m2": "True", "gone": "Unknown"}),
                   message="the unreachable member reported")
        deleted = time.monotonic()
        cluster.api.request("DELETE", f"{TEAMS}/legacy")
        for name, member in members.items():  # the reachable members clean up at once
            eventually(30, lambda m=member: child(m, "/api/v1/namespaces/team-legacy")
                       is None, message=f"the namespace deleted on {name}")
        waiting = eventually(20, lambda: events(cluster, "legacy", "ChildrenNotDeleted"),
                             message="the Warning naming the unreachable member")
        assert "gone" in waiting[0]["note"]
        assert team(cluster, "legacy") is not None  # the finalizer holds
        eventually(60, lambda: team(cluster, "legacy") is None,
                   message="the finalizer removed after orphan_after")
        assert time.monotonic() - deleted >= teams.orphan_after - 1.0
        orphaned = events(cluster, "legacy", "ChildrenOrphaned")
        assert orphaned and "gone" in orphaned[0]["note"] and HUB_UID in orphaned[0]["note"]
    finally:
        (directory / "gone.yaml").unlink()


def test_children_applied_after_the_team_was_deleted_are_deleted_again(
        cluster: TestCluster, members: dict[str, TestCluster], teams: TeamSync) -> None:
    """A member's reconcile that read the Team before its deletion, and applied after
    the hub side's cleanup ran: the status write (or read) after the applies sees the
    Team gone and deletes what it applied."""
    created = create_team(cluster, "late")
    obj = Team.from_dict(created)
    obj.metadata["finalizers"] = [TeamSync.finalizer]  # as that member read it
    cluster.api.request("DELETE", f"{TEAMS}/late")
    eventually(30, lambda: team(cluster, "late") is None, message="the Team gone")
    member = members["m1"]
    side = MemberSide(teams, "m1", cluster.api, "team-operator")
    ctx = Context(member.api, field_manager="team-operator",
                  recorder=EventRecorder(member.api, "team-operator"), controller="team@m1",
                  cluster="m1")
    try:
        assert side.reconcile(obj, ctx) is None
    except ApiException as err:
        # The running operator's own pass on m1 may have deleted the namespace already:
        # this pass's applies are then refused, and what it did apply is deleted again.
        assert "being terminated" in str(err), err
    assert child(member, "/api/v1/namespaces/team-late") is None  # gone or terminating
    assert member.api.get("/apis/rbac.authorization.k8s.io/v1/rolebindings",
                          labelSelector=f"{HUB_UID}={obj.uid}")["items"] == [] or \
        member.api.get("/api/v1/namespaces/team-late")["status"]["phase"] == "Terminating"


def service_account_kubeconfig(member: TestCluster, namespace: str, path: Path) -> None:
    """A kubeconfig for ServiceAccount `namespace`/team-operator on `member`."""
    answer = member.api.request(
        "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/team-operator/token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
              "spec": {"expirationSeconds": 3600}})
    admin = yaml.safe_load(Path(member.kubeconfig).read_text())
    cluster = admin["clusters"][0]["cluster"]
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "member", "cluster": cluster}],
        "users": [{"name": "sa", "user": {"token": answer["status"]["token"]}}],
        "contexts": [{"name": "sa", "context": {"cluster": "member", "user": "sa"}}]}))


def test_a_member_needs_only_the_member_rules(
        cluster: TestCluster, members: dict[str, TestCluster], directory: Path,
        teams: TeamSync) -> None:
    """m1 is reached as a ServiceAccount bound to `TeamSync.member_rules()` alone."""
    member = members["m1"]
    space = member.namespace("team-operator")
    role = f"team-operator-member-{space.name}"
    direct = (directory / "m1.yaml").read_text()
    fleet = teams.attached
    assert fleet is not None
    try:
        member.api.request("POST", f"/api/v1/namespaces/{space.name}/serviceaccounts",
                           body={"metadata": {"name": "team-operator"}})
        member.api.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", body={
            "metadata": {"name": role},
            "rules": [rule.to_dict() for rule in teams.member_rules()]})
        member.api.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
                           body={"metadata": {"name": role}, "roleRef": {
                               "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                               "name": role}, "subjects": [{
                                   "kind": "ServiceAccount", "name": "team-operator",
                                   "namespace": space.name}]})
        # The role the Team grants: rules the ServiceAccount does not hold itself, so only
        # `bind` lets it make the RoleBinding (escalation prevention).
        member.api.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", body={
            "metadata": {"name": f"{role}-granted"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]})
        before = fleet.members()["m1"]
        staged = directory.parent / ".m1.yaml"
        service_account_kubeconfig(member, space.name, staged)
        limited = TestCluster(str(staged))
        with pytest.raises(ApiException) as refused:  # the identity is limited indeed
            limited.api.get("/api/v1/secrets")
        assert refused.value.status == 403
        staged.rename(directory / "m1.yaml")
        eventually(30, lambda: fleet.members().get("m1") not in (None, before)
                   and fleet.members()["m1"].synced(), message="m1 as the ServiceAccount")
        create_team(cluster, "least", members=["eve"], role=f"{role}-granted")
        eventually(60, lambda: ready(cluster, "least", {"m1": "True", "m2": "True"}),
                   message="Ready on m1 with the member rules only")
        assert member.api.get("/apis/rbac.authorization.k8s.io/v1/namespaces/team-least/"
                              "rolebindings/team-members")["roleRef"]["name"] == f"{role}-granted"
        cluster.api.request("DELETE", f"{TEAMS}/least")
        eventually(30, lambda: team(cluster, "least") is None, message="the Team gone")
        assert child(member, "/api/v1/namespaces/team-least") is None
    finally:
        staged = directory.parent / ".m1.yaml"
        staged.write_text(direct)
        staged.rename(directory / "m1.yaml")
        for path in (f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{role}",
                     f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{role}",
                     f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{role}-granted"):
            if member.api.get_or_none(path) is not None:
                member.api.request("DELETE", path)
        space.delete()
    eventually(30, lambda: fleet.members().get("m1") is not None
               and fleet.members()["m1"].synced(), message="m1 back as the admin")
