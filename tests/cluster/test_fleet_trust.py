"""Issue 38 R1 and R6 against the real API server: a tenant's kubeconfig Secret cannot run
code in the operator or send it a credential, and a member whose credentials fail says so.

Each attack is a Cluster API kubeconfig Secret in the hub, read by `KubeconfigSecrets`
as the operator's ServiceAccount through the generated ``<operator>-fleet`` Role. Refused:
no command runs (the marker file it would create does not exist), no connection reaches
the loopback listener the test owns (where the token or the proxy request would go), the
cluster does not join, and the problem — one line naming the Secret, the field and
``--insecure-kubeconfig=<category>`` — is in `provider.problems`, in a Warning Event on
the Secret and in ``operator_kit_fleet_kubeconfigs_refused``. With the category allowed
the same Secret does what it says (the listener hears the token; the command runs; the
cluster joins): proof that each refusal is what stopped it.
"""

from __future__ import annotations

import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY

from operator_kit import Action, Context, Controller, CustomResource, Operator, cli
from operator_kit.client.transport import Api, api_client
from operator_kit.fleet import Fleet, KubeconfigSecrets, StaticClusters
from operator_kit.fleet.supervisor import Member
from operator_kit.manifests._fleet import hub_access_documents
from operator_kit.settings import Settings
from operator_kit.testing import Namespace, TestCluster, eventually
from operator_kit.testing.deploy import service_account_kubeconfig
from operator_kit.testing.kubeconfigs import (
    embedded_kubeconfig,
    kubeconfig_secret,
    token_kubeconfig,
)


@dataclass
class CrateSpec:
    note: str = ""


class Crate(CustomResource):
    group = "trust.operator-kit.test"
    version = "v1"
    kind = "Crate"
    plural = "crates"
    spec: CrateSpec


class CrateSync(Controller[Crate]):
    resource = Crate
    fleet = True

    def reconcile(self, obj: Crate, ctx: Context) -> Action | None:
        return None


