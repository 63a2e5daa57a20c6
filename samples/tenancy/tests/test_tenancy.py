"""The tenancy sample against the real API server: a controller whose primary kind is the
built-in, cluster-scoped ``v1/Namespace``.

In process: tenant Namespaces get their NetworkPolicy and ResourceQuota from the
TenancyPolicy, a policy change reaches every tenant, and a deleted tenant is held by the
finalizer until the policy's status no longer lists it. As deployed: the generated
manifests pass a server-side dry run, and a replica running as the generated
ServiceAccount (its RBAC exactly as generated) does the same work.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from tenancy_operator import TENANT_LABEL, TenancyPolicy, TenantNamespaces, operator

from operator_kit import Operator
from operator_kit.manifests import operator_manifests, to_yaml
from operator_kit.testing import Namespace, TestCluster, eventually
from operator_kit.testing.deploy import LocalDeployment

SAMPLE_DIR = str(Path(__file__).resolve().parents[1])
POLICIES = "/apis/tenancy.example.com/v1/tenancypolicies"


@pytest.fixture(scope="module")
def policy_kind(cluster: TestCluster) -> Iterator[None]:
    cluster.install_crd(TenancyPolicy)
    yield
    try:
        cluster.api.request("DELETE", f"{POLICIES}/default")
    except ApiException:
        pass


def set_policy(cluster: TestCluster, max_pods: int) -> None:
    cluster.api.apply({"apiVersion": "tenancy.example.com/v1", "kind": "TenancyPolicy",
                       "metadata": {"name": "default"},
                       "spec": {"maxPods": max_pods, "allowFromOtherNamespaces": False}},
                      field_manager="test")


@pytest.fixture
def tenants(cluster: TestCluster) -> Iterator[list[Namespace]]:
    made = [cluster.namespace("tenant") for _ in range(2)]
    for ns in made:
        label(cluster, ns.name)
    yield made
    for ns in made:  # the operator may be gone: its finalizer must not keep them
        try:
            cluster.api.request("PATCH", f"/api/v1/namespaces/{ns.name}", body={
                "metadata": {"finalizers": None}}, content_type="application/merge-patch+json")
        except ApiException:
            pass
        ns.delete()


def label(cluster: TestCluster, name: str) -> None:
    cluster.api.request("PATCH", f"/api/v1/namespaces/{name}",
                        body={"metadata": {"labels": {TENANT_LABEL: "yes"}}},
                        content_type="application/merge-patch+json")


def quota(ns: Namespace) -> str | None:
    found = ns.get("v1", "ResourceQuota", "tenant-quota")
    return None if found is None else str(found["spec"]["hard"]["pods"])


def listed(cluster: TestCluster) -> list[str]:
    policy: dict[str, Any] = cluster.api.get(f"{POLICIES}/default")
    return list((policy.get("status") or {}).get("tenants") or [])


def gone(cluster: TestCluster, name: str) -> bool:
    return not cluster.exists(f"/api/v1/namespaces/{name}")


@pytest.mark.usefixtures("policy_kind")
def test_tenant_namespaces_get_their_defaults_and_are_released_on_deletion(
        cluster: TestCluster, tenants: list[Namespace]) -> None:
    set_policy(cluster, 7)
    running = Operator("tenancy-test", [TenantNamespaces()])
    running.use(cluster.client)
    running.start()
    try:
        assert running.wait_synced(30)
        first, second = tenants
        for ns in tenants:
            eventually(30, lambda ns=ns: quota(ns) == "7")
            policy = ns.get("networking.k8s.io/v1", "NetworkPolicy", "tenant-isolation")
            assert policy["spec"]["ingress"] == [{"from": [{"podSelector": {}}]}]
            assert policy["metadata"]["ownerReferences"][0]["kind"] == "Namespace"
        eventually(30, lambda: {first.name, second.name} <= set(listed(cluster)))
        # A change of the policy reaches every tenant; a quota changed by hand is restored.
        set_policy(cluster, 9)
        for ns in tenants:
            eventually(30, lambda ns=ns: quota(ns) == "9")
        first.api.request("PATCH", f"/api/v1/namespaces/{first.name}/resourcequotas/"
                          "tenant-quota", body={"spec": {"hard": {"pods": "1000"}}},
                          content_type="application/merge-patch+json")
        eventually(30, lambda: quota(first) == "9")
        # Deleting a tenant: the finalizer holds it until the policy no longer lists it.
        cluster.api.request("DELETE", f"/api/v1/namespaces/{second.name}")
        eventually(90, lambda: gone(cluster, second.name))
        assert second.name not in listed(cluster)
        assert first.name in listed(cluster)
    finally:
        running.stop(timeout=10)


@pytest.mark.usefixtures("policy_kind")
def test_the_generated_manifests_pass_a_server_side_dry_run(namespace: Namespace) -> None:
    docs = operator_manifests(operator, app="tenancy_operator:operator",
                              namespace=namespace.name, image="tenancy-operator:0.1.0")
    crds = [d["metadata"]["name"] for d in docs if d["kind"] == "CustomResourceDefinition"]
    assert crds == ["tenancypolicies.tenancy.example.com"]  # its own kind; none for Namespace
    role = next(d for d in docs if d["kind"] == "ClusterRole"
                and d["metadata"]["name"] == "tenancy-operator")
    namespaces = [r for r in role["rules"] if r["resources"] == ["namespaces"]]
    assert [sorted(r["verbs"]) for r in namespaces] == [["get", "list", "patch", "watch"]]
    assert not [r for r in role["rules"] if "namespaces/status" in r["resources"]]
    applied = subprocess.run(["kubectl", "apply", "--dry-run=server", "-f", "-"],
                             input=to_yaml(docs), capture_output=True, text=True,
                             env={**os.environ, "KUBECONFIG": namespace.cluster.kubeconfig})
    assert applied.returncode == 0, applied.stderr


@pytest.mark.usefixtures("policy_kind")
def test_the_deployed_operator_runs_with_exactly_its_generated_rbac(
        cluster: TestCluster, namespace: Namespace, tenants: list[Namespace]) -> None:
    set_policy(cluster, 5)
    deployment = LocalDeployment(cluster, operator, app="tenancy_operator:operator",
                                 namespace=namespace.name, replicas=1,
                                 pythonpath=[SAMPLE_DIR])
    deployment.apply()
    try:
        with deployment:
            deployment.start()
            deployment.wait_serving()
            for ns in tenants:
                eventually(60, lambda ns=ns: quota(ns) == "5")
            eventually(30, lambda: {t.name for t in tenants} <= set(listed(cluster)))
            cluster.api.request("DELETE", f"/api/v1/namespaces/{tenants[1].name}")
            eventually(90, lambda: gone(cluster, tenants[1].name))
    finally:
        deployment.delete()
