"""Fleets against real API servers: three local planes as member clusters.

The hub's plane (OPERATOR_KIT_TEST_KUBECONFIG) is one member; two more are started
under a temporary folder for the session and stopped after it — or, to reuse planes
already running, name their kubeconfigs in OPERATOR_KIT_TEST_FLEET_KUBECONFIGS
(``a:b``, as KUBECONFIG)."""

from __future__ import annotations

import logging
import secrets
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException
from prometheus_client import REGISTRY

from operator_kit import Action, Context, Controller, CustomResource, Operator
from operator_kit.client.transport import Api, api_client
from operator_kit.fleet import Fleet, KubeconfigDirectory, KubeconfigSecrets, StaticClusters
from operator_kit.manifests import fleet_member_manifests
from operator_kit.manifests._fleet import hub_access_documents
from operator_kit.testing import Namespace, TestCluster, eventually
from operator_kit.testing.deploy import service_account_kubeconfig
from operator_kit.testing.faults import TcpProxy
from operator_kit.testing.kubeconfigs import (
    embedded_kubeconfig,
    kubeconfig_secret,
    token_kubeconfig,
)


@dataclass
class ParcelSpec:
    note: str = ""


class Parcel(CustomResource):
    group = "fleet.operator-kit.test"
    version = "v1"
    kind = "Parcel"
    plural = "parcels"
    spec: ParcelSpec


class ParcelSync(Controller[Parcel]):
    """Writes a ConfigMap per Parcel on the Parcel's own cluster, saying which it is."""

    resource = Parcel
    owns = ["v1/ConfigMap"]
    fleet = True

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str | None, str, str, float]] = []
        self.lock = threading.Lock()

    def reconcile(self, obj: Parcel, ctx: Context) -> Action | None:
        source = ctx.get("v1/ConfigMap", "parcel-source")  # read on the same cluster
        data = {"cluster": str(ctx.cluster), "note": obj.spec.note}
        if source is not None:
            data["source"] = source["data"]["where"]
        ctx.apply_owned(obj, {"apiVersion": "v1", "kind": "ConfigMap",
                              "metadata": {"name": f"parcel-{obj.name}"}, "data": data})
        with self.lock:
            self.seen.append((ctx.cluster, obj.namespace or "", obj.name, time.monotonic()))
        return None

    def reconciled_at(self, cluster: str, namespace: str, name: str) -> float | None:
        with self.lock:
            return next((at for c, ns, n, at in self.seen
                         if (c, ns, n) == (cluster, namespace, name)), None)


@dataclass
class Member:
    name: str
    cluster: TestCluster


@pytest.fixture(scope="session")
def members(fleet_clusters: list[TestCluster]) -> list[Member]:
    """Three member clusters: the hub's plane and two more, each with the Parcel CRD."""
    found = [Member(f"m{i}", cluster) for i, cluster in enumerate(fleet_clusters)]
    for member in found:
        member.cluster.install_crd(Parcel)
    return found


@pytest.fixture
def spaces(members: list[Member]) -> Iterator[dict[str, Namespace]]:
    """A fresh namespace on each member, by member name."""
    made = {m.name: m.cluster.namespace("fleet") for m in members}
    yield made
    for space in made.values():
        space.delete()


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    folder = tmp_path / "clusters"
    folder.mkdir()
    return folder


def add(directory: Path, member: Member) -> None:
    """Join `member` the way a user does: its kubeconfig file appears in the folder."""
    staged = directory.parent / f".{member.name}.yaml"
    shutil.copy(member.cluster.kubeconfig, staged)
    staged.rename(directory / f"{member.name}.yaml")  # whole, at once


def create_parcel(member: Member, space: Namespace, name: str, note: str = "") -> None:
    member.cluster.api.request(
        "POST", f"/apis/{Parcel.api_version()}/namespaces/{space.name}/parcels",
        body={"apiVersion": Parcel.api_version(), "kind": "Parcel",
              "metadata": {"name": name}, "spec": {"note": note}})