class Listener:
    """A loopback TCP listener that records every connection's first bytes (thread
    ``trust-listener``, stopped and joined by `close`)."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1]
        self.received: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="trust-listener",
                                        daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(2.0)
                data = b""
                try:
                    while b"\r\n\r\n" not in data and len(data) < 65536:
                        chunk = conn.recv(4096)
                        if not chunk:
                            break
                        data += chunk
                except OSError:
                    pass
                self.received.append(data)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5.0)
        self.server.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    made = Listener()
    yield made
    made.close()


class Hub:
    """The operator's side: a ServiceAccount bound to the generated ``<operator>-fleet``
    Role of `capi`, the provider reading as it, and the fleet."""

    def __init__(self, cluster: TestCluster, runs_in: Namespace, capi: Namespace,
                 tmp_path: Path, allow: tuple[str, ...] = ()) -> None:
        self.cluster = cluster
        self.capi = capi
        self.operator = Operator(f"trust-{secrets.token_hex(2)}", [CrateSync()],
                                 shutdown_timeout=10.0)
        cli.apply_environment(self.operator, Settings(insecure_kubeconfig=allow))
        self.provider = KubeconfigSecrets(namespace=capi.name)
        Fleet.of(self.operator, self.provider)  # what its manifests grant
        cluster.api.request("POST", f"/api/v1/namespaces/{runs_in.name}/serviceaccounts",
                            body={"metadata": {"name": self.operator.name}})
        for doc in hub_access_documents(self.operator, runs_in.name):
            cluster.api.apply(doc, field_manager="trust-test")
        self.client = api_client(service_account_kubeconfig(
            cluster, runs_in.name, self.operator.name, tmp_path / "operator.kubeconfig"))
        self.provider = KubeconfigSecrets(namespace=capi.name, api=Api(self.client))
        self.fleet = Fleet.of(self.operator, self.provider, poll_interval=0.2,
                              may_reconcile=lambda: True)

    def add(self, cluster_name: str, document: dict[str, Any]) -> None:
        self.cluster.api.request("POST", f"/api/v1/namespaces/{self.capi.name}/secrets",
                                 body=kubeconfig_secret(self.capi.name, cluster_name,
                                                        document))

    def refused(self, reason: str) -> float | None:
        return REGISTRY.get_sample_value("operator_kit_fleet_kubeconfigs_refused",
                                         {"provider": self.operator.name, "reason": reason})

    def events(self) -> list[dict[str, Any]]:
        return [e for e in self.cluster.api.get(
            f"/apis/events.k8s.io/v1/namespaces/{self.capi.name}/events")["items"]
            if e.get("reason") == "KubeconfigRefused"]

    def close(self) -> None:
        self.fleet.stop()
        self.client.close()


@pytest.fixture
def make_hub(cluster: TestCluster, namespace: Namespace, tmp_path: Path
             ) -> Iterator[Callable[..., Hub]]:
    cluster.install_crd(Crate)
    made: list[Hub] = []
    spaces: list[Namespace] = []

    def make(allow: tuple[str, ...] = ()) -> Hub:
        capi = cluster.namespace("capi")
        spaces.append(capi)
        hub = Hub(cluster, namespace, capi, tmp_path / str(len(made)), allow)
        made.append(hub)
        return hub

    (tmp_path / "0").mkdir()
    (tmp_path / "1").mkdir()
    yield make
    for hub in made:
        hub.close()
    for space in spaces:
        space.delete()
    assert not any(t.name in ("watch-secrets", "trust-listener") or
                   t.name.startswith("fleet-trust-") for t in threading.enumerate()
                   if t.is_alive())


def hub_kubeconfig(cluster: TestCluster, token: str | None = None) -> dict[str, Any]:
    """The hub's own kubeconfig, self-contained (``*-data``), as Cluster API writes one;
    with `token`, acting as that token instead of the admin's certificate."""
    document = embedded_kubeconfig(cluster.kubeconfig)
    if token is not None:
        for entry in document["users"]:
            entry["user"] = {"token": token}
    return document


def sa_token(cluster: TestCluster, namespace: Namespace) -> str:
    cluster.api.request("POST", f"/api/v1/namespaces/{namespace.name}/serviceaccounts",
                        body={"metadata": {"name": "member"}})
    answer = cluster.api.request(
        "POST", f"/api/v1/namespaces/{namespace.name}/serviceaccounts/member/token",
        body={"spec": {"expirationSeconds": 3600}})
    return str(answer["status"]["token"])


def refused_for_a_while(hub: Hub, name: str, category: str) -> str:
    """Start the fleet; wait until the Secret is refused for `category`, then a few polls
    more; the cluster never joined. Returns the problem line."""
    hub.fleet.start()
    problem = eventually(30, lambda: next(
        (p for p in hub.provider.problems if f"{name}-kubeconfig" in p), None),
        message="the Secret refused")
    time.sleep(1.5)  # several polls of the fleet: still not joined
    assert hub.fleet.members() == {} and name not in (hub.fleet.named_clusters() or ())
    assert problem.count("\n") == 0
    assert f"--insecure-kubeconfig={category}" in problem
    assert hub.refused(category) == 1
    event = eventually(15, lambda: next(iter(hub.events()), None),
                       message="the Warning Event on the Secret")
    assert event["type"] == "Warning"
    assert event["regarding"]["name"] == f"{name}-kubeconfig"
    assert f"--insecure-kubeconfig={category}" in event["note"]
    return problem


def exec_user(marker: Path, token: str) -> dict[str, Any]:
    credential = ('{"apiVersion": "client.authentication.k8s.io/v1", "kind": '
                  f'"ExecCredential", "status": {{"token": "{token}"}}}}')
    return {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "/bin/sh",
                     "args": ["-c", f"touch {marker}; echo '{credential}'"],
                     "interactiveMode": "Never"}}


