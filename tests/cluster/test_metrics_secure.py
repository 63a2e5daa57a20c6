"""``--metrics-secure`` against a real API server: a scrape's bearer token is checked with a
TokenReview, its user authorized for ``get /metrics`` with a SubjectAccessReview.

A ServiceAccount bound to the metrics-reader ClusterRole reads the metrics (200); one
without the binding is refused (403); no token, or a garbage one, is not authenticated
(401); the answers are cached, so repeated scrapes send no more reviews; an operator that
may not create the reviews lets nobody in (503)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from operator_kit.client.delegated import RULES, DelegatedAuth
from operator_kit.client.transport import Api, api_client, request_counts
from operator_kit.testing import Namespace, TestCluster
from operator_kit.testing.deploy import service_account_kubeconfig

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
    assert DelegatedAuth(cluster.api).check(f"Bearer {reader}", "/metrics").allowed
    assert reviews_sent(before) == 2, "one TokenReview and one SubjectAccessReview"


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

        from operator_kit.testing import eventually

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
