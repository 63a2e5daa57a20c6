"""RBAC, webhook configurations and YAML output written from the code."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import yaml

from operator_kit import Action, Context, Controller, CustomResource, Operator, Rule
from operator_kit.manifests import (
    Rbac,
    WebhookRule,
    WebhookTarget,
    operator_manifests,
    to_yaml,
    webhook_configuration,
)
from operator_kit.rbac import guess_plural, merge_rules


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


def gizmo_operator(with_converter: bool) -> Operator:
    class GizmoController(Controller[Gizmo]):
        resource = Gizmo

        def reconcile(self, obj: Gizmo, ctx: Context) -> Action:
            return Action.await_change()

    operator = Operator("gizmo-operator", [GizmoController()])
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
