"""Generated manifests against the real API server: they apply, and their RBAC is needed."""

from __future__ import annotations

from pathlib import Path

from backup_operator import operator

from operator_kit.manifests._deploy import operator_manifests
from operator_kit.testing import Namespace, TestCluster, eventually
from operator_kit.testing.deploy import LocalDeployment

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
