"""The Helm chart as files: templates merged from the generator's variants, values, Chart.yaml
and the ``--helm DIR`` flag. `tests/unit/test_helm.py` renders the charts with a real helm."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from backup_operator import operator as backup_operator

from operator_kit import (
    Action,
    Context,
    Controller,
    CustomResource,
    LeaderElection,
    Operator,
    Sharding,
)
from operator_kit.manifests import helm_chart, operator_manifests, write_helm_chart
from operator_kit.manifests.__main__ import main as manifests_main
from operator_kit.manifests._helm import split_image
from operator_kit.manifests._template import Block, Either, Raw, When, merge, render
from operator_kit.webhooks.certificates import ExternalCertificate

BACKUP_APP = "backup_operator:operator"


@dataclass
class ReportSpec:
    title: str


class Report(CustomResource):
    group = "reports.helm.operator-kit.test"
    version = "v1"
    kind = "Report"
    spec: ReportSpec


class ReportController(Controller[Report]):
    resource = Report

    def reconcile(self, obj: Report, ctx: Context) -> Action:
        return Action.await_change()


def report_operator(*, elects: bool = False, shards: bool = False) -> Operator:
    """An operator without webhooks: its Deployment runs ``python -m operator_kit``."""
    return Operator("report-operator", [ReportController()],
                    leader_election=LeaderElection() if elects or shards else None,
                    sharding=Sharding() if shards else None)


# -- merging two variants ------------------------------------------------------------------

def test_what_both_variants_share_stays_as_it_is() -> None:
    doc = {"kind": "ConfigMap", "data": {"a": "1"}, "list": [1, 2]}
    assert merge("C", doc, dict(doc)) == doc


def test_a_key_one_variant_lacks_is_present_only_under_its_condition() -> None:
    merged = merge("C", {"a": 1, "b": 2}, {"a": 1, "c": 3})
    assert merged == {"a": 1, "b": When("not (C)", 2), "c": When("C", 3)}


def test_a_changed_scalar_is_either_value() -> None:
    assert merge("C", {"mode": "off"}, {"mode": "on"}) == {"mode": Either("C", "on", "off")}


def test_an_extra_list_item_is_guarded_and_a_changed_mapping_item_is_merged_field_by_field(
        ) -> None:
    off = [{"name": "a", "value": "1"}, {"name": "tls", "path": "/t"}]
    on = [{"name": "a", "value": "1"}, {"name": "tls", "path": "/t", "readOnly": True},
          {"name": "MANAGE", "value": "0"}]
    assert merge("C", off, on) == [
        {"name": "a", "value": "1"},
        {"name": "tls", "path": "/t", "readOnly": When("C", True)},
        When("C", {"name": "MANAGE", "value": "0"})]


def test_merging_merged_trees_keeps_the_inner_conditions() -> None:
    inner_off = merge("R", {"a": 1}, {"a": 1, "affinity": "x"})
    inner_on = merge("R", {"a": 1, "s": "y"}, {"a": 1, "s": "y", "affinity": "x"})
    assert merge("E", inner_off, inner_on) == {
        "a": 1, "affinity": When("R", "x"), "s": When("E", "y")}


# -- writing templates ---------------------------------------------------------------------

def test_conditions_are_written_at_the_indentation_of_what_they_guard() -> None:
    text = render([{"kind": "Deployment", "spec": {
        "replicas": Raw("TOKEN_R"), "resources": Block(".Values.resources"),
        "tls": When("C", True), "mode": Either("C", "on", "off"),
        "volumes": [{"name": "tls", "emptyDir": When("not (C)", {}),
                     "secret": When("C", {"secretName": "TOKEN_S"})}]}}],
        {"TOKEN_R": ".Values.replicas", "TOKEN_S": ".Values.secret"})
    assert text == """---
kind: Deployment
spec:
  replicas: {{ .Values.replicas }}
  resources: {{- toYaml .Values.resources | nindent 4 }}
  {{- if C }}
  tls: true
  {{- end }}
  {{- if C }}
  mode: 'on'
  {{- else }}
  mode: 'off'
  {{- end }}
  volumes:
    - name: tls
      {{- if C }}
      secret:
        secretName: "{{ .Values.secret }}"
      {{- else }}
      emptyDir: {}
      {{- end }}