def config_map(member: Member, space: Namespace, name: str) -> dict[str, Any] | None:
    try:
        return dict(member.cluster.api.get(
            f"/api/v1/namespaces/{space.name}/configmaps/parcel-{name}"))
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def closed_port_kubeconfig(path: Path, like: str) -> None:
    """A kubeconfig like `like` whose server is a loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    text = Path(like).read_text()
    server = next(line for line in text.splitlines() if "server:" in line).split("server:")[1]
    path.write_text(text.replace(server.strip(), f"https://127.0.0.1:{port}"))


@pytest.fixture
def fleet(directory: Path) -> Iterator[tuple[Fleet, ParcelSync]]:
    controller = ParcelSync()
    running = Fleet("fleet-test", [controller], KubeconfigDirectory(directory),
                    poll_interval=0.2, shutdown_timeout=10.0)
    running.start()
    yield running, controller
    running.stop()


def test_a_fleet_controller_reconciles_each_members_objects_on_that_member(
        members: list[Member], spaces: dict[str, Namespace], directory: Path,
        fleet: tuple[Fleet, ParcelSync]) -> None:
    running, _ = fleet
    for member in members:
        member.cluster.api.request(
            "POST", f"/api/v1/namespaces/{spaces[member.name].name}/configmaps",
            body={"metadata": {"name": "parcel-source"},
                  "data": {"where": f"read on {member.name}"}})
        create_parcel(member, spaces[member.name], "box", note=f"for {member.name}")
        add(directory, member)
    for member in members:
        made = eventually(30, lambda m=member: config_map(m, spaces[m.name], "box"),
                          message=f"the ConfigMap on {member.name}")
        assert made["data"] == {"cluster": member.name, "note": f"for {member.name}",
                                "source": f"read on {member.name}"}
        assert made["metadata"]["ownerReferences"][0]["kind"] == "Parcel"
    assert sorted(running.members()) == [m.name for m in members]


def test_the_hub_operator_leaves_fleet_controllers_to_the_fleet(
        members: list[Member], spaces: dict[str, Namespace], directory: Path) -> None:
    hub, other = members[0], members[1]
    operator = Operator("fleet-hub", [ParcelSync()])
    operator.use(hub.cluster.client)
    fleet = Fleet.of(operator, KubeconfigDirectory(directory), poll_interval=0.2)
    operator.start()
    fleet.start()
    try:
        create_parcel(hub, spaces[hub.name], "hub-only")
        create_parcel(other, spaces[other.name], "member")
        add(directory, other)
        closed_port_kubeconfig(directory / "gone.yaml", other.cluster.kubeconfig)
        eventually(30, lambda: config_map(other, spaces[other.name], "member"),
                   message="the member's ConfigMap")
        assert "gone" in fleet.members() and not fleet.members()["gone"].synced()
        assert operator.ready()  # an unreachable member does not make the hub unready
        time.sleep(1.0)  # the hub had every chance to reconcile its Parcel
        assert config_map(hub, spaces[hub.name], "hub-only") is None
    finally:
        operator.stop()  # the fleet follows
        eventually(10, lambda: fleet.members() == {}, message="the fleet stopping with it")
        fleet.stop()


def test_a_cluster_joins_when_its_kubeconfig_is_added_and_leaves_when_removed(
        members: list[Member], spaces: dict[str, Namespace], directory: Path,
        fleet: tuple[Fleet, ParcelSync]) -> None:
    running, controller = fleet
    first, late = members[1], members[2]
    add(directory, first)
    create_parcel(late, spaces[late.name], "early")  # there before the cluster joins
    eventually(30, lambda: first.name in running.members()
               and running.members()[first.name].synced(), message="the first member")
    added = time.monotonic()
    add(directory, late)
    eventually(10, lambda: config_map(late, spaces[late.name], "early"),
               message="the joining member's object reconciled")
    at = controller.reconciled_at(late.name, spaces[late.name].name, "early")
    assert at is not None and at - added < 10
    member = running.members()[late.name]
    assert any(t.name.startswith(f"reconcile-parcel@{late.name}-")
               for t in threading.enumerate())

    (directory / f"{late.name}.yaml").unlink()
    eventually(10, lambda: late.name not in running.members(), message="the member leaving")
    eventually(15, lambda: not member.alive(), message="the member's threads joined")
    assert member.threads() == []
    assert not any(t.name.startswith(f"reconcile-parcel@{late.name}-")
                   for t in threading.enumerate())
    create_parcel(late, spaces[late.name], "after-leaving")
    create_parcel(first, spaces[first.name], "still-here")
    eventually(10, lambda: config_map(first, spaces[first.name], "still-here"),
               message="the remaining member still reconciled")
    assert config_map(late, spaces[late.name], "after-leaving") is None


def test_an_unreachable_member_does_not_delay_the_others(
        members: list[Member], spaces: dict[str, Namespace], directory: Path,
        fleet: tuple[Fleet, ParcelSync]) -> None:
    running, controller = fleet
    healthy = members[1]
    closed_port_kubeconfig(directory / "gone.yaml", healthy.cluster.kubeconfig)
    add(directory, healthy)
    eventually(30, lambda: healthy.name in running.members()
               and running.members()[healthy.name].synced(), message="the healthy member")
    for i in range(5):
        created = time.monotonic()
        create_parcel(healthy, spaces[healthy.name], f"p{i}")
        eventually(5, lambda i=i: controller.reconciled_at(
            healthy.name, spaces[healthy.name].name, f"p{i}"), message=f"p{i} reconciled")
        at = controller.reconciled_at(healthy.name, spaces[healthy.name].name, f"p{i}")
        assert at is not None and at - created < 2.0
    gone = running.members()["gone"]
    assert not gone.synced() and gone.alive()
    # Leaving works for it too, without waiting for the cluster to answer.
    (directory / "gone.yaml").unlink()
    eventually(10, lambda: "gone" not in running.members(), message="the unreachable leaving")
    eventually(15, lambda: not gone.alive(), message="the unreachable member's threads ending")


class CrateSync(Controller[Parcel]):
    """A fleet controller owning a kind that no cluster here serves."""

    resource = Parcel
    owns = ["nowhere.operator-kit.test/v1/Crate"]
    fleet = True
    name = "crates"

    def reconcile(self, obj: Parcel, ctx: Context) -> Action | None:
        return None


def test_a_member_without_a_kind_says_which_and_the_hub_starts_anyway(
        members: list[Member]) -> None:
    hub, other = members[0], members[1]
    operator = Operator("fleet-hub-kinds", [CrateSync()])
    operator.use(hub.cluster.client)
    fleet = Fleet.of(operator, StaticClusters({other.name: other.cluster.kubeconfig}))
    operator.start()  # the hub does not check its fleet controllers' kinds
    fleet.start()
    try:
        member = eventually(10, lambda: fleet.members().get(other.name),
                            message="the member")
        eventually(10, lambda: member.problem and "Crate" in member.problem,
                   message="the member's problem naming the kind")
        assert "controller crates@m1: owns" in str(member.problem)
        assert not member.running() and member.alive()  # retrying with backoff
    finally:
        operator.stop()
        fleet.stop()
    assert not member.alive()


def test_a_member_that_goes_down_while_running_delays_no_other_and_still_leaves(
        members: list[Member], spaces: dict[str, Namespace], directory: Path,
        fleet: tuple[Fleet, ParcelSync]) -> None:
    running, controller = fleet
    healthy, failing = members[1], members[2]
    server = Path(failing.cluster.kubeconfig).read_text().split("server:")[1].split()[0]
    proxy = TcpProxy("127.0.0.1", int(server.rsplit(":", 1)[1]))
    try:
        text = Path(failing.cluster.kubeconfig).read_text().replace(
            server, f"https://{proxy.address}")
        (directory / f"{failing.name}.yaml").write_text(text)
        add(directory, healthy)
        eventually(30, lambda: all(n in running.members() and running.members()[n].synced()
                                   for n in (healthy.name, failing.name)),
                   message="both members synced")
        create_parcel(failing, spaces[failing.name], "before")
        eventually(10, lambda: config_map(failing, spaces[failing.name], "before"),
                   message="the failing member working before it fails")
        proxy.close()  # its API server unreachable: watches reset, connections refused
        for i in range(5):
            created = time.monotonic()
            create_parcel(healthy, spaces[healthy.name], f"d{i}")
            eventually(5, lambda i=i: controller.reconciled_at(
                healthy.name, spaces[healthy.name].name, f"d{i}"), message=f"d{i}")
            at = controller.reconciled_at(healthy.name, spaces[healthy.name].name, f"d{i}")
            assert at is not None and at - created < 2.0
        member = running.members()[failing.name]
        (directory / f"{failing.name}.yaml").unlink()
        eventually(15, lambda: not member.alive(), message="the failed member's threads ended")
        assert member.threads() == []
    finally:
        proxy.close()


def reconciled(cluster: str) -> float | None:
    """The fleet controller's successful reconciles on `cluster` (None: no series)."""
    return REGISTRY.get_sample_value("controller_runtime_reconcile_total", {
        "controller": "parcel", "cluster": cluster, "result": "success"})


