"""One installation per cluster (foreign owners), and a certificate brought along."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from backup_operator import operator

from operator_kit.api.rbac import Rule
from operator_kit.client.installation import foreign_owner, references
from operator_kit.manifests import operator_manifests
from operator_kit.webhooks.certificates import (
    INJECT_CA_FROM,
    ExternalCertificate,
    WebhookCertificate,
)


def docs_for(namespace: str, certificate: ExternalCertificate | None = None) -> dict[str, dict]:
    docs = operator_manifests(operator, app="backup_operator:operator", namespace=namespace,
                              image="x:1", certificate=certificate)
    return {d["kind"]: d for d in docs}


def test_the_objects_that_name_a_namespace_are_found_and_another_namespace_is_foreign() -> None:
    team_a = docs_for("team-a")
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration",
                 "CustomResourceDefinition", "ClusterRoleBinding"):
        assert {ns for _, ns, _ in references(team_a[kind])} == {"team-a"}, kind
        assert foreign_owner(team_a[kind], "team-a", "backup-operator") is None
        why = foreign_owner(team_a[kind], "team-b", "backup-operator")
        assert why is not None and "\n" not in why
        name = team_a[kind]["metadata"]["name"]
        assert why.startswith(f"{kind} {name} belongs to the installation in namespace team-a")
        assert "one installation per cluster" in why and "--namespace team-a" in why
    assert references(team_a["ClusterRole"]) == []


def test_another_service_in_the_same_namespace_is_foreign_too() -> None:
    config = docs_for("team-a")["ValidatingWebhookConfiguration"]
    why = foreign_owner(config, "team-a", "payments-operator")
    assert why is not None and "team-a/backup-operator, not team-a/payments-operator" in why


def test_check_without_a_reachable_cluster_fails_in_one_line_and_prints_no_manifests(
        tmp_path: Path) -> None:
    env = dict(os.environ, KUBECONFIG=str(tmp_path / "missing"))
    result = subprocess.run(
        [sys.executable, "-m", "operator_kit.manifests", "backup_operator:operator",
         "--namespace", "team-b", "--check"], capture_output=True, text=True, env=env,
        timeout=60, check=False)
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --check cannot read the cluster")


def test_a_certificate_brought_along_is_mounted_injected_and_never_written() -> None:
    docs = docs_for("team-a", ExternalCertificate("backup-operator-tls"))
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    tls = next(v for v in pod["volumes"] if v["name"] == "tls")
    assert tls == {"name": "tls", "secret": {"secretName": "backup-operator-tls",
                                             "defaultMode": 0o440}}
    assert pod["securityContext"]["fsGroup"] == 65532
    assert {"name": "OPERATOR_KIT_MANAGE_TLS", "value": "0"} in container["env"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "tls")
    assert mount["readOnly"] is True
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration",
                 "CustomResourceDefinition"):
        assert docs[kind]["metadata"]["annotations"] == {
            INJECT_CA_FROM: "team-a/backup-operator-tls"}, kind
    # Nothing in the RBAC writes a caBundle or a Secret.
    rules = [Rule(r["apiGroups"], r["resources"], r["verbs"], r.get("resourceNames", ()))
             for kind in ("ClusterRole", "Role") if kind in docs
             for r in docs[kind]["rules"]]
    for rule in rules:
        if {"validatingwebhookconfigurations", "mutatingwebhookconfigurations",
                "customresourcedefinitions"} & set(rule.resources):
            assert list(rule.verbs) == ["get"], rule
        assert "secrets" not in rule.resources or "watch" in rule.verbs, rule


def test_the_operator_setting_and_the_cli_flag_give_the_same_manifests(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from operator_kit.manifests.__main__ import main

    flag = subprocess.run(
        [sys.executable, "-m", "operator_kit.manifests", "backup_operator:operator",
         "--namespace", "team-a", "--image", "x:1", "--certificate-secret", "tls"],
        capture_output=True, text=True, timeout=60, check=True).stdout
    monkeypatch.setattr(operator, "webhook_certificate", ExternalCertificate("tls"))
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["backup_operator:operator", "--namespace", "team-a", "--image", "x:1"]) == 0
    assert out.getvalue() == flag
    assert "cert-manager.io/inject-ca-from: team-a/tls" in flag


def test_installing_without_pointing_the_server_leaves_the_environment_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the certificate keeper does: nothing leaks into servers started later."""
    monkeypatch.delenv("OPERATOR_KIT_TLS_CERT", raising=False)
    monkeypatch.delenv("OPERATOR_KIT_TLS_KEY", raising=False)
    files = WebhookCertificate.generate("s", "ns").install(tmp_path, point_server=False)
    assert files.cert.exists()
    assert "OPERATOR_KIT_TLS_CERT" not in os.environ
    assert "OPERATOR_KIT_TLS_KEY" not in os.environ
