"""RBAC, webhook configurations and YAML output written from the code."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from operator_kit import (
    Action,
    Context,
    Controller,
    CustomResource,
    LeaderElection,
    Operator,
    Rule,
)
from operator_kit.api.rbac import guess_plural, merge_rules
from operator_kit.cli import apply_environment
from operator_kit.manifests import (
    Rbac,
    WebhookRule,
    WebhookTarget,
    kustomize_base,
    operator_manifests,
    to_yaml,
    webhook_configuration,
    write_kustomize_base,
)
from operator_kit.manifests.__main__ import main as manifests_main
from operator_kit.manifests._labels import version_of_image
from operator_kit.settings import NAME_ENV


@dataclass
class GadgetSpec:
    size: int


class Gadget(CustomResource):
    group = "gadgets.example.com"
    version = "v1"
    kind = "Gadget"
    spec: GadgetSpec


def test_rules_are_merged_per_group_and_resource_with_verbs_unioned_and_sorted() -> None:
    merged = merge_rules([
        Rule(["apps"], ["deployments"], ["watch", "get"]),
        Rule(["apps"], ["deployments", "statefulsets"], ["list", "get"]),
        Rule([""], ["configmaps"], ["create"]),
    ])
    assert [r.to_dict() for r in merged] == [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["get", "list"]},
    ]


def test_a_rule_given_a_string_instead_of_a_list_is_an_error() -> None:
    with pytest.raises(TypeError, match="list of strings"):
        Rule("apps", ["deployments"], ["get"])


def test_rbac_documents_bind_the_cluster_role_to_the_service_account() -> None:
    docs = Rbac("op", "ops").rules(Rule(["x.io"], ["things"], ["get"])).documents()
    sa, role, binding = docs
    assert (sa["kind"], sa["metadata"]) == ("ServiceAccount", {
        "name": "op", "namespace": "ops", "labels": sa["metadata"]["labels"]})
    assert role["rules"] == [{"apiGroups": ["x.io"], "resources": ["things"], "verbs": ["get"]}]
    assert binding["roleRef"]["name"] == "op"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "op", "namespace": "ops"}]


def test_leader_election_grants_its_own_lease_by_name_in_a_namespaced_role_only() -> None:
    docs = Rbac("op", "ops").rules(Rule(["x.io"], ["things"], ["get"])).leader_election() \
        .documents()
    kinds = [d["kind"] for d in docs]
    assert kinds == ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"]
    cluster_role = docs[1]
    assert all("leases" not in r["resources"] for r in cluster_role["rules"])
    role = docs[3]
    assert role["metadata"] == {"name": "op-own-namespace", "namespace": "ops",
                                "labels": role["metadata"]["labels"]}
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["op"],
         "verbs": ["get", "update"]}]


def test_webhook_configuration_is_safe_by_default_and_names_each_webhook() -> None:
    target = WebhookTarget("op", "ops", ca_bundle=b"CA")
    config = webhook_configuration("op", False, target, [WebhookRule(Gadget, "/validate")])
    assert config["kind"] == "ValidatingWebhookConfiguration"
    hook = config["webhooks"][0]
    assert hook["name"] == "validate.gadgets.example.com"
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["sideEffects"] == "None"
    assert hook["failurePolicy"] == "Fail"
    assert hook["clientConfig"] == {
        "service": {"name": "op", "namespace": "ops", "path": "/validate", "port": 443},
        "caBundle": "Q0E="}
    assert hook["rules"] == [{"apiGroups": ["gadgets.example.com"], "apiVersions": ["v1"],
                              "operations": ["CREATE", "UPDATE"], "resources": ["gadgets"],
                              "scope": "Namespaced"}]


def test_fail_open_mutating_configuration_with_selectors_and_timeout() -> None:
    config = webhook_configuration(
        "op", True, WebhookTarget("op", "ops"), [WebhookRule(Gadget, "/mutate")],
        fail_closed=False, namespace_selector={"matchLabels": {"team": "a"}}, timeout_seconds=5)
    hook = config["webhooks"][0]
    assert config["kind"] == "MutatingWebhookConfiguration"
    assert hook["failurePolicy"] == "Ignore"
    assert hook["namespaceSelector"] == {"matchLabels": {"team": "a"}}
    assert hook["timeoutSeconds"] == 5
    assert "caBundle" not in hook["clientConfig"]
    with pytest.raises(ValueError, match="between 1 and 30"):
        webhook_configuration("op", True, WebhookTarget("op", "ops"), [], timeout_seconds=60)


def test_yaml_stream_is_deterministic_and_round_trips() -> None:
    docs = Rbac("op", "ops").rules(Rule(["b"], ["y"], ["get"]), Rule(["a"], ["x"], ["list"])) \
        .documents()
    first, second = to_yaml(docs), to_yaml(list(docs))
    assert first == second
    assert first.startswith("---\napiVersion: v1\nkind: ServiceAccount\n")
    assert list(yaml.safe_load_all(first)) == docs


def test_plural_guess_follows_kubernetes() -> None:
    assert [guess_plural(k) for k in ("CronJob", "Ingress", "NetworkPolicy", "Endpoints",
                                      "Gateway")] == [
        "cronjobs", "ingresses", "networkpolicies", "endpoints", "gateways"]


# ---------------------------------------------------------------- versions and conversion


@dataclass
class GizmoSpec:
    size: int


@dataclass
class GizmoSpecV2:
    size: int
    colour: str = "grey"


class Gizmo(CustomResource):
    group = "gizmos.example.com"
    version = "v1"
    kind = "Gizmo"
    spec: GizmoSpec


class GizmoV2(CustomResource, version_of=Gizmo):
    version = "v2"
    storage = True
    spec: GizmoSpecV2


class GizmoController(Controller[Gizmo]):
    resource = Gizmo

    def reconcile(self, obj: Gizmo, ctx: Context) -> Action:
        return Action.await_change()


def gizmo_operator(with_converter: bool, *, elects: bool = False) -> Operator:
    operator = Operator("gizmo-operator", [GizmoController()],
                        leader_election=LeaderElection() if elects else None)
    if with_converter:
        operator.webhooks.convert("/convert")(lambda obj, desired: obj)
    return operator


def test_versions_that_differ_without_a_converter_are_warned_about_as_data_loss() -> None:
    with pytest.warns(UserWarning, match=r"Gizmo is served as v1, v2 with different schemas"):
        docs = operator_manifests(gizmo_operator(False), app="m:operator", namespace="ns",
                                  image="img")
    crd = next(d for d in docs if d["kind"] == "CustomResourceDefinition")
    assert "conversion" not in crd["spec"]


def test_versions_with_a_converter_get_the_conversion_webhook_and_no_warning(
    recwarn: pytest.WarningsRecorder,
) -> None:
    docs = operator_manifests(gizmo_operator(True), app="m:operator", namespace="ns",
                              image="img")
    crd = next(d for d in docs if d["kind"] == "CustomResourceDefinition")
    assert crd["spec"]["conversion"]["strategy"] == "Webhook"
    assert [str(w.message) for w in recwarn] == []


def test_each_kind_gets_the_converter_registered_for_it(recwarn: pytest.WarningsRecorder) -> None:
    operator = gizmo_operator(False)
    operator.webhooks.convert("/convert-other", kind=Widgetish)(lambda obj, desired: obj)
    operator.webhooks.convert("/convert-gizmo", kind=GizmoV2)(lambda obj, desired: obj)
    docs = operator_manifests(operator, app="m:operator", namespace="ns", image="img")
    crd = next(d for d in docs if d["kind"] == "CustomResourceDefinition")
    webhook = crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"]
    assert webhook["path"] == "/convert-gizmo"
    assert [str(w.message) for w in recwarn] == []


class Widgetish(CustomResource):
    group = "widgetish.example.com"
    version = "v1"
    kind = "Widgetish"
    spec: GizmoSpec


# ---------------------------------------------------------------- namespace, labels, kustomize

RECOMMENDED = ("name", "instance", "version", "component", "part-of", "managed-by")


def webhook_operator() -> Operator:
    operator = gizmo_operator(True, elects=True)
    operator.webhooks.validate(Gizmo, "/validate")(lambda request: None)
    operator.webhooks.mutate(Gizmo, "/mutate")(lambda obj, request: obj)
    return operator


def test_the_stream_begins_with_its_namespace_unless_turned_off() -> None:
    docs = operator_manifests(webhook_operator(), app="m:operator", namespace="ops",
                              image="img:1.0")
    assert docs[0]["kind"] == "Namespace"
    assert docs[0]["metadata"]["name"] == "ops"
    assert [d["kind"] for d in docs].count("Namespace") == 1
    without = operator_manifests(webhook_operator(), app="m:operator", namespace="ops",
                                 image="img:1.0", namespace_document=False)
    assert "Namespace" not in [d["kind"] for d in without]
    assert without == docs[1:]


def test_namespaces_kubernetes_makes_get_no_namespace_document() -> None:
    for namespace in ("default", "kube-system"):
        docs = operator_manifests(webhook_operator(), app="m:operator", namespace=namespace,
                                  image="img")
        assert "Namespace" not in [d["kind"] for d in docs]


def test_every_document_and_the_pod_template_carry_the_recommended_labels() -> None:
    docs = operator_manifests(webhook_operator(), app="m:operator", namespace="ops",
                              image="example.com/gizmo:1.2.3", part_of="gadgets")
    kinds = {d["kind"] for d in docs}
    assert kinds >= {"Namespace", "CustomResourceDefinition", "ClusterRole", "Deployment",
                     "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"}
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    for labels in [d["metadata"]["labels"] for d in docs] + [
            deployment["spec"]["template"]["metadata"]["labels"]]:
        assert list(labels)[:6] == [f"app.kubernetes.io/{k}" for k in RECOMMENDED]
        assert labels["app.kubernetes.io/name"] == "gizmo-operator"
        assert labels["app.kubernetes.io/instance"] == "gizmo-operator"
        assert labels["app.kubernetes.io/version"] == "1.2.3"
        assert labels["app.kubernetes.io/part-of"] == "gadgets"
        assert labels["app.kubernetes.io/managed-by"] == "operator-kit"
    components = {d["kind"]: d["metadata"]["labels"]["app.kubernetes.io/component"]
                  for d in docs}
    assert components == {
        "Namespace": "namespace", "CustomResourceDefinition": "crd", "ServiceAccount": "rbac",
        "ClusterRole": "rbac", "ClusterRoleBinding": "rbac", "Role": "rbac",
        "RoleBinding": "rbac", "Service": "operator", "Deployment": "operator",
        "PodDisruptionBudget": "operator", "NetworkPolicy": "operator",
        "ValidatingWebhookConfiguration": "webhook",
        "MutatingWebhookConfiguration": "webhook", "ValidatingAdmissionPolicy": "rbac",
        "ValidatingAdmissionPolicyBinding": "rbac"}


def test_selectors_select_by_name_only_so_a_new_version_keeps_them() -> None:
    def selectors(image: str) -> list[object]:
        docs = operator_manifests(webhook_operator(), app="m:operator", namespace="ops",
                                  image=image)
        by_kind = {d["kind"]: d for d in docs}
        return [by_kind["Deployment"]["spec"]["selector"],
                by_kind["Service"]["spec"]["selector"],
                by_kind["PodDisruptionBudget"]["spec"]["selector"]]

    assert selectors("img:1.0") == selectors("img:2.0") == [
        {"matchLabels": {"app.kubernetes.io/name": "gizmo-operator"}},
        {"app.kubernetes.io/name": "gizmo-operator"},
        {"matchLabels": {"app.kubernetes.io/name": "gizmo-operator"}}]


def test_version_label_comes_from_the_image_tag_and_is_left_out_without_one() -> None:
    assert version_of_image("example.com:5000/team/op:0.1.0") == "0.1.0"
    assert version_of_image("example.com:5000/team/op") is None
    assert version_of_image("op@sha256:" + "a" * 64) is None
    docs = operator_manifests(webhook_operator(), app="m:operator", namespace="ops",
                              image="registry:5000/op")
    assert all("app.kubernetes.io/version" not in d["metadata"]["labels"] for d in docs)


def test_a_version_that_is_no_label_value_is_refused_naming_the_label() -> None:
    with pytest.raises(ValueError, match=r"app.kubernetes.io/version '1.0 beta' is not a "
                                         "valid label value"):
        operator_manifests(webhook_operator(), app="m:operator", namespace="ops",
                           image="img", version="1.0 beta")


def test_the_deployment_tells_the_operator_the_names_kustomize_may_rewrite() -> None:
    operator = webhook_operator()
    docs = operator_manifests(operator, app="m:operator", namespace="ops", image="img")
    env = next(d for d in docs if d["kind"] == "Deployment")[
        "spec"]["template"]["spec"]["containers"][0]["env"]
    assert [e for e in env if e["name"] in NAME_ENV.values()] == [
        {"name": "OPERATOR_KIT_WEBHOOK_SERVICE", "value": "gizmo-operator"},
        {"name": "OPERATOR_KIT_VALIDATING_WEBHOOK_CONFIGURATION", "value": "gizmo-operator"},
        {"name": "OPERATOR_KIT_MUTATING_WEBHOOK_CONFIGURATION", "value": "gizmo-operator"}]


def test_the_operator_uses_the_names_its_environment_gives(
        monkeypatch: pytest.MonkeyPatch) -> None:
    operator = webhook_operator()
    monkeypatch.setenv("OPERATOR_KIT_WEBHOOK_SERVICE", "dev-gizmo-operator")
    monkeypatch.setenv("OPERATOR_KIT_VALIDATING_WEBHOOK_CONFIGURATION", "dev-gizmo-v")
    monkeypatch.setenv("OPERATOR_KIT_MUTATING_WEBHOOK_CONFIGURATION", "dev-gizmo-m")
    apply_environment(operator)
    assert operator.webhook_service == "dev-gizmo-operator"
    assert operator._ca_bundle_targets() == (["dev-gizmo-v"], ["dev-gizmo-m"],
                                             ["gizmos.gizmos.example.com"])
    names = {tuple(r.resource_names) for r in operator.rules()
             if r.resources[0].endswith("webhookconfigurations")}
    assert names == {("dev-gizmo-v",), ("dev-gizmo-m",)}
    assert operator.webhook_secret == "gizmo-operator-webhook-tls", "created at run time"


def test_the_kustomize_base_holds_the_stream_one_file_per_concern() -> None:
    docs = operator_manifests(webhook_operator(), app="m:operator", namespace="ops",
                              image="img")
    files = kustomize_base(docs)
    assert list(files) == ["namespace.yaml", "crds.yaml", "rbac.yaml", "deployment.yaml",
                           "webhooks.yaml", "kustomization.yaml", "kustomizeconfig.yaml"]
    (kustomization,) = yaml.safe_load_all(files["kustomization.yaml"])
    assert kustomization["resources"] == list(files)[:5]
    assert kustomization["configurations"] == ["kustomizeconfig.yaml"]
    together = [d for name in kustomization["resources"]
                for d in yaml.safe_load_all(files[name])]
    assert sorted(map(repr, together)) == sorted(map(repr, docs))
    assert [d["kind"] for d in yaml.safe_load_all(files["deployment.yaml"])] == [
        "Service", "Deployment", "PodDisruptionBudget", "NetworkPolicy"]


def test_kustomizeconfig_names_the_references_kustomize_does_not_know() -> None:
    (config,) = yaml.safe_load_all(kustomize_base([])["kustomizeconfig.yaml"])
    paths = {(ref["kind"], spec["kind"], spec["path"]) for ref in config["nameReference"]
             for spec in ref["fieldSpecs"]}
    assert paths == {
        ("Service", "CustomResourceDefinition",
         "spec/conversion/webhook/clientConfig/service/name"),
        ("Service", "Deployment", "spec/template/spec/containers/env/value"),
        ("Service", "ServiceMonitor", "spec/endpoints/tlsConfig/serverName"),
        ("ValidatingWebhookConfiguration", "ClusterRole", "rules/resourceNames"),
        ("ValidatingWebhookConfiguration", "Deployment",
         "spec/template/spec/containers/env/value"),
        ("MutatingWebhookConfiguration", "ClusterRole", "rules/resourceNames"),
        ("MutatingWebhookConfiguration", "Deployment",
         "spec/template/spec/containers/env/value"),
        *((referred, "ValidatingAdmissionPolicy",
           "spec/matchConstraints/resourceRules/resourceNames")
          for referred in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration",
                           "ClusterRole", "ClusterRoleBinding")),
        ("ServiceAccount", "ValidatingAdmissionPolicyBinding", "spec/paramRef/name")}
    assert config["namespace"] == [
        {"kind": "ValidatingAdmissionPolicyBinding", "group": "admissionregistration.k8s.io",
         "path": "spec/paramRef/namespace"},
        {"path": "metadata/labels/operator-kit.io\\/installation"}]


def test_rewriting_a_base_removes_files_of_concerns_that_are_gone(tmp_path: Path) -> None:
    docs = operator_manifests(webhook_operator(), app="m:operator", namespace="ops",
                              image="img")
    write_kustomize_base(tmp_path, docs)
    assert (tmp_path / "webhooks.yaml").exists()
    write_kustomize_base(tmp_path, [d for d in docs if "Webhook" not in d["kind"]])
    assert not (tmp_path / "webhooks.yaml").exists()
    (kustomization,) = yaml.safe_load_all((tmp_path / "kustomization.yaml").read_text())
    assert "webhooks.yaml" not in kustomization["resources"]


def test_cli_writes_a_kustomize_base_and_leaves_out_the_namespace_on_request(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    operator = webhook_operator()
    assert manifests_main(["--namespace", "ops", "--no-namespace", "--app-version", "7"],
                          operator=operator, app="m:operator") == 0
    stream = list(yaml.safe_load_all(capsys.readouterr().out))
    assert "Namespace" not in [d["kind"] for d in stream]
    assert stream[0]["metadata"]["labels"]["app.kubernetes.io/version"] == "7"
    assert manifests_main(["--namespace", "ops", "--kustomize", str(tmp_path / "base")],
                          operator=operator, app="m:operator") == 0
    out, err = capsys.readouterr()
    assert out == ""
    assert f"wrote {tmp_path / 'base' / 'kustomization.yaml'}" in err
    assert (tmp_path / "base" / "namespace.yaml").exists()


def test_cli_refuses_a_bad_version_label_in_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert manifests_main(["--app-version", "not valid"], operator=webhook_operator(),
                          app="m:operator") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: app.kubernetes.io/version 'not valid' is not a valid label")
    assert err.count("\n") == 1


# ---------------------------------------------------------------- without webhooks, replicas


def plain_operator(*, elects: bool = False) -> Operator:
    """Controllers and no webhook: no certificate, no Service, its own command line."""
    return Operator("gadget-operator", [GadgetController()],
                    leader_election=LeaderElection() if elects else None)


class GadgetController(Controller[Gadget]):
    resource = Gadget

    def reconcile(self, obj: Gadget, ctx: Context) -> Action:
        return Action.await_change()


def _by_kind(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in docs}


def test_an_operator_without_webhooks_runs_its_own_command_line_over_http() -> None:
    docs = operator_manifests(plain_operator(), app="gadgets:operator", namespace="ops",
                              image="img:1")
    assert [d["kind"] for d in docs] == [
        "Namespace", "CustomResourceDefinition", "ServiceAccount", "ClusterRole",
        "ClusterRoleBinding", "Deployment", "NetworkPolicy", "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding"], "no Service, no webhooks (the installation's guard)"
    by_kind = _by_kind(docs)
    template = by_kind["Deployment"]["spec"]["template"]
    pod = template["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["python", "-m", "operator_kit"]
    assert container["env"] == [
        {"name": "OPERATOR_KIT_APP", "value": "gadgets:operator"},
        {"name": "OPERATOR_KIT_HEALTH_PROBE_BIND_ADDRESS", "value": ":8081"},
        {"name": "OPERATOR_KIT_METRICS_BIND_ADDRESS", "value": ":8080"},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE",
         "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}]
    assert container["ports"] == [
        {"name": "metrics", "containerPort": 8080, "protocol": "TCP"},
        {"name": "probes", "containerPort": 8081, "protocol": "TCP"}]
    assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "probes",
                                                     "scheme": "HTTP"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "probes",
                                                      "scheme": "HTTP"}
    assert template["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true", "prometheus.io/scheme": "http",
        "prometheus.io/port": "8080"}
    assert container["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}]
    assert pod["volumes"] == [{"name": "tmp", "emptyDir": {"sizeLimit": "32Mi"}}]
    assert "fsGroup" not in pod["securityContext"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert by_kind["NetworkPolicy"]["spec"]["ingress"] == [{"ports": [
        {"port": "metrics", "protocol": "TCP"}, {"port": "probes", "protocol": "TCP"}]}]
    rules = by_kind["ClusterRole"]["rules"]
    assert not any(r["resources"] == ["secrets"] or "webhookconfigurations" in
                   r["resources"][0] for r in rules), "no certificate machinery"
    assert not any("TLS" in e["name"] or e["name"] == "OPERATOR_KIT_BIND"
                   for e in container["env"])


def test_a_certificate_secret_is_not_mounted_by_an_operator_without_webhooks() -> None:
    from operator_kit.webhooks.certificates import ExternalCertificate

    docs = operator_manifests(plain_operator(), app="gadgets:operator", namespace="ops",
                              image="img:1", certificate=ExternalCertificate("tls"))
    pod = _by_kind(docs)["Deployment"]["spec"]["template"]["spec"]
    assert [v["name"] for v in pod["volumes"]] == ["tmp"]
    assert all("annotations" not in d["metadata"] for d in docs)


def test_without_webhooks_the_kustomize_base_has_no_webhook_file() -> None:
    files = kustomize_base(operator_manifests(plain_operator(elects=True), app="g:operator",
                                              namespace="ops", image="img"))
    assert "webhooks.yaml" not in files
    assert [d["kind"] for d in yaml.safe_load_all(files["deployment.yaml"])] == [
        "Deployment", "PodDisruptionBudget", "NetworkPolicy"]


def test_the_webhook_deployment_still_runs_gunicorn_on_its_tls_port() -> None:
    docs = operator_manifests(webhook_operator(), app="m:operator", namespace="ops",
                              image="img")
    by_kind = _by_kind(docs)
    (container,) = by_kind["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert container["command"][0] == "gunicorn"
    assert container["ports"] == [{"name": "https", "containerPort": 8443, "protocol": "TCP"}]
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert "Service" in by_kind


def _replicas(operator: Operator, replicas: int | None = None) -> int:
    docs = operator_manifests(operator, app="m:operator", namespace="ops", image="img",
                              replicas=replicas)
    kinds = [d["kind"] for d in docs]
    count = int(_by_kind(docs)["Deployment"]["spec"]["replicas"])
    assert ("PodDisruptionBudget" in kinds) == (count > 1)
    return count


def test_replicas_default_to_one_without_leader_election_and_two_with_it() -> None:
    assert _replicas(plain_operator()) == 1
    assert _replicas(gizmo_operator(True)) == 1, "with webhooks too"
    assert _replicas(plain_operator(elects=True)) == 2
    assert _replicas(plain_operator(elects=True), 5) == 5
    assert _replicas(plain_operator(), 0) == 0
    webhooks_only = Operator("gate")
    webhooks_only.webhooks.validate(Gadget, "/validate")(lambda request: None)
    assert _replicas(webhooks_only) == 2, "no controller: nothing reconciled twice"
    assert _replicas(webhooks_only, 3) == 3


def test_more_than_one_replica_without_leader_election_is_refused_naming_the_fix(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match=r"--replicas 2 without leader election"):
        operator_manifests(plain_operator(), app="m:operator", namespace="ops", image="i",
                           replicas=2)
    assert manifests_main(["--replicas", "3"], operator=gizmo_operator(True),
                          app="m:operator") == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "error: --replicas 3 without leader election: every replica would reconcile the "
        "same objects at once; use --replicas 1, or give Operator 'gizmo-operator' "
        "leader_election=LeaderElection()\n")


# ---------------------------------------------------------------- python -m operator_kit


@pytest.fixture
def gadgets_module(monkeypatch: pytest.MonkeyPatch) -> Operator:
    """An importable module ``gadgets_app`` whose ``operator`` is a plain operator."""
    module = types.ModuleType("gadgets_app")
    module.operator = plain_operator()  # type: ignore[attr-defined]
    module.other = object()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "gadgets_app", module)
    monkeypatch.delenv("OPERATOR_KIT_APP", raising=False)
    operator: Operator = module.operator  # type: ignore[attr-defined]
    return operator


def test_python_m_operator_kit_runs_the_named_operators_command_line(
        gadgets_module: Operator, monkeypatch: pytest.MonkeyPatch) -> None:
    import operator_kit.cli
    from operator_kit.__main__ import main as kit_main

    calls: list[tuple[Operator, list[str] | None, str | None]] = []
    monkeypatch.setattr(operator_kit.cli, "main", lambda operator, argv=None, app=None:
                        calls.append((operator, argv, app)) or 0)
    assert kit_main(["gadgets_app:operator", "--log-level", "debug"]) == 0
    monkeypatch.setenv("OPERATOR_KIT_APP", "gadgets_app:operator")
    assert kit_main(["--metrics-bind-address", "0"]) == 0, "named by the Deployment's env"
    assert calls == [(gadgets_module, ["--log-level", "debug"], "gadgets_app:operator"),
                     (gadgets_module, ["--metrics-bind-address", "0"],
                      "gadgets_app:operator")]


def test_python_m_operator_kit_refuses_what_is_no_operator_in_one_line(
        gadgets_module: Operator, capsys: pytest.CaptureFixture[str]) -> None:
    from operator_kit.__main__ import main as kit_main

    assert kit_main([]) == 2
    assert "set OPERATOR_KIT_APP=MODULE:ATTR" in capsys.readouterr().err
    assert kit_main(["gadgets_app:other"]) == 2
    err = capsys.readouterr().err
    assert err == ("python -m operator_kit: error: gadgets_app:other is a object, not an "
                   "operator_kit.Operator\n")
    assert kit_main(["gadgets_app:missing"]) == 2
    assert "has no attribute missing" in capsys.readouterr().err


def test_python_m_operator_kit_manifests_name_the_operator_it_was_given(
        gadgets_module: Operator, capsys: pytest.CaptureFixture[str]) -> None:
    from operator_kit.__main__ import main as kit_main

    assert kit_main(["gadgets_app:operator", "--manifests", "--namespace", "ops"]) == 0
    stream = {d["kind"]: d for d in yaml.safe_load_all(capsys.readouterr().out)}
    env = stream["Deployment"]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env[0] == {"name": "OPERATOR_KIT_APP", "value": "gadgets_app:operator"}


# ---------------------------------------------------------------- LocalDeployment's command


def test_local_deployment_runs_the_deployments_command_with_this_interpreter() -> None:
    from operator_kit.testing.deploy import LocalDeployment

    cluster: Any = None  # not contacted before apply() or start()
    plain = LocalDeployment(cluster, plain_operator(), app="gadgets:operator",
                            namespace="ops", work_dir=Path("/nonexistent"))
    assert (plain.gunicorn, plain.replica_count) == (False, 1)
    assert plain.command == [sys.executable, "-m", "operator_kit"]
    assert [d["kind"] for d in plain.documents if d["kind"] == "Service"] == []
    served = LocalDeployment(cluster, webhook_operator(), app="m:operator", namespace="ops",
                             work_dir=Path("/nonexistent"))
    assert (served.gunicorn, served.replica_count) == (True, 2)
    assert served.command[:3] == [sys.executable, "-m", "gunicorn"]
