"""The generated Helm charts rendered by a real ``helm template``: they render what the
plain generator prints for the same settings, and refuse what the operator cannot run with.

helm is built from its Go module by .ci/run (``HELM`` points at it); without it these
tests skip, with ``HELM`` set they fail when it is missing (as tests/unit/test_kube_score.py
with ``KUBE_SCORE``).
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from backup_operator import operator as backup_operator

from operator_kit import Operator
from operator_kit.manifests import operator_manifests, write_helm_chart
from operator_kit.webhooks.certificates import ExternalCertificate
from operator_kit.webhooks.server import AdmissionRequest
from tests.unit.test_helm_chart import BACKUP_APP, Report, ReportController, report_operator

HELM_VERSION = "v4.3.2"


def helm() -> str | None:
    found = os.environ.get("HELM") or shutil.which("helm")
    cached = Path.home() / ".cache" / "operator_kit" / f"helm-{HELM_VERSION}" / "helm"
    return found or (str(cached) if cached.exists() else None)


def run_helm(*args: str, home: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    """helm `args`, its cache, configuration and data under `home` (nothing in ~)."""
    tool = helm()
    if os.environ.get("HELM") and not os.access(os.environ["HELM"], os.X_OK):
        pytest.fail(f"HELM={os.environ['HELM']} is not an executable: build it with "
                    f"GOBIN=$(dirname $HELM) go install helm.sh/helm/v4/cmd/helm@{HELM_VERSION}")
    if tool is None:
        pytest.skip("helm not found: set HELM, or build it with go install "
                    f"helm.sh/helm/v4/cmd/helm@{HELM_VERSION} (.ci/run does)")
    env = {**os.environ, "HELM_CACHE_HOME": str(home / "cache"),
           "HELM_CONFIG_HOME": str(home / "config"), "HELM_DATA_HOME": str(home / "data")}
    done = subprocess.run([tool, *args], capture_output=True, text=True, timeout=120,
                          env=env, check=False)
    if check:
        assert done.returncode == 0, f"helm {' '.join(args)}: {done.stderr}"
    return done


def as_helm_renders(docs: list[dict[str, Any]], chart: str) -> list[dict[str, Any]]:
    """The generator's documents with what Helm adds: managed-by Helm, the helm.sh/chart
    label, CRDs kept on uninstall."""
    out = []
    for doc in copy.deepcopy(docs):
        labels = doc["metadata"]["labels"]
        labels["app.kubernetes.io/managed-by"] = "Helm"
        labels["helm.sh/chart"] = chart
        if doc["kind"] == "Deployment":
            doc["spec"]["template"]["metadata"]["labels"][
                "app.kubernetes.io/managed-by"] = "Helm"
        if doc["kind"] == "CustomResourceDefinition":
            doc["metadata"].setdefault("annotations", {})["helm.sh/resource-policy"] = "keep"
        out.append(doc)
    return sorted(out, key=lambda d: (d["kind"], d["metadata"]["name"]))


def rendered(chart: Path, tmp_path: Path, *args: str) -> list[dict[str, Any]]:
    text = run_helm("template", "rel", str(chart), *args, home=tmp_path).stdout
    docs = [d for d in yaml.safe_load_all(text) if d]
    return sorted(docs, key=lambda d: (d["kind"], d["metadata"]["name"]))


def test_helm_lint_passes_the_generated_charts(tmp_path: Path) -> None:
    for operator, app in ((backup_operator, BACKUP_APP),
                          (report_operator(), "reports:operator"),
                          (report_operator(elects=True), "reports:operator")):
        write_helm_chart(tmp_path / operator.name, operator, app=app)
        done = run_helm("lint", "--strict", str(tmp_path / operator.name), home=tmp_path)
        assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout, done.stdout
    # and with every scheduling and pod metadata value set
    (tmp_path / "scheduling.yaml").write_text(yaml.safe_dump(SCHEDULING))
    done = run_helm("lint", "--strict", str(tmp_path / backup_operator.name), "-f",
                    str(tmp_path / "scheduling.yaml"), home=tmp_path)
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout, done.stdout


def test_default_values_render_the_generators_documents_in_the_release_namespace(
        tmp_path: Path) -> None:
    write_helm_chart(tmp_path / "chart", backup_operator, app=BACKUP_APP,
                     image="example.com/backup-operator:0.2.0")
    docs = rendered(tmp_path / "chart", tmp_path, "--namespace", "team-a")
    assert docs == as_helm_renders(operator_manifests(
        backup_operator, app=BACKUP_APP, namespace="team-a",
        image="example.com/backup-operator:0.2.0", namespace_document=False,
        instance="rel"), "backup-operator-0.2.0")
    kinds = {d["kind"] for d in docs}
    assert {"PodDisruptionBudget", "MutatingWebhookConfiguration"} <= kinds
    assert "Namespace" not in kinds, "helm install -n NS --create-namespace makes it"


@pytest.mark.parametrize(("flags", "settings"), [
    (["--set", "image.repository=registry.example/backup", "--set", "image.tag=9.9.9"],
     {"image": "registry.example/backup:9.9.9"}),
    (["--set", "replicas=1"], {"replicas": 1}),
    (["--set", "replicas=4", "--set", "namespace=backup-system"],
     {"replicas": 4, "namespace": "backup-system"}),
    (["--set", "certificate.mode=external", "--set", "certificate.secret=backup-tls"],
     {"certificate": ExternalCertificate("backup-tls")}),
    (["--set", "certificate.mode=external", "--set", "certificate.secret=backup-tls",
      "--set", "certificate.certificateName=backup-cert", "--set", "replicas=1"],
     {"certificate": ExternalCertificate("backup-tls", "backup-cert"), "replicas": 1}),
    (["--set", "metrics.secure=true"], {"metrics_secure": True}),
    (["--set", "metrics.secure=true", "--set", "certificate.mode=external", "--set",
      "certificate.secret=backup-tls", "--set", "replicas=1"],
     {"metrics_secure": True, "certificate": ExternalCertificate("backup-tls"),
      "replicas": 1}),
], ids=["image", "one-replica", "namespace-and-replicas", "external-certificate",
        "external-certificate-one-replica", "metrics-secure",
        "metrics-secure-external-certificate-one-replica"])
def test_values_render_what_the_generator_prints_with_the_same_settings(
        flags: list[str], settings: dict[str, Any], tmp_path: Path) -> None:
    write_helm_chart(tmp_path / "chart", backup_operator, app=BACKUP_APP,
                     image="example.com/backup-operator:0.2.0")
    docs = rendered(tmp_path / "chart", tmp_path, "--namespace", "team-a", *flags)
    expected = operator_manifests(
        backup_operator, app=BACKUP_APP, namespace=settings.get("namespace", "team-a"),
        image=settings.get("image", "example.com/backup-operator:0.2.0"),
        replicas=settings.get("replicas"), certificate=settings.get("certificate"),
        namespace_document=False, version="0.2.0", instance="rel",
        metrics_secure=settings.get("metrics_secure", False))
    assert docs == as_helm_renders(expected, "backup-operator-0.2.0")


@pytest.mark.parametrize(("operator", "flags", "replicas"), [
    (report_operator(), [], 1), (report_operator(elects=True), [], 2),
    (report_operator(elects=True), ["--set", "replicas=3"], 3),
    (report_operator(shards=True), [], 3),
    (report_operator(shards=True), ["--set", "replicas=1"], 1),
    (report_operator(elects=True), ["--set", "metrics.secure=true"], 2)],
    ids=["one-replica", "leader-election", "leader-election-3", "sharded", "sharded-1",
         "metrics-secure"])
def test_an_operator_without_webhooks_renders_its_own_command_line(
        operator: Operator, flags: list[str], replicas: int, tmp_path: Path) -> None:
    write_helm_chart(tmp_path / "chart", operator, app="reports:operator",
                     image="example.com/report-operator:1.0.0")
    docs = rendered(tmp_path / "chart", tmp_path, "--namespace", "reports", *flags)
    assert docs == as_helm_renders(operator_manifests(
        operator, app="reports:operator", namespace="reports",
        image="example.com/report-operator:1.0.0", replicas=replicas,
        namespace_document=False, instance="rel",
        metrics_secure="metrics.secure=true" in flags), "report-operator-1.0.0")
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["python", "-m", "operator_kit"]
    assert deployment["spec"]["replicas"] == replicas


def test_pull_policy_pull_secrets_resources_and_a_digest_reach_the_container(
        tmp_path: Path) -> None:
    write_helm_chart(tmp_path / "chart", backup_operator, app=BACKUP_APP)
    values = tmp_path / "mine.yaml"
    digest = "sha256:" + "0" * 64
    values.write_text(yaml.safe_dump({
        "image": {"repository": "registry.example/backup", "tag": digest,
                  "pullPolicy": "Always"},
        "imagePullSecrets": [{"name": "registry-credentials"}],
        "resources": {"requests": {"cpu": "10m", "memory": "64Mi"},
                      "limits": {"memory": "128Mi", "cpu": None}}}))
    docs = rendered(tmp_path / "chart", tmp_path, "-f", str(values))
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == f"registry.example/backup@{digest}"
    assert container["imagePullPolicy"] == "Always"
    # Helm merges a values file into the defaults; null removes a default.
    assert container["resources"] == {
        "requests": {"cpu": "10m", "memory": "64Mi", "ephemeral-storage": "16Mi"},
        "limits": {"memory": "128Mi", "ephemeral-storage": "64Mi"}}
    assert pod["imagePullSecrets"] == [{"name": "registry-credentials"}]


SCHEDULING = {
    "nodeSelector": {"kubernetes.io/os": "linux", "pool": "operators"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "operators",
                     "effect": "NoSchedule"}],
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "pool", "operator": "In", "values": ["operators"]}]}]}}},
    "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                   "whenUnsatisfiable": "ScheduleAnyway"}],
    "priorityClassName": "system-cluster-critical",
    "podLabels": {"team": "storage", "app.kubernetes.io/name": "not-the-selector"},
    "podAnnotations": {"example.com/owner": "storage", "prometheus.io/scrape": "false"},
    "extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"},
                 {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
}
"""Every scheduling and pod metadata value, set (tests/cluster/test_helm_cluster.py
installs them)."""


def test_scheduling_and_pod_metadata_values_reach_the_pod(tmp_path: Path) -> None:
    write_helm_chart(tmp_path / "chart", backup_operator, app=BACKUP_APP)
    values = tmp_path / "scheduling.yaml"
    values.write_text(yaml.safe_dump(SCHEDULING))
    docs = rendered(tmp_path / "chart", tmp_path, "-f", str(values), "--set", "replicas=2")
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    template = deployment["spec"]["template"]
    pod = template["spec"]
    for name in ("nodeSelector", "tolerations", "topologySpreadConstraints",
                 "priorityClassName"):
        assert pod[name] == SCHEDULING[name], name
    assert pod["affinity"] == SCHEDULING["affinity"], "the given affinity replaces the default"
    # the chart's own labels stay (the Deployment selects by them); annotations may change
    assert template["metadata"]["labels"]["app.kubernetes.io/name"] == "backup-operator"
    assert template["metadata"]["labels"]["team"] == "storage"
    assert template["metadata"]["annotations"] == {
        "example.com/owner": "storage", "prometheus.io/scrape": "false",
        "prometheus.io/scheme": "https", "prometheus.io/port": "8443"}
    env = pod["containers"][0]["env"]
    assert env[-2:] == SCHEDULING["extraEnv"], "after the operator's own"
    assert env[0]["name"] == "OPERATOR_KIT_APP"


def test_without_scheduling_values_several_replicas_keep_the_anti_affinity(
        tmp_path: Path) -> None:
    write_helm_chart(tmp_path / "chart", backup_operator, app=BACKUP_APP)
    docs = rendered(tmp_path / "chart", tmp_path, "--set", "replicas=2",
                    "--set", "tolerations[0].operator=Exists")
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    assert "podAntiAffinity" in pod["affinity"]
    assert pod["tolerations"] == [{"operator": "Exists"}]
    assert not {"nodeSelector", "priorityClassName", "topologySpreadConstraints"} & set(pod)


def test_an_operator_that_brings_its_own_certificate_renders_it_and_refuses_managed(
        tmp_path: Path) -> None:
    own = Operator("report-operator", [ReportController()],
                   webhook_certificate=ExternalCertificate("own-tls"))

    @own.webhooks.validate(Report, "/validate-report")
    def validate(request: AdmissionRequest[Report]) -> None:
        """Accept everything: the chart only needs a webhook."""

    write_helm_chart(tmp_path / "chart", own, app="reports:operator",
                     image="example.com/r:1.0.0")
    assert yaml.safe_load((tmp_path / "chart" / "values.yaml").read_text())["certificate"] == {
        "mode": "external", "secret": "own-tls", "certificateName": ""}
    docs = rendered(tmp_path / "chart", tmp_path, "--namespace", "team-a")
    assert docs == as_helm_renders(operator_manifests(
        own, app="reports:operator", namespace="team-a", image="example.com/r:1.0.0",
        namespace_document=False, instance="rel"), "report-operator-1.0.0")
    refused = run_helm("template", "rel", str(tmp_path / "chart"), "--set",
                       "certificate.mode=managed", home=tmp_path, check=False)
    assert refused.returncode == 1
    assert "report-operator brings its own webhook certificate" in refused.stderr


@pytest.mark.parametrize(("operator", "flags", "message"), [
    (report_operator(), ["--set", "replicas=2"],
     "replicas=2 without leader election: every replica would reconcile the same objects at "
     "once; use replicas: 1, or give Operator 'report-operator' "
     "leader_election=LeaderElection()"),
    (backup_operator, ["--set", "certificate.mode=external"],
     "certificate.mode=external needs certificate.secret: the kubernetes.io/tls Secret "
     "(cert-manager's) in namespace team-a that backup-operator serves its webhooks with"),
    (backup_operator, ["--set", "certificate.mode=cert-manager"], "/certificate/mode"),
    (backup_operator, ["--set", "replica=3"], "additional properties 'replica' not allowed"),
    (backup_operator, ["--set", "replicas=-1"], "/replicas"),
    (backup_operator, ["--set", "namespace=Team_A"], "/namespace"),
    (backup_operator, ["--set", "tolerations.key=dedicated"],
     "at '/tolerations': got object, want array"),
    (backup_operator, ["--set", "nodeSelector.zone=1"],
     "at '/nodeSelector/zone': got number, want string"),
    (backup_operator, ["--set", "extraEnv[0].value=x"], "/extraEnv/0"),
    (backup_operator, ["--set", "affinity.nodeAfinity.x=y"],
     "additional properties 'nodeAfinity' not allowed"),
    (backup_operator, ["--set", "priorityClassName=High_Priority"], "/priorityClassName"),
    (backup_operator, ["--set", "podLabels=team"], "at '/podLabels': got string, want object"),
], ids=["replicas-without-leader-election", "external-without-secret", "unknown-mode",
        "unknown-value", "negative-replicas", "bad-namespace", "tolerations-not-a-list",
        "node-selector-number", "extra-env-without-name", "affinity-misspelt",
        "bad-priority-class", "pod-labels-not-a-map"])
def test_values_the_operator_cannot_run_with_fail_the_render_saying_why(
        operator: Operator, flags: list[str], message: str, tmp_path: Path) -> None:
    write_helm_chart(tmp_path / "chart", operator, app="op:operator")
    done = run_helm("template", "rel", str(tmp_path / "chart"), "--namespace", "team-a",
                    *flags, home=tmp_path, check=False)
    assert done.returncode == 1 and not done.stdout
    assert message in done.stderr, done.stderr


def test_a_namespace_that_looks_like_a_number_stays_a_string(tmp_path: Path) -> None:
    write_helm_chart(tmp_path / "chart", backup_operator, app=BACKUP_APP)
    docs = rendered(tmp_path / "chart", tmp_path, "--set-string", "namespace=123")
    namespaced = [d for d in docs if "namespace" in d["metadata"]]
    assert namespaced and all(d["metadata"]["namespace"] == "123" for d in namespaced)
    (binding,) = [d for d in docs if d["kind"] == "ClusterRoleBinding"]
    assert binding["subjects"][0]["namespace"] == "123"