"""


def test_a_string_with_a_token_is_quoted_and_a_literal_brace_pair_escaped() -> None:
    text = render([{"metadata": {"name": "op-installation-NS", "namespace": "NS"},
                    "data": {"message": "say {{ hello }}"}}], {"NS": 'include "op.ns" .'})
    assert 'name: "op-installation-{{ include "op.ns" . }}"' in text
    assert 'namespace: "{{ include "op.ns" . }}"' in text
    assert 'message: say {{ "{{" }} hello }}' in text


def test_a_document_only_one_variant_has_is_wrapped_whole() -> None:
    text = render([When("R", {"kind": "PodDisruptionBudget"})], {})
    assert text == "{{- if R }}\n---\nkind: PodDisruptionBudget\n{{- end }}\n"


# -- the chart's files ---------------------------------------------------------------------

def test_chart_yaml_names_the_operator_and_its_versions() -> None:
    files = helm_chart(backup_operator, app=BACKUP_APP, image="example.com/backup:1.2.3")
    chart = yaml.safe_load(files["Chart.yaml"])
    assert chart["apiVersion"] == "v2" and chart["name"] == "backup-operator"
    assert (chart["version"], chart["appVersion"]) == ("1.2.3", "1.2.3")
    assert chart["type"] == "application"
    unversioned = yaml.safe_load(helm_chart(backup_operator, app=BACKUP_APP)["Chart.yaml"])
    assert (unversioned["version"], unversioned["appVersion"]) == ("0.1.0", "latest")
    given = yaml.safe_load(helm_chart(backup_operator, app=BACKUP_APP, app_version="2024.1",
                                      chart_version="3.0.0-rc.1")["Chart.yaml"])
    assert (given["version"], given["appVersion"]) == ("3.0.0-rc.1", "2024.1")
    with pytest.raises(ValueError, match="not SemVer 2"):
        helm_chart(backup_operator, app=BACKUP_APP, chart_version="1.0")


def test_values_default_to_the_generator_settings() -> None:
    files = helm_chart(backup_operator, app=BACKUP_APP, image="example.com/backup:1.2.3",
                       namespace="backup-system", replicas=3,
                       certificate=ExternalCertificate("backup-tls", "backup-cert"))
    values = yaml.safe_load(files["values.yaml"])
    deployment = next(d for d in operator_manifests(
        backup_operator, app=BACKUP_APP, namespace="x", image="y") if d["kind"] == "Deployment")
    assert values == {
        "namespace": "backup-system",
        "image": {"repository": "example.com/backup", "tag": "", "pullPolicy": ""},
        "imagePullSecrets": [], "replicas": 3,
        "resources": deployment["spec"]["template"]["spec"]["containers"][0]["resources"],
        "extraEnv": [], "podLabels": {}, "podAnnotations": {}, "nodeSelector": {},
        "tolerations": [], "affinity": {}, "topologySpreadConstraints": [],
        "priorityClassName": "",
        "certificate": {"mode": "external", "secret": "backup-tls",
                        "certificateName": "backup-cert"},
        "metrics": {"secure": False}}


def test_values_of_an_operator_without_webhooks_have_no_certificate_and_its_default_replicas(
        ) -> None:
    values = yaml.safe_load(helm_chart(report_operator(), app="reports:operator")["values.yaml"])
    assert "certificate" not in values
    assert (values["namespace"], values["replicas"]) == ("", 1)
    assert values["image"] == {"repository": "report-operator", "tag": "", "pullPolicy": ""}
    elects = helm_chart(report_operator(elects=True), app="reports:operator")
    assert yaml.safe_load(elects["values.yaml"])["replicas"] == 2


def test_the_values_schema_describes_every_default_value() -> None:
    files = helm_chart(backup_operator, app=BACKUP_APP)
    schema = json.loads(files["values.schema.json"])
    values = yaml.safe_load(files["values.yaml"])
    assert set(values) <= set(schema["properties"])
    assert schema["additionalProperties"] is False
    assert schema["properties"]["certificate"]["properties"]["mode"]["enum"] == [
        "managed", "external"]


@pytest.mark.parametrize(("image", "split"), [
    ("example.com/op:1.0", ("example.com/op", "1.0")),
    ("registry:5000/team/op", ("registry:5000/team/op", "")),
    ("registry:5000/op:2", ("registry:5000/op", "2")),
    ("op@sha256:" + "a" * 64, ("op", "sha256:" + "a" * 64)),
])
def test_an_image_is_split_into_repository_and_tag(image: str, split: tuple[str, str]) -> None:
    assert split_image(image) == split


def test_templates_hold_every_document_with_the_values_in_place() -> None:
    files = helm_chart(backup_operator, app=BACKUP_APP)
    assert set(files) == {"Chart.yaml", "values.yaml", "values.schema.json",
                          "templates/_helpers.tpl", "templates/NOTES.txt",
                          "templates/crds.yaml", "templates/rbac.yaml",
                          "templates/deployment.yaml", "templates/metrics.yaml",
                          "templates/webhooks.yaml"}
    assert not any("zzhelmzz" in text for text in files.values()), "every token filled"
    deployment = files["templates/deployment.yaml"]
    assert deployment.startswith('{{- include "backup-operator.validate" . }}\n')
    assert "replicas: {{ .Values.replicas }}" in deployment
    assert 'image: "{{ include "backup-operator.image" . }}"' in deployment
    assert "resources: {{- toYaml .Values.resources | nindent 12 }}" in deployment
    assert 'namespace: "{{ include "backup-operator.namespace" . }}"' in deployment
    assert "{{- if gt (int .Values.replicas) 1 }}\n---\napiVersion: policy/v1" in deployment
    assert deployment.count("kind: Deployment") == 1, "one Deployment, conditions inside"
    crds = files["templates/crds.yaml"]
    assert "helm.sh/resource-policy: keep" in crds
    assert 'cert-manager.io/inject-ca-from: "{{ include "backup-operator.namespace" . }}/' in crds
    webhooks = files["templates/webhooks.yaml"]
    assert 'namespace: "{{ include "backup-operator.namespace" . }}"' in webhooks


def test_an_operator_without_webhooks_gets_no_webhook_templates_and_no_certificate() -> None:
    files = helm_chart(report_operator(), app="reports:operator")
    assert "templates/webhooks.yaml" not in files
    assert "certificate" not in "".join(text for name, text in files.items()
                                        if name.startswith("templates/"))
    assert "python -m operator_kit" not in files["templates/deployment.yaml"]
    assert "- operator_kit" in files["templates/deployment.yaml"]
    assert "replicas=%d without leader election" in files["templates/_helpers.tpl"]
    elects = helm_chart(report_operator(elects=True), app="reports:operator")
    assert "without leader election" not in elects["templates/_helpers.tpl"]


# -- the flag ------------------------------------------------------------------------------

def test_the_helm_flag_writes_the_chart_and_says_which_files(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = manifests_main(["--helm", str(tmp_path / "chart"), "--image",
                           "example.com/backup:0.3.0", "--replicas", "3"],
                          operator=backup_operator, app=BACKUP_APP)
    out, err = capsys.readouterr()
    assert (code, out) == (0, "")
    assert f"wrote {tmp_path / 'chart' / 'templates' / 'webhooks.yaml'}" in err
    values = yaml.safe_load((tmp_path / "chart" / "values.yaml").read_text())
    assert values["replicas"] == 3 and values["image"]["repository"] == "example.com/backup"


def test_a_rerun_removes_the_templates_of_components_that_are_gone(tmp_path: Path) -> None:
    write_helm_chart(tmp_path, backup_operator, app=BACKUP_APP)
    assert (tmp_path / "templates" / "webhooks.yaml").exists()
    write_helm_chart(tmp_path, report_operator(), app=BACKUP_APP)
    assert not (tmp_path / "templates" / "webhooks.yaml").exists()
    assert (tmp_path / "templates" / "deployment.yaml").exists()


@pytest.mark.parametrize(("argv", "line"), [
    (["--helm", "chart", "--kustomize", "base"], "--kustomize and --helm: give one of them (each "
     "writes the same documents in its own form)"),
    (["--helm", "FILE"], "--helm='FILE': not a directory; give the directory to write the "
     "Helm chart into"),
    (["--helm", "chart", "--chart-version", "1.0"], "--chart-version='1.0': not a SemVer 2 "
     "version, which Helm requires; give MAJOR.MINOR.PATCH, for example 0.1.0"),
])
def test_a_bad_helm_flag_is_one_line_naming_it(argv: list[str], line: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "file").write_text("")
    argv = [str(tmp_path / "file") if a == "FILE" else a for a in argv]
    line = line.replace("FILE", str(tmp_path / "file"))
    code = manifests_main(argv, operator=backup_operator, app=BACKUP_APP)
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err == f"error: {line}\n"
    assert not (tmp_path / "chart").exists()


def test_metrics_secure_is_a_value_defaulting_to_the_flag() -> None:
    files = helm_chart(backup_operator, app=BACKUP_APP, metrics_secure=True)
    assert yaml.safe_load(files["values.yaml"])["metrics"] == {"secure": True}
    assert "{{- if .Values.metrics.secure }}" in files["templates/metrics.yaml"]
    assert "backup-operator-metrics-reader" in files["templates/metrics.yaml"]
    assert "tokenreviews" in files["templates/rbac.yaml"]
    schema = json.loads(files["values.schema.json"])
    assert schema["properties"]["metrics"]["properties"]["secure"] == {"type": "boolean"}
