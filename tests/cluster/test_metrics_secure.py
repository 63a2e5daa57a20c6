"""``--metrics-secure`` against a real API server: a scrape's bearer token is checked with a
TokenReview, its user authorized for ``get /metrics`` with a SubjectAccessReview.

A ServiceAccount bound to the metrics-reader ClusterRole reads the metrics (200); one
without the binding is refused (403); no token, or a garbage one, is not authenticated
(401); the answers are cached, so repeated scrapes send no more reviews; an operator that
may not create the reviews lets nobody in (503).

The last tests deploy operators from their generated manifests (``metrics_secure=True``)
with `LocalDeployment`, each replica run as the generated ServiceAccount, so the RBAC the
manifests grant is shown to be enough: an operator without webhooks (its own command line,
HTTPS on its metrics port; plain HTTP is refused) and the Backup sample under gunicorn
(``/metrics`` on the webhook TLS port). Their replicas load this module
(``OPERATOR_KIT_APP=tests.cluster.test_metrics_secure:operator``)."""

from __future__ import annotations

import base64
import secrets
import socket
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from operator_kit import Action, Context, Controller, CustomResource, Operator
from operator_kit.client.delegated import RULES, DelegatedAuth
from operator_kit.client.transport import Api, api_client, request_counts
from operator_kit.localcluster.plane import free_port
from operator_kit.manifests import operator_manifests
from operator_kit.testing import Namespace, TestCluster, eventually
from operator_kit.testing.deploy import LocalDeployment, service_account_kubeconfig

SAMPLE_DIR = str(Path(__file__).resolve().parents[2] / "samples" / "backup")
MODULE = "tests.cluster.test_metrics_secure"


@dataclass
class MeterSpec:
    size: int = 0


class Meter(CustomResource):
    group = "msecure.operator-kit.test"
    version = "v1"
    kind = "Meter"
    spec: MeterSpec


class MeterController(Controller[Meter]):
    resource = Meter

    def reconcile(self, obj: Meter, ctx: Context) -> Action:
        return Action.await_change()


operator = Operator("meter-operator", [MeterController()])

REVIEWS = [("POST", "/apis/authentication.k8s.io/v1/tokenreviews"),
           ("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews")]


def token_of(cluster: TestCluster, namespace: str, name: str) -> str:
    """A new ServiceAccount `name` and a token for it (TokenRequest)."""
    core = client.CoreV1Api(cluster.client)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    answer = core.create_namespaced_service_account_token(
        name, namespace, {"spec": {"expirationSeconds": 3600}})
    return str(answer.status.token)


def reader_role(name: str) -> dict[str, object]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]}


def cluster_binding(name: str, role: str, namespace: str, account: str) -> dict[str, object]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": account,
                          "namespace": namespace}]}


@pytest.fixture
def cluster_objects(cluster: TestCluster) -> Iterator[list[tuple[str, str]]]:
    """(kind path, name) of cluster-scoped objects a test creates: deleted afterwards."""
    made: list[tuple[str, str]] = []
    yield made
    for path, name in made:
        try:
            cluster.api.request("DELETE", f"{path}/{name}")
        except client.ApiException as err:
            if err.status != 404:
                raise


RBAC = "/apis/rbac.authorization.k8s.io/v1"


def make(cluster: TestCluster, made: list[tuple[str, str]], doc: dict[str, object]) -> None:
    plural = "clusterroles" if doc["kind"] == "ClusterRole" else "clusterrolebindings"
    cluster.api.request("POST", f"{RBAC}/{plural}", body=doc)
    made.append((f"{RBAC}/{plural}", str(doc["metadata"]["name"])))  # type: ignore[index]


def reviews_sent(before: dict[tuple[str, str], int]) -> int:
    after = request_counts()
    return sum(after[k] - before.get(k, 0) for k in REVIEWS)


