"""The generated Helm chart against the real API server: what ``helm template`` renders passes
a server-side dry run, and ``helm install`` creates the operator in the release namespace
(the plane has no kubelet: the Deployment is created, its pods never run) with the
scheduling and pod metadata values set, ``helm upgrade``
changes it, a second installation in another namespace is refused, and ``helm uninstall``
removes all but the CRDs (kept, as the chart says).

helm comes from ``HELM`` (tests/unit/test_helm.py: skipped without it, failed when ``HELM``
names a missing file).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from operator_kit import Action, Context, Controller, CustomResource, LeaderElection, Operator
from operator_kit.localcluster import find_or_build
from operator_kit.manifests import write_helm_chart
from operator_kit.testing import Namespace, TestCluster, eventually
from operator_kit.webhooks.server import AdmissionRequest
from tests.unit.test_helm import SCHEDULING, run_helm
from tests.unit.test_helm_chart import report_operator


@dataclass
class GizmoSpec:
    size: int


class Gizmo(CustomResource):
    """A kind of its own: installing and removing the chart touches no other test's CRD."""

    group = "helm.operator-kit.test"
    version = "v1"
    kind = "Gizmo"
    spec: GizmoSpec


class GizmoController(Controller[Gizmo]):
    resource = Gizmo

    def reconcile(self, gizmo: Gizmo, ctx: Context) -> Action:
        return Action.await_change()


gizmo_operator = Operator("gizmo-operator", [GizmoController()],
                          leader_election=LeaderElection())


@gizmo_operator.webhooks.validate(Gizmo, "/validate-gizmo")
def validate(request: AdmissionRequest[Gizmo]) -> None:
    """Accept everything: the chart only needs a webhook configuration."""


GIZMO_APP = "tests.cluster.test_helm_cluster:gizmo_operator"
GIZMO_CRD = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gizmos.helm.operator-kit.test"
HOOKS = "/apis/admissionregistration.k8s.io/v1"
RBAC = "/apis/rbac.authorization.k8s.io/v1"


@pytest.fixture(scope="module")
def kubectl() -> str:
    path = find_or_build(log=False).kubectl
    if path is None:
        pytest.fail("no kubectl next to the control plane's binaries (operator_kit.localcluster "
                    "builds it with the others)")
    return str(path)


def _cluster_scoped(cluster: TestCluster, rendered: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(rendered) if d and "namespace" not in d["metadata"]]


def _remove(cluster: TestCluster, docs: list[dict[str, Any]]) -> None:
    """Delete the cluster-scoped documents (guard policies first, CRDs included)."""
    docs = sorted(docs, key=lambda d: not d["kind"].startswith("ValidatingAdmissionPolicy"))
    for doc in docs:
        resource = cluster.api.resource_for(doc["apiVersion"], doc["kind"])
        try:
            cluster.api.request("DELETE", resource.path(None, doc["metadata"]["name"]))
        except ApiException as err:
            if err.status != 404:
                raise


@pytest.fixture
def chart(tmp_path: Path) -> Path:
    write_helm_chart(tmp_path / "chart", gizmo_operator, app=GIZMO_APP,
                     image="example.com/gizmo-operator:1.2.3")
    return tmp_path / "chart"


@pytest.mark.parametrize(("operator", "app", "flags"), [
    (gizmo_operator, GIZMO_APP, []),
    (gizmo_operator, GIZMO_APP, ["--set", "certificate.mode=external",
                                 "--set", "certificate.secret=gizmo-tls", "--set", "replicas=1"]),
    (report_operator(), "reports:operator", []),
    (report_operator(elects=True), "reports:operator", ["--set", "replicas=3"]),
    (gizmo_operator, GIZMO_APP, ["-f", "SCHEDULING"]),
], ids=["webhooks", "webhooks-external-certificate", "no-webhooks", "no-webhooks-elected",
        "scheduling-values"])