def test_a_kubeconfig_secret_with_exec_runs_no_command_and_does_not_join(
        cluster: TestCluster, namespace: Namespace, make_hub: Callable[..., Hub],
        tmp_path: Path) -> None:
    marker = tmp_path / "exec-ran"
    hub = make_hub()
    document = hub_kubeconfig(cluster)
    document["users"][0]["user"] = exec_user(marker, sa_token(cluster, namespace))
    hub.add("tenant", document)
    problem = refused_for_a_while(hub, "tenant", "exec")
    assert "users[0]" in problem and "has exec (exec)" in problem
    assert not marker.exists()


def test_with_exec_allowed_the_command_runs_and_the_cluster_joins(
        cluster: TestCluster, namespace: Namespace, make_hub: Callable[..., Hub],
        tmp_path: Path) -> None:
    marker = tmp_path / "exec-ran"
    hub = make_hub(allow=("exec",))  # --insecure-kubeconfig=exec
    document = hub_kubeconfig(cluster)
    document["users"][0]["user"] = exec_user(marker, sa_token(cluster, namespace))
    hub.add("trusted", document)
    hub.fleet.start()
    eventually(30, lambda: hub.fleet.members()["trusted"].running(),
               message="the cluster joining")
    assert marker.exists() and hub.provider.problems == []
    assert hub.refused("exec") == 0


def test_an_auth_provider_cmd_path_runs_no_command(
        cluster: TestCluster, make_hub: Callable[..., Hub], tmp_path: Path) -> None:
    marker = tmp_path / "cmd-path-ran"
    script = tmp_path / "gcp-token.sh"
    script.write_text(f"#!/bin/sh\ntouch {marker}\necho '{{\"access_token\": \"x\"}}'\n")
    script.chmod(0o755)
    hub = make_hub()
    document = hub_kubeconfig(cluster)
    document["users"][0]["user"] = {"auth-provider": {"name": "gcp", "config": {
        "cmd-path": str(script), "token-key": "{.access_token}"}}}
    hub.add("tenant", document)
    refused_for_a_while(hub, "tenant", "auth-provider")
    assert not marker.exists()