def server_of(member: Member) -> str:
    return str(member.cluster.client.configuration.host)


def test_cluster_api_kubeconfig_secrets_in_the_hub_join_rejoin_and_leave(
        members: list[Member], spaces: dict[str, Namespace], tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    """The hub reads the Secrets as the ServiceAccount its manifests bind to the Role
    ``<operator>-fleet`` (and nothing else): a Secret created joins its cluster, changed
    rejoins it, deleted makes it leave; no kubeconfig content reaches the logs."""
    hub, first, second = members
    capi = hub.cluster.namespace("capi")
    operator = Operator(f"fleet-secrets-{secrets.token_hex(2)}", [ParcelSync()],
                        shutdown_timeout=10.0)
    Fleet.of(operator, KubeconfigSecrets(namespace=capi.name))  # for its manifests
    runs_in = spaces[hub.name].name
    hub.cluster.api.request("POST", f"/api/v1/namespaces/{runs_in}/serviceaccounts",
                            body={"metadata": {"name": operator.name}})
    for doc in hub_access_documents(operator, runs_in):
        hub.cluster.api.apply(doc, field_manager="fleet-test")
    as_operator = api_client(service_account_kubeconfig(
        hub.cluster, runs_in, operator.name, tmp_path / "operator.kubeconfig"))
    provider = KubeconfigSecrets(namespace=capi.name, api=Api(as_operator))
    fleet = Fleet.of(operator, provider, poll_interval=0.2)
    first_config, second_config = (embedded_kubeconfig(m.cluster.kubeconfig)
                                   for m in (first, second))
    credentials = [u["user"]["client-key-data"] for u in first_config["users"]]
    for member in (first, second):
        create_parcel(member, spaces[member.name], "box")
    secret_path = f"/api/v1/namespaces/{capi.name}/secrets"
    try:
        with caplog.at_level(logging.DEBUG, logger="operator_kit"):
            operator.use(hub.cluster.client)
            operator.start()  # and its fleet: its only controller is the fleet's
            hub.cluster.api.request("POST", secret_path, body={  # not a member's
                "metadata": {"name": "workload-ca", "labels": {
                    "cluster.x-k8s.io/cluster-name": "workload"}}, "data": {"tls.crt": ""}})
            hub.cluster.api.request("POST", secret_path, body=kubeconfig_secret(
                capi.name, "workload", first_config))
            made = eventually(30, lambda: config_map(first, spaces[first.name], "box"),
                              message="the Secret's cluster joining")
            assert made["data"]["cluster"] == "workload"
            joined = fleet.members()["workload"]
            assert (reconciled("workload") or 0) >= 1  # its own series, by cluster
            assert joined.cluster.kubeconfig == f"Secret {capi.name}/workload-kubeconfig"

            hub.cluster.api.apply(kubeconfig_secret(capi.name, "workload", second_config),
                                  field_manager="fleet-test")  # the cluster's kubeconfig changed
            eventually(30, lambda: config_map(second, spaces[second.name], "box"),
                       message="the changed Secret's cluster rejoining")
            eventually(15, lambda: not joined.alive(), message="the old member's threads")
            assert list(fleet.members()) == ["workload"] and provider.problems == []

            hub.cluster.api.request("DELETE", f"{secret_path}/workload-kubeconfig")
            eventually(15, lambda: fleet.members() == {}, message="the cluster leaving")
            eventually(15, lambda: reconciled("workload") is None,
                       message="its series dropped once it has left")
    finally:
        operator.stop()  # and its fleet, joined
        as_operator.close()
        capi.delete()
    assert not any(t.name.startswith(("fleet-", "reconcile-parcel@")) and t.is_alive()
                   for t in threading.enumerate())
    assert not any(t.name == "watch-secrets" for t in threading.enumerate())  # closed
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "workload" in logged  # the log said what happened ...
    assert not any(c in logged or c[:40] in logged for c in credentials)  # ... not how


def test_a_member_runs_with_the_service_account_fleet_member_makes_and_nothing_more(
        members: list[Member], spaces: dict[str, Namespace], tmp_path: Path) -> None:
    member = members[1]
    space = spaces[member.name]
    operator = Operator(f"fleet-member-{secrets.token_hex(2)}", [ParcelSync()])
    docs = fleet_member_manifests(operator, namespace=space.name, namespace_document=False)
    try:
        for doc in docs:  # as kubectl apply would, on the member
            member.cluster.api.apply(doc, field_manager="fleet-test")
        config = eventually(30, lambda: token_kubeconfig(
            member.cluster.api, space.name, f"{operator.name}-fleet-token", server_of(member)),
            message="the token controller filling the token Secret")
        path = tmp_path / "member.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        member.cluster.api.request(
            "POST", f"/api/v1/namespaces/{space.name}/configmaps",
            body={"metadata": {"name": "parcel-source"}, "data": {"where": "member"}})
        create_parcel(member, space, "with-sa", note="rbac")
        fleet = Fleet("fleet-member-test", [ParcelSync()],
                      StaticClusters({member.name: str(path)}), poll_interval=0.2,
                      shutdown_timeout=10.0)
        fleet.start()
        try:
            made = eventually(30, lambda: config_map(member, space, "with-sa"),
                              message="the reconcile as the ServiceAccount")
            assert made["data"] == {"cluster": member.name, "note": "rbac", "source": "member"}
            assert fleet.members()[member.name].problem is None
        finally:
            fleet.stop()
        with api_client(str(path)) as restricted:  # outside its rules: refused
            api = Api(restricted)
            for method, where, body in (
                    ("POST", f"/api/v1/namespaces/{space.name}/secrets",
                     {"metadata": {"name": "x"}}),
                    ("GET", f"/api/v1/namespaces/{space.name}/secrets", None),
                    ("POST", f"/apis/apps/v1/namespaces/{space.name}/deployments",
                     {"metadata": {"name": "x"}})):
                with pytest.raises(ApiException) as refused:
                    api.request(method, where, body=body)
                assert refused.value.status == 403, (method, where)
    finally:
        for doc in docs:
            if doc["kind"] in ("ClusterRole", "ClusterRoleBinding"):
                member.cluster.api.request(
                    "DELETE", f"/apis/rbac.authorization.k8s.io/v1/"
                    f"{doc['kind'].lower()}s/{doc['metadata']['name']}")