def test_the_rendered_chart_passes_a_server_side_dry_run(
        operator: Operator, app: str, flags: list[str], cluster: TestCluster,
        namespace: Namespace, kubectl: str, tmp_path: Path) -> None:
    write_helm_chart(tmp_path / "chart", operator, app=app, image="example.com/op:1.0.0")
    (tmp_path / "scheduling.yaml").write_text(yaml.safe_dump(SCHEDULING))
    flags = [str(tmp_path / "scheduling.yaml") if f == "SCHEDULING" else f for f in flags]
    rendered = run_helm("template", "rel", str(tmp_path / "chart"), "--namespace",
                        namespace.name, *flags, home=tmp_path).stdout
    done = subprocess.run([kubectl, "--kubeconfig", cluster.kubeconfig, "apply",
                           "--dry-run=server", "-f", "-"], input=rendered,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"deployment.apps/{operator.name} created (server dry run)" in done.stdout
    assert not namespace.list("apps/v1", "Deployment"), "a dry run creates nothing"


@pytest.fixture
def installed(cluster: TestCluster, namespace: Namespace, chart: Path,
              tmp_path: Path) -> Iterator[str]:
    """``helm install`` of the Gizmo chart into the test namespace; its cluster-scoped
    documents (the kept CRD too) removed afterwards."""
    everything = run_helm("template", "rel", str(chart), "--namespace", namespace.name,
                          home=tmp_path).stdout
    # The previous test's CRD may still be going: installing over it, the release would
    # own a CRD that vanishes a moment later (and a second release would find none).
    eventually(120, lambda: cluster.api.get_or_none(GIZMO_CRD) is None,
               message="the previous test's Gizmo CRD gone")
    # Scheduling and pod metadata a real cluster needs (no affinity: the chart's own
    # anti-affinity of several replicas stays; no priorityClassName: a critical class is
    # for kube-system).
    values = tmp_path / "scheduling.yaml"
    values.write_text(yaml.safe_dump({key: value for key, value in SCHEDULING.items()
                                      if key not in ("affinity", "priorityClassName")}))
    try:
        run_helm("install", "rel", str(chart), "--namespace", namespace.name,
                 "--kubeconfig", cluster.kubeconfig, "--set", "replicas=3", "-f", str(values),
                 home=tmp_path)
        yield namespace.name
    finally:
        run_helm("uninstall", "rel", "--namespace", namespace.name, "--kubeconfig",
                 cluster.kubeconfig, home=tmp_path, check=False)
        _remove(cluster, _cluster_scoped(cluster, everything))


def test_helm_install_creates_the_operator_in_the_release_namespace(
        cluster: TestCluster, namespace: Namespace, installed: str) -> None:
    deployment = namespace.get("apps/v1", "Deployment", "gizmo-operator")
    assert deployment is not None, "the Deployment was created in the release namespace"
    assert deployment["spec"]["replicas"] == 3
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "example.com/gizmo-operator:1.2.3"
    labels = deployment["metadata"]["labels"]
    assert (labels["app.kubernetes.io/managed-by"], labels["app.kubernetes.io/instance"],
            labels["app.kubernetes.io/version"]) == ("Helm", "rel", "1.2.3")
    assert deployment["metadata"]["annotations"]["meta.helm.sh/release-namespace"] == installed
    pod = deployment["spec"]["template"]
    for name in ("tolerations", "nodeSelector", "topologySpreadConstraints"):
        assert pod["spec"][name] == SCHEDULING[name], name
    assert "podAntiAffinity" in pod["spec"]["affinity"]
    assert pod["metadata"]["labels"]["team"] == "storage"
    assert pod["metadata"]["annotations"]["example.com/owner"] == "storage"
    proxy, node = container["env"][-2:]  # the API server fills in fieldRef's apiVersion
    assert proxy == SCHEDULING["extraEnv"][0]
    assert (node["name"], node["valueFrom"]["fieldRef"]["fieldPath"]) == ("NODE",
                                                                          "spec.nodeName")
    assert namespace.get("policy/v1", "PodDisruptionBudget", "gizmo-operator") is not None
    binding = cluster.api.get(f"{RBAC}/clusterrolebindings/gizmo-operator")
    assert binding["subjects"][0]["namespace"] == installed
    hooks = cluster.api.get(f"{HOOKS}/validatingwebhookconfigurations/gizmo-operator")
    assert hooks["webhooks"][0]["clientConfig"]["service"]["namespace"] == installed
    crd = cluster.api.get(GIZMO_CRD)
    assert crd["metadata"]["labels"]["operator-kit.io/installation"] == installed
    policy = f"{HOOKS}/validatingadmissionpolicies/gizmo-operator-installation-{installed}"
    assert cluster.api.get(policy)["spec"]["failurePolicy"] == "Fail"


def test_helm_upgrade_to_one_replica_drops_the_disruption_budget(
        cluster: TestCluster, namespace: Namespace, installed: str, chart: Path,
        tmp_path: Path) -> None:
    run_helm("upgrade", "rel", str(chart), "--namespace", installed, "--kubeconfig",
             cluster.kubeconfig, "--set", "replicas=1", "--set", "image.tag=1.2.4",
             home=tmp_path)
    deployment = namespace.get("apps/v1", "Deployment", "gizmo-operator")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == \
        "example.com/gizmo-operator:1.2.4"
    assert "affinity" not in deployment["spec"]["template"]["spec"]
    eventually(30, lambda: namespace.get("policy/v1", "PodDisruptionBudget",
                                         "gizmo-operator") is None,
               message="the PodDisruptionBudget of several replicas is gone")


def test_a_second_installation_in_another_namespace_is_refused(
        cluster: TestCluster, installed: str, chart: Path, tmp_path: Path) -> None:
    """Helm refuses objects another release owns; told to take them over, the installation
    policy refuses re-pointing them (one installation per cluster), and the first
    installation keeps them."""
    other = cluster.namespace("helm-second")
    try:
        done = run_helm("install", "second", str(chart), "--namespace", other.name,
                        "--kubeconfig", cluster.kubeconfig, home=tmp_path, check=False)
        assert done.returncode == 1, done.stdout
        assert 'must equal "second": current value is "rel"' in done.stderr
        # A new admission policy is enforced a moment after it is created: wait for it.
        def guarded() -> bool:
            binding = cluster.api.get(f"{RBAC}/clusterrolebindings/gizmo-operator")
            binding["subjects"][0]["namespace"] = other.name
            try:
                cluster.api.request("PUT", f"{RBAC}/clusterrolebindings/gizmo-operator",
                                    body=binding, query={"dryRun": "All"})
            except ApiException as err:
                return err.status == 403
            return False

        eventually(30, guarded, message="the first installation's policy enforced")
        taken = run_helm("install", "second", str(chart), "--namespace", other.name,
                         "--kubeconfig", cluster.kubeconfig, "--take-ownership",
                         home=tmp_path, check=False)
        assert taken.returncode == 1, taken.stdout
        for kind in ("CustomResourceDefinition gizmos.helm.operator-kit.test",
                     "ClusterRoleBinding gizmo-operator",
                     "ValidatingWebhookConfiguration gizmo-operator"):
            assert (f"{kind} belongs to the installation of gizmo-operator in namespace "
                    f"{installed}") in taken.stderr, taken.stderr
        binding = cluster.api.get(f"{RBAC}/clusterrolebindings/gizmo-operator")
        assert binding["subjects"][0]["namespace"] == installed, "the first one keeps it"
        hooks = cluster.api.get(f"{HOOKS}/validatingwebhookconfigurations/gizmo-operator")
        assert hooks["webhooks"][0]["clientConfig"]["service"]["namespace"] == installed
        crd = cluster.api.get(GIZMO_CRD)
        assert crd["metadata"]["labels"]["operator-kit.io/installation"] == installed
    finally:  # the failed release's own objects (its guard policy is cluster-scoped)
        run_helm("uninstall", "second", "--namespace", other.name, "--kubeconfig",
                 cluster.kubeconfig, home=tmp_path, check=False)
        other.delete()


def test_helm_uninstall_removes_everything_but_the_crds(
        cluster: TestCluster, namespace: Namespace, installed: str, tmp_path: Path) -> None:
    done = run_helm("uninstall", "rel", "--namespace", installed, "--kubeconfig",
                    cluster.kubeconfig, home=tmp_path)
    assert "gizmos.helm.operator-kit.test" in done.stdout + done.stderr, \
        "helm says which resource it kept"
    eventually(30, lambda: namespace.get("apps/v1", "Deployment", "gizmo-operator") is None,
               message="the Deployment is deleted")
    for path in (f"{RBAC}/clusterroles/gizmo-operator",
                 f"{HOOKS}/validatingwebhookconfigurations/gizmo-operator",
                 f"{HOOKS}/validatingadmissionpolicies/gizmo-operator-installation-{installed}"):
        with pytest.raises(ApiException, match=r"Not ?Found"):
            cluster.api.get(path)
    crd = cluster.api.get(GIZMO_CRD)
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
