"""The Backup sample's manifests: golden output, and RBAC that is exactly Operator.rules()."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml
from backup_operator import operator

from operator_kit.rbac import Rule, merge_rules

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
               for d in docs if d["kind"] in ("ClusterRole", "Role") for r in d["rules"]]
    assert merge_rules(granted) == operator.rules()
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
    crd = docs["CustomResourceDefinition"]
    assert crd["spec"]["conversion"]["strategy"] == "Webhook"
    assert [v["name"] for v in crd["spec"]["versions"]] == ["v1", "v2"]