def test_the_api_server_decides_who_reads_the_metrics_and_its_answers_are_cached(
        cluster: TestCluster, namespace: Namespace,
        cluster_objects: list[tuple[str, str]]) -> None:
    suffix = secrets.token_hex(3)
    make(cluster, cluster_objects, reader_role(f"metrics-reader-{suffix}"))
    make(cluster, cluster_objects, cluster_binding(
        f"metrics-reader-{suffix}", f"metrics-reader-{suffix}", namespace.name, "prometheus"))
    reader = token_of(cluster, namespace.name, "prometheus")
    other = token_of(cluster, namespace.name, "someone")
    auth = DelegatedAuth(cluster.api)

    allowed = auth.check(f"Bearer {reader}", "/metrics")
    assert (allowed.status, allowed.user) == (
        200, f"system:serviceaccount:{namespace.name}:prometheus")
    denied = auth.check(f"Bearer {other}", "/metrics")
    assert denied.status == 403
    assert f"system:serviceaccount:{namespace.name}:someone may not get /metrics" in \
        denied.reason
    assert auth.check(f"Bearer {reader}", "/metrics", "post").status == 403, \
        "the role allows get only"
    assert auth.check(f"Bearer {reader}", "/debug").status == 403, "and /metrics only"
    assert auth.check(None, "/metrics").status == 401
    assert auth.check("Bearer garbage", "/metrics").status == 401
    assert auth.check(f"Basic {reader}", "/metrics").status == 401

    before = request_counts()
    for _ in range(5):  # a scrape every few seconds: no review after the first
        assert auth.check(f"Bearer {reader}", "/metrics").status == 200
        assert auth.check(f"Bearer {other}", "/metrics").status == 403
        assert auth.check("Bearer garbage", "/metrics").status == 401
    assert reviews_sent(before) == 0
    before = request_counts()
    fresh = DelegatedAuth(cluster.api)
    answers: list[int] = []
    scrapes = [threading.Thread(target=lambda: answers.append(
        fresh.check(f"Bearer {reader}", "/metrics").status), name=f"scrape-{i}")
        for i in range(8)]
    for scrape in scrapes:
        scrape.start()
    for scrape in scrapes:
        scrape.join()
    assert answers == [200] * 8
    assert reviews_sent(before) == 2, \
        "eight concurrent scrapes: one TokenReview and one SubjectAccessReview"


def test_an_operator_that_may_not_ask_lets_nobody_in(
        cluster: TestCluster, namespace: Namespace, tmp_path: Path,
        cluster_objects: list[tuple[str, str]]) -> None:
    suffix = secrets.token_hex(3)
    make(cluster, cluster_objects, reader_role(f"metrics-reader-{suffix}"))
    make(cluster, cluster_objects, cluster_binding(
        f"metrics-reader-{suffix}", f"metrics-reader-{suffix}", namespace.name, "prometheus"))
    reader = token_of(cluster, namespace.name, "prometheus")
    token_of(cluster, namespace.name, "operator")  # no rights at all
    kubeconfig = service_account_kubeconfig(cluster, namespace.name, "operator",
                                            tmp_path / "operator.kubeconfig")
    with api_client(str(kubeconfig)) as unprivileged:
        decision = DelegatedAuth(Api(unprivileged)).check(f"Bearer {reader}", "/metrics")
    assert decision.status == 503
    assert "cannot create a TokenReview" in decision.reason
    assert "right to create tokenreviews" in decision.reason
    assert reader not in decision.reason

    # Given exactly RULES, the same ServiceAccount can ask.
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": f"metrics-auth-{suffix}"},
            "rules": [rule.to_dict() for rule in RULES]}
    make(cluster, cluster_objects, role)
    make(cluster, cluster_objects, cluster_binding(
        f"metrics-auth-{suffix}", f"metrics-auth-{suffix}", namespace.name, "operator"))
    with api_client(str(kubeconfig)) as privileged:
        auth = DelegatedAuth(Api(privileged))

        def allowed() -> bool:
            return auth.check(f"Bearer {reader}", "/metrics").allowed

        eventually(10, allowed, message="the reader let in once the operator may ask")


