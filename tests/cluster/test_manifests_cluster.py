"""Generated manifests against the real API server: they apply, and their RBAC is needed."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from backup_operator import operator
from kubernetes.client.exceptions import ApiException

from operator_kit.client.transport import Api, api_client
from operator_kit.localcluster import find_or_build
from operator_kit.localcluster.plane import free_port
from operator_kit.manifests import write_kustomize_base
from operator_kit.manifests._deploy import operator_manifests
from operator_kit.manifests._guard import INSTALLATION_LABEL
from operator_kit.testing import Namespace, TestCluster, eventually
from operator_kit.testing.deploy import LocalDeployment
from tests.cluster.test_guard import json_patch

SAMPLE_DIR = str(Path(__file__).resolve().parents[2] / "samples" / "backup")


def test_every_generated_document_passes_a_server_side_dry_run(cluster: TestCluster,
                                                               namespace: Namespace) -> None:
    docs = operator_manifests(operator, app="backup_operator:operator",
                              namespace=namespace.name, image="example.com/op:1")
    assert {d["kind"] for d in docs} >= {
        "CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
        "Role", "RoleBinding", "Service", "Deployment", "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration"}
    for doc in docs:
        applied = cluster.api.apply(doc, field_manager="dry-run-test", dry_run=True)
        assert applied["kind"] == doc["kind"]
    assert not namespace.list("apps/v1", "Deployment"), "a dry run creates nothing"


def test_operator_missing_one_generated_rule_names_the_permission_it_lacks(
        cluster: TestCluster, namespace: Namespace) -> None:
    deployment = LocalDeployment(cluster, operator, app="backup_operator:operator",
                                 namespace=namespace.name, replicas=1,
                                 pythonpath=[SAMPLE_DIR])
    for doc in deployment.documents:
        if doc["kind"] == "ClusterRole":
            before = len(doc["rules"])
            doc["rules"] = [r for r in doc["rules"] if r["resources"] != ["cronjobs"]]
            assert len(doc["rules"]) == before - 1
    deployment.apply()
    try:
        with deployment:
            (replica,) = deployment.start()
            eventually(60, lambda: "forbidden: cannot list/watch cronjobs" in replica.output(),
                       message="the missing permission is named in the log")
            assert "list and watch on cronjobs" in replica.output()
            eventually(10, lambda: replica.alive() and "not ready" in _readyz(deployment.port),
                       message="it stays alive and reports not ready rather than stalling")
    finally:
        deployment.delete()


def _readyz(port: int) -> str:
    import ssl
    import urllib.error
    import urllib.request

    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", context=context,
                                    timeout=3) as response:
            return str(response.read().decode())
    except urllib.error.HTTPError as err:
        return str(err.read().decode())


# -- kubectl: the stream and the kustomize base -------------------------------------------

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def kubectl() -> str:
    path = find_or_build(log=False).kubectl
    if path is None:
        pytest.fail("no kubectl next to the control plane's binaries (the kubectl tests "
                    "need it; operator_kit.localcluster builds it with the others)")
    return str(path)


def _kubectl(kubectl: str, cluster: TestCluster, *args: str,
             stdin: str | None = None) -> str:
    done = subprocess.run([kubectl, "--kubeconfig", cluster.kubeconfig, *args], input=stdin,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
    return done.stdout


def test_kubectl_apply_of_the_stream_creates_its_namespace_and_the_deployment(
        cluster: TestCluster, kubectl: str) -> None:
    name = f"fresh-{uuid.uuid4().hex[:8]}"
    with pytest.raises(ApiException, match=r"Not ?Found"):
        cluster.api.get(f"/api/v1/namespaces/{name}")
    stream = subprocess.run(
        [sys.executable, "-m", "operator_kit.manifests",
         "tests.cluster.manifest_operator:operator", "--namespace", name,
         "--image", "example.com/gizmo:1.2.3", "--replicas", "1"],
        cwd=REPO, capture_output=True, text=True, check=True).stdout
    try:
        _kubectl(kubectl, cluster, "apply", "-f", "-", stdin=stream)
        deployment = Namespace(name, cluster).get("apps/v1", "Deployment", "gizmo-operator")
        assert deployment is not None, "the Deployment was created in the new namespace"
        labels = deployment["metadata"]["labels"]
        assert labels["app.kubernetes.io/version"] == "1.2.3"
        assert labels["app.kubernetes.io/component"] == "operator"
        namespace = cluster.api.get(f"/api/v1/namespaces/{name}")
        assert namespace["metadata"]["labels"]["app.kubernetes.io/name"] == "gizmo-operator"
        webhooks = cluster.api.get("/apis/admissionregistration.k8s.io/v1/"
                                   "validatingwebhookconfigurations/gizmo-operator")
        assert webhooks["metadata"]["labels"]["app.kubernetes.io/component"] == "webhook"
    finally:
        _kubectl(kubectl, cluster, "delete", "--ignore-not-found", "--wait=false", "-f", "-",
                 stdin=stream)


def test_operator_runs_under_a_kustomize_name_prefix(cluster: TestCluster,
                                                     namespace: Namespace, kubectl: str,
                                                     tmp_path: Path) -> None:
    port = free_port()
    write_kustomize_base(tmp_path / "base", operator_manifests(
        operator, app="backup_operator:operator", namespace="backup-operator",
        image="example.com/backup-operator:0.1.0", replicas=1, webhook_port=port))
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        f"namePrefix: dev-\nnamespace: {namespace.name}\nresources: [../base]\n")
    rendered = list(yaml.safe_load_all(_kubectl(kubectl, cluster, "kustomize", str(overlay))))
    by_kind = {d["kind"]: d for d in rendered}
    crd = by_kind["CustomResourceDefinition"]
    assert crd["metadata"]["name"] == "backups.example.com", "kustomize never renames CRDs"
    assert crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"] == {
        "name": "dev-backup-operator", "namespace": namespace.name, "path": "/convert",
        "port": port}
    assert by_kind["ValidatingWebhookConfiguration"]["metadata"]["name"] == "dev-backup-operator"
    assert_policies_follow(rendered, namespace.name, "dev-backup-operator")

    deployment = LocalDeployment(cluster, operator, app="backup_operator:operator",
                                 namespace=namespace.name, replicas=1, port=port,
                                 pythonpath=[SAMPLE_DIR], documents=rendered)
    assert deployment.service_account == "dev-backup-operator"
    assert deployment.environment["OPERATOR_KIT_WEBHOOK_SERVICE"] == "dev-backup-operator"
    deployment.apply()
    try:
        # The policies guard the renamed objects and name the renamed ServiceAccount, and
        # are enforced before the operator starts: its own caBundle patches below are made
        # under them.
        account = Api(api_client(str(deployment.kubeconfig())))
        identity = f"system:serviceaccount:{namespace.name}:dev-backup-operator"
        renamed = "/apis/admissionregistration.k8s.io/v1/{}webhookconfigurations/" \
            "dev-backup-operator"
        refusal = eventually(30, lambda: json_patch(
            account, renamed.format("validating"),
            {"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Ignore"}),
            message="the self-protection policy enforced on the renamed objects")
        assert f"the ServiceAccount {identity} may change only the caBundle" in refusal
        for path in (renamed.format("mutating"),
                     "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                     "backups.example.com"):
            assert json_patch(account, path, {
                "op": "add", "path": "/metadata/finalizers", "value": ["x.example.com/y"]}), \
                path
        binding = cluster.api.get("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/"
                                  "dev-backup-operator")
        binding["subjects"][0]["namespace"] = "team-b"
        with pytest.raises(ApiException, match=f"in namespace {namespace.name}"):
            cluster.api.request("PUT", "/apis/rbac.authorization.k8s.io/v1/"
                                "clusterrolebindings/dev-backup-operator", body=binding,
                                query={"dryRun": "All"})
        with deployment:
            deployment.start()
            try:
                deployment.wait_serving()
                backups = f"/apis/example.com/v1/namespaces/{namespace.name}/backups"

                def denied() -> bool:
                    try:
                        cluster.api.request("POST", backups, body={
                            "apiVersion": "example.com/v1", "kind": "Backup",
                            "metadata": {"name": "no-schedule"},
                            "spec": {"database": "orders"}})
                    except ApiException as err:
                        return "spec.schedule is required" in str(err.body)
                    raise AssertionError("a Backup without a schedule was admitted")

                eventually(60, denied, message="the renamed validating webhook answers")
                created = cluster.api.request("POST", backups, body={
                    "apiVersion": "example.com/v1", "kind": "Backup",
                    "metadata": {"name": "nightly"},
                    "spec": {"database": "orders", "schedule": "0 3 * * *"}})
                assert created["metadata"]["labels"]["example.com/managed"] == "true"
                eventually(60, lambda: namespace.get("batch/v1", "CronJob", "nightly"),
                           message="the Backup is reconciled")

                def ready() -> bool:
                    backup = namespace.get("example.com/v1", "Backup", "nightly") or {}
                    return any(c["type"] == "Ready" and c["status"] == "True"
                               for c in (backup.get("status") or {}).get("conditions", ()))

                eventually(30, ready, message="the Backup's Ready condition is True")
                v2 = cluster.api.get(f"/apis/example.com/v2/namespaces/{namespace.name}"
                                     "/backups/nightly")
                assert v2["spec"]["source"] == {"database": "orders"}
                for kind in ("validating", "mutating"):
                    config = cluster.api.get("/apis/admissionregistration.k8s.io/v1/"
                                             f"{kind}webhookconfigurations/dev-backup-operator")
                    assert config["webhooks"][0]["clientConfig"].get("caBundle"), kind
                    with pytest.raises(ApiException):  # nothing under the plain name
                        cluster.api.get("/apis/admissionregistration.k8s.io/v1/"
                                        f"{kind}webhookconfigurations/backup-operator")
            finally:  # while the operator runs: its finalizer must let the Backups go
                _delete_backups(cluster, namespace)
    finally:
        deployment.delete()


def assert_policies_follow(docs: list[dict[str, Any]], namespace: str, account: str) -> None:
    """The kustomized policies guard the renamed objects and bind to ServiceAccount
    `namespace`/`account`, and the cluster-scoped documents say which namespace they
    belong to."""
    bound = [d["spec"]["paramRef"] for d in docs
             if d["kind"] == "ValidatingAdmissionPolicyBinding" and "paramRef" in d["spec"]]
    assert bound == [{"name": account, "namespace": namespace,
                      "parameterNotFoundAction": "Deny"}], bound
    for doc in docs:
        if doc["kind"] == "ValidatingAdmissionPolicy":
            for rule in doc["spec"]["matchConstraints"]["resourceRules"]:
                if rule["resources"] != ["customresourcedefinitions"]:
                    assert rule.get("resourceNames") == [account], (doc, rule)
    labelled = {d["kind"]: (d["metadata"].get("labels") or {}).get(INSTALLATION_LABEL)
                for d in docs if INSTALLATION_LABEL in (d["metadata"].get("labels") or {})}
    assert set(labelled) >= {"ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
                             "ValidatingWebhookConfiguration", "ValidatingAdmissionPolicy"}
    assert set(labelled.values()) == {namespace}, labelled


def _delete_backups(cluster: TestCluster, namespace: Namespace) -> None:
    cluster.api.request("DELETE", f"/apis/example.com/v1/namespaces/{namespace.name}/backups")
    eventually(60, lambda: not namespace.list("example.com/v1", "Backup"),
               message="the operator's finalizer released every Backup")


def test_a_prefix_suffix_and_namespace_overlay_keeps_every_policy_on_the_renamed_objects(
        cluster: TestCluster, namespace: Namespace, kubectl: str, tmp_path: Path) -> None:
    write_kustomize_base(tmp_path / "base", operator_manifests(
        operator, app="backup_operator:operator", namespace="backup-operator",
        image="example.com/backup-operator:0.1.0", replicas=1))
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        f"namePrefix: dev-\nnameSuffix: -x\nnamespace: {namespace.name}\n"
        "resources: [../base]\n")
    stream = _kubectl(kubectl, cluster, "kustomize", str(overlay))
    rendered = list(yaml.safe_load_all(stream))
    name = "dev-backup-operator-x"
    assert_policies_follow(rendered, namespace.name, name)
    installed = LocalDeployment(cluster, operator, app="backup_operator:operator",
                                namespace=namespace.name, documents=rendered)
    _kubectl(kubectl, cluster, "apply", "-f", "-", stdin=stream)
    try:
        account = Api(api_client(str(installed.kubeconfig())))
        hooks = f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{name}"
        refusal = eventually(30, lambda: json_patch(account, hooks, {
            "op": "add", "path": "/metadata/ownerReferences", "value": [{
                "apiVersion": "v1", "kind": "Namespace", "name": "gone",
                "uid": "6f1e8c57-0000-4000-8000-000000000000"}]}),
            message="the self-protection policy enforced on the renamed objects")
        assert f"system:serviceaccount:{namespace.name}:{name} may change only" in refusal
        # The operator's own patch (as `patch_bundle` makes it) is admitted.
        current = cluster.api.get(hooks)
        assert json_patch(account, hooks, {
            "op": "test", "path": "/metadata/resourceVersion",
            "value": current["metadata"]["resourceVersion"]}, {
            "op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": "Y2E="}) is None
        binding = cluster.api.get(f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{name}")
        binding["subjects"][0]["namespace"] = "team-b"
        with pytest.raises(ApiException, match=f"in namespace {namespace.name}"):
            cluster.api.request("PUT", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/"
                                f"{name}", body=binding, query={"dryRun": "All"})
        print(f"\noverlay namePrefix dev-, nameSuffix -x, namespace {namespace.name}: "
              f"self-protection binds {namespace.name}/{name}, the installation policy "
              "guards the renamed binding")
    finally:
        installed.delete()
