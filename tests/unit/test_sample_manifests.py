"""The Backup sample's manifests: golden output, and RBAC that is exactly Operator.rules()
and, as ``/metrics`` is secure by default, the rights to check a scraper's token."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml
from backup_operator import operator

from operator_kit.api.rbac import Rule, merge_rules
from operator_kit.client.delegated import RULES as METRICS_AUTH_RULES

GOLDEN = Path(__file__).parents[1] / "golden" / "backup-operator.yaml"
ARGS = ["backup_operator:operator", "--namespace", "backup-operator",
        "--image", "example.com/backup-operator:0.1.0"]


def generate() -> str:
    return subprocess.run([sys.executable, "-m", "operator_kit.manifests", *ARGS],
                          capture_output=True, text=True, check=True).stdout


def test_manifests_match_the_golden_file() -> None:
    """Any change to the generated manifests shows up here, and so in review.

    To accept a change: python -m operator_kit.manifests backup_operator:operator
    --namespace backup-operator --image example.com/backup-operator:0.1.0
    > tests/golden/backup-operator.yaml
    """
    assert generate() == GOLDEN.read_text()


def test_manifests_are_byte_identical_run_to_run() -> None:
    assert generate() == generate()


def test_roles_grant_exactly_what_operator_rules_derived() -> None:
    docs = list(yaml.safe_load_all(GOLDEN.read_text()))
    granted = [Rule(r["apiGroups"], r["resources"], r["verbs"], r.get("resourceNames", ()))
               for d in docs if d["kind"] in ("ClusterRole", "Role")
               and d["metadata"]["name"] != "backup-operator-metrics-reader"
               for r in d["rules"]]
    assert merge_rules(granted) == merge_rules([*operator.rules(), *METRICS_AUTH_RULES])
    assert not any("*" in (*r.verbs, *r.resources, *r.api_groups) for r in granted)


def test_deployment_runs_non_root_with_probes_on_the_tls_port() -> None:
    docs = {d["kind"]: d for d in yaml.safe_load_all(GOLDEN.read_text())}
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["serviceAccountName"] == "backup-operator"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "https",
                                                      "scheme": "HTTPS"}
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert {"name": "OPERATOR_KIT_APP", "value": "backup_operator:operator"} in container["env"]
    assert {"name": "OPERATOR_KIT_METRICS_SECURE", "value": "1"} in container["env"]
    crd = docs["CustomResourceDefinition"]
    assert crd["spec"]["conversion"]["strategy"] == "Webhook"
    assert [v["name"] for v in crd["spec"]["versions"]] == ["v1", "v2"]


def test_each_version_shows_the_database_from_its_own_path() -> None:
    crd = next(d for d in yaml.safe_load_all(GOLDEN.read_text())
               if d["kind"] == "CustomResourceDefinition")
    columns = {v["name"]: {c["name"]: c["jsonPath"] for c in v["additionalPrinterColumns"]}
               for v in crd["spec"]["versions"]}
    assert columns["v1"]["Database"] == ".spec.database"
    assert columns["v2"]["Database"] == ".spec.source.database"
    assert columns["v1"]["Age"] == columns["v2"]["Age"] == ".metadata.creationTimestamp"


def test_every_golden_document_carries_the_recommended_labels() -> None:
    docs = list(yaml.safe_load_all(GOLDEN.read_text()))
    assert docs[0] == {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": "backup-operator", "labels": docs[0]["metadata"]["labels"]}}
    for doc in docs:
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/version"] == "0.1.0", doc["kind"]
        assert {"name", "instance", "component", "part-of", "managed-by"} <= {
            key.removeprefix("app.kubernetes.io/") for key in labels}, doc["kind"]
