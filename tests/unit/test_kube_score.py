"""kube-score on the generated manifests: every finding is fixed or explained here.

kube-score is built from the Go module proxy by .ci/run (``KUBE_SCORE`` points at it);
without it these tests skip, with it they fail on any CRITICAL or WARNING that is not in
`EXPLAINED` (docs/how-to/deploying.md, "kube-score").
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from backup_operator import operator

from operator_kit import Action, Context, Controller, CustomResource, LeaderElection, Operator
from operator_kit.manifests import operator_manifests, to_yaml
from operator_kit.webhooks.certificates import ExternalCertificate

KUBE_SCORE_VERSION = "v1.20.0"

# (check text, why it stays) — each one explained in docs/how-to/deploying.md, "kube-score".
EXPLAINED = {
    "ImagePullPolicy is not set to Always":
        "IfNotPresent (Kubernetes' default for a tagged image) lets an image loaded into "
        "kind or minikube run; a cluster whose registry needs pull secrets sets Always",
    "The pod does not have a matching egress NetworkPolicy":
        "egress goes to the API server, whose address behind the kubernetes Service "
        "differs per cluster; a guessed rule would cut the operator off",
}


def kube_score() -> str | None:
    found = os.environ.get("KUBE_SCORE") or shutil.which("kube-score")
    cached = (Path.home() / ".cache" / "operator_kit" / f"kube-score-{KUBE_SCORE_VERSION}"
              / "kube-score")
    return found or (str(cached) if cached.exists() else None)


def findings(documents: str) -> list[str]:
    tool = kube_score()
    if tool is None:
        pytest.skip("kube-score not found: set KUBE_SCORE, or build it with go install "
                    f"github.com/zegl/kube-score/cmd/kube-score@{KUBE_SCORE_VERSION} "
                    "(.ci/run does)")
    result = subprocess.run(
        [tool, "score", "-", "--kubernetes-version", "v1.36", "--output-format", "ci"],
        input=documents.encode(), capture_output=True, timeout=120, check=False)
    lines = result.stdout.decode().splitlines()
    assert lines and result.returncode in (0, 1), result.stderr.decode()
    return [line for line in lines if line.startswith(("[CRITICAL]", "[WARNING]"))]


@pytest.mark.parametrize("certificate", [None, ExternalCertificate("backup-operator-tls")],
                         ids=["own-certificate", "cert-manager-secret"])
def test_kube_score_finds_nothing_unexplained_in_the_generated_manifests(
        certificate: ExternalCertificate | None) -> None:
    docs = operator_manifests(operator, app="backup_operator:operator",
                              namespace="backup-system",
                              image="registry.example/backup-operator:1.0.0",
                              certificate=certificate)
    found = findings(to_yaml(docs))
    unexplained = [line for line in found if not any(text in line for text in EXPLAINED)]
    assert not unexplained, "\n".join(unexplained)
    assert any("Deployment" in line for line in found), "kube-score saw the Deployment"


@dataclass
class ReportSpec:
    title: str


class Report(CustomResource):
    group = "reports.example.com"
    version = "v1"
    kind = "Report"
    spec: ReportSpec


class ReportController(Controller[Report]):
    resource = Report

    def reconcile(self, obj: Report, ctx: Context) -> Action:
        return Action.await_change()


@pytest.mark.parametrize("elects", [False, True], ids=["one-replica", "leader-election"])
def test_kube_score_finds_nothing_unexplained_without_webhooks(elects: bool) -> None:
    """The operator's own command line: probes and metrics over HTTP, no Service."""
    plain = Operator("report-operator", [ReportController()],
                     leader_election=LeaderElection() if elects else None)
    docs = operator_manifests(plain, app="reports:operator", namespace="report-system",
                              image="registry.example/report-operator:1.0.0")
    found = findings(to_yaml(docs))
    unexplained = [line for line in found if not any(text in line for text in EXPLAINED)]
    assert not unexplained, "\n".join(unexplained)
    assert any("Deployment" in line for line in found), "kube-score saw the Deployment"


def test_kube_score_flags_what_the_allow_list_does_not_cover() -> None:
    """The check can fail: a latest tag and one replica are findings, not explained."""
    docs = operator_manifests(operator, app="backup_operator:operator",
                              namespace="backup-system", image="backup-operator:latest",
                              replicas=1)
    found = findings(to_yaml(docs))
    assert any("Image with latest tag" in line for line in found), found
    assert any("few replicas" in line for line in found), found