def test_a_down_api_server_lets_nobody_in(tmp_path: Path) -> None:
    """Nothing listens at the kubeconfig's server: 503, not an open door."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kubeconfig = tmp_path / "down.kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:{port}', "
        "insecure-skip-tls-verify: true}}]\n"
        "users: [{name: u, user: {token: x}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n")
    with api_client(str(kubeconfig)) as down:
        decision = DelegatedAuth(Api(down)).check("Bearer something", "/metrics")
    assert decision.status == 503
    assert "cannot create a TokenReview" in decision.reason


# -- deployed from the generated manifests ----------------------------------------------

def may_get_metrics(cluster: TestCluster, user: str) -> bool:
    """The API server's authorizer already allows `user` ``get /metrics`` (a new binding
    takes a moment to reach it: a 403 before then would be cached for 30 s)."""
    review = cluster.api.request(
        "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        body={"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
              "spec": {"user": user, "groups": ["system:serviceaccounts"],
                       "nonResourceAttributes": {"path": "/metrics", "verb": "get"}}})
    return bool(review["status"].get("allowed"))


def https_get(port: int, token: str | None, *, ca: str | None = None,
              server_name: str | None = None) -> tuple[int, str]:
    """GET /metrics over TLS from 127.0.0.1:`port` with `token` as a bearer token,
    trusting `ca` for `server_name` (else not checking the certificate: self-signed)."""
    context = ssl.create_default_context(cadata=ca) if ca else ssl.create_default_context()
    if ca is None:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    with socket.create_connection(("127.0.0.1", port), timeout=20) as raw, \
            context.wrap_socket(raw, server_hostname=server_name or "localhost") as tls:
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        tls.sendall(f"GET /metrics HTTP/1.0\r\nHost: metrics\r\n{head}"
                    "Connection: close\r\n\r\n".encode())
        answer = b""
        while chunk := tls.recv(65536):
            answer += chunk
    status_line, _, body = answer.decode().partition("\r\n\r\n")
    return int(status_line.split()[1]), body


def scrapers(cluster: TestCluster, namespace: Namespace, made: list[tuple[str, str]],
             operator_name: str) -> tuple[str, str]:
    """Tokens of ServiceAccount prometheus, bound to the generated metrics-reader
    ClusterRole, and of someone, not bound; once the binding is in effect."""
    make(cluster, made, cluster_binding(f"{operator_name}-metrics-reader-{namespace.name}",
                                        f"{operator_name}-metrics-reader", namespace.name,
                                        "prometheus"))
    reader = token_of(cluster, namespace.name, "prometheus")
    other = token_of(cluster, namespace.name, "someone")
    eventually(10, lambda: may_get_metrics(
        cluster, f"system:serviceaccount:{namespace.name}:prometheus"),
        message="the binding in effect")
    return reader, other


def check_scrapes(get: Any, reader: str, other: str, logs: Any) -> None:
    """200 for the reader (once the operator's own RBAC is in effect), 403, 401, 401."""
    def served() -> bool:
        status, body = get(reader)
        assert status in (200, 503), (status, body)
        return status == 200 and "# TYPE controller_runtime_reconcile_total counter" in body

    try:
        eventually(30, served, message="the reader's scrape answered")
    except AssertionError as err:
        raise AssertionError(f"{err}\n{logs()}") from None
    status, body = get(other)
    assert status == 403, body
    assert "may not get /metrics" in body
    assert get(None)[0] == 401
    assert get("garbage")[0] == 401
    assert reader not in logs() and other not in logs(), "no token in the log"


def test_an_operator_without_webhooks_serves_its_metrics_to_the_reader_only(
        cluster: TestCluster, namespace: Namespace,
        cluster_objects: list[tuple[str, str]]) -> None:
    app = f"{MODULE}:operator"
    docs = operator_manifests(operator, app=app, namespace=namespace.name, image="local",
                              replicas=1, metrics_secure=True)
    deployment = LocalDeployment(cluster, operator, app=app, namespace=namespace.name,
                                 replicas=1, documents=docs)
    deployment.apply()
    try:
        with deployment:
            (replica,) = deployment.start()
            deployment.wait_serving()
            reader, other = scrapers(cluster, namespace, cluster_objects, operator.name)
            port = replica.metrics_port
            assert port is not None
            check_scrapes(lambda token: https_get(port, token), reader, other,
                          deployment.logs)
            # Plain HTTP is not served: no metrics, and no token taken in the clear.
            with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
                urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)
            assert replica.alive()
    finally:
        deployment.delete()


def test_under_gunicorn_the_metrics_on_the_webhook_port_go_to_the_reader_only(
        cluster: TestCluster, namespace: Namespace,
        cluster_objects: list[tuple[str, str]]) -> None:
    from backup_operator import operator as backup

    app = "backup_operator:operator"
    port = free_port()
    docs = operator_manifests(backup, app=app, namespace=namespace.name, image="local",
                              replicas=1, webhook_port=port, metrics_secure=True,
                              service_monitor=True)
    (monitor,) = [d for d in docs if d["kind"] == "ServiceMonitor"]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["bearerTokenFile"].endswith("/serviceaccount/token")
    deployment = LocalDeployment(cluster, backup, app=app, namespace=namespace.name,
                                 replicas=1, port=port, pythonpath=[SAMPLE_DIR],
                                 documents=[d for d in docs if d["kind"] != "ServiceMonitor"])
    deployment.apply()
    try:
        with deployment:
            deployment.start()
            deployment.wait_serving()
            reader, other = scrapers(cluster, namespace, cluster_objects, backup.name)
            tls = endpoint["tlsConfig"]
            secret = namespace.get("v1", "Secret", tls["ca"]["secret"]["name"])
            assert secret is not None
            ca = base64.b64decode(secret["data"]["ca.crt"]).decode()
            check_scrapes(lambda token: https_get(port, token, ca=ca,
                                                  server_name=tls["serverName"]),
                          reader, other, deployment.logs)
    finally:
        deployment.delete()