def leaking_kubeconfig(listener: Listener, token_file: Path) -> dict[str, Any]:
    """The attack of R1: the operator's token file, sent to a server the tenant owns."""
    return {"apiVersion": "v1", "kind": "Config", "current-context": "x",
            "clusters": [{"name": "x", "cluster": {
                "server": f"http://127.0.0.1:{listener.port}"}}],
            "users": [{"name": "x", "user": {"tokenFile": str(token_file)}}],
            "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}]}


@pytest.mark.parametrize("allowed", [False, True], ids=["refused", "allowed"])
def test_a_token_file_is_never_read_and_sent_to_the_server_the_secret_names(
        make_hub: Callable[..., Hub], listener: Listener, tmp_path: Path,
        allowed: bool) -> None:
    token = f"operator-sa-token-{secrets.token_hex(8)}"
    token_file = tmp_path / "token"
    token_file.write_text(token)
    hub = make_hub(allow=("files",) if allowed else ())
    hub.add("tenant", leaking_kubeconfig(listener, token_file))
    if allowed:  # the attack works without the refusal: the listener hears the token
        hub.fleet.start()
        eventually(30, lambda: any(token.encode() in r for r in listener.received),
                   message="the token file's content at the tenant's listener")
        return
    problem = refused_for_a_while(hub, "tenant", "files")
    assert "has tokenFile (files)" in problem and token not in problem
    assert listener.received == []  # not one connection


@pytest.mark.parametrize("allowed", [False, True], ids=["refused", "allowed"])
def test_a_proxy_url_is_not_used(cluster: TestCluster, namespace: Namespace,
                                 make_hub: Callable[..., Hub], listener: Listener,
                                 allowed: bool) -> None:
    hub = make_hub(allow=("proxy",) if allowed else ())
    document = hub_kubeconfig(cluster, sa_token(cluster, namespace))
    document["clusters"][0]["cluster"]["proxy-url"] = f"http://127.0.0.1:{listener.port}"
    hub.add("tenant", document)
    if allowed:  # the requests would go through the tenant's proxy
        hub.fleet.start()
        eventually(30, lambda: any(r.startswith(b"CONNECT ") for r in listener.received),
                   message="a CONNECT at the tenant's proxy")
        return
    refused_for_a_while(hub, "tenant", "proxy")
    assert listener.received == []


def test_insecure_skip_tls_verify_is_refused_and_joins_when_allowed(
        cluster: TestCluster, namespace: Namespace, make_hub: Callable[..., Hub]) -> None:
    document = hub_kubeconfig(cluster, sa_token(cluster, namespace))
    body = document["clusters"][0]["cluster"]
    body.pop("certificate-authority-data", None)
    body["insecure-skip-tls-verify"] = True
    refusing = make_hub()
    refusing.add("tenant", document)
    refused_for_a_while(refusing, "tenant", "insecure-tls")
    refusing.close()
    allowing = make_hub(allow=("insecure-tls",))
    allowing.add("tenant", document)
    allowing.fleet.start()
    eventually(30, lambda: allowing.fleet.members()["tenant"].running(),
               message="the cluster joining with insecure-tls allowed")


def test_a_member_whose_legacy_token_is_deleted_reports_its_credentials_failing(
        cluster: TestCluster, namespace: Namespace, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """R6: members use the legacy token Secret ``--fleet-member`` makes. While the
    operator uses it the API server marks it used (``kubernetes.io/legacy-token-last-used``,
    so the cleanup of unused tokens leaves it); deleted (or cleaned up), the member's
    credentials fail and ``operator_kit_fleet_member_credentials_failing`` says so."""
    monkeypatch.setattr(Member, "CREDENTIALS_CHECK", 1.0)
    cluster.install_crd(Crate)
    space = namespace.name
    cluster.api.request("POST", f"/api/v1/namespaces/{space}/serviceaccounts",
                        body={"metadata": {"name": "member"}})
    cluster.api.request("POST", f"/api/v1/namespaces/{space}/secrets", body={
        "metadata": {"name": "member-token",
                     "annotations": {"kubernetes.io/service-account.name": "member"}},
        "type": "kubernetes.io/service-account-token"})
    config = eventually(30, lambda: token_kubeconfig(
        cluster.api, space, "member-token", str(cluster.client.configuration.host)),
        message="the token controller filling the token Secret")
    path = tmp_path / "member.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    fleet = Fleet("trust-r6", [CrateSync()], StaticClusters({"legacy": str(path)}),
                  poll_interval=0.2, shutdown_timeout=10.0)
    failing = {"cluster": "legacy"}
    fleet.start()
    try:
        eventually(30, lambda: fleet.members()["legacy"].running(), message="joining")
        assert REGISTRY.get_sample_value(
            "operator_kit_fleet_member_credentials_failing", failing) == 0
        used = eventually(30, lambda: (cluster.api.get(
            f"/api/v1/namespaces/{space}/secrets/member-token")["metadata"].get("labels")
            or {}).get("kubernetes.io/legacy-token-last-used"),
            message="the API server marking the token used")
        assert used == time.strftime("%Y-%m-%d", time.gmtime())
        cluster.api.request("DELETE", f"/api/v1/namespaces/{space}/secrets/member-token")
        deleted = time.monotonic()
        eventually(30, lambda: REGISTRY.get_sample_value(
            "operator_kit_fleet_member_credentials_failing", failing) == 1,
            message="the member's credentials reported failing")
        print(f"credentials failing reported {time.monotonic() - deleted:.1f}s after the "
              "token Secret was deleted (check every 1s)")
        assert "401" in str(fleet.members()["legacy"].credentials_problem)
    finally:
        fleet.stop()
    assert REGISTRY.get_sample_value(
        "operator_kit_fleet_member_credentials_failing", failing) is None  # left: dropped
