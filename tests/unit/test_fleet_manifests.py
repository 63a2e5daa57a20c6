"""Fleets in the manifests: ``--fleet-member`` (what each member cluster needs, from the
fleet controllers only), the hub's RBAC without the fleet controllers' rules, and the
Role that lets the hub read its provider's Secrets."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml

from operator_kit import Action, Context, Controller, CustomResource, Operator
from operator_kit.api.rbac import Rule
from operator_kit.fleet import ClusterStatuses, FanOut, Fleet, KubeconfigSecrets, StaticClusters
from operator_kit.manifests import fleet_member_manifests, operator_manifests
from operator_kit.manifests.__main__ import main as manifests_main


@dataclass
class PolicySpec:
    level: int = 0


class Policy(CustomResource):
    group = "fleet.operator-kit.test"
    version = "v1"
    kind = "Policy"
    plural = "policies"
    spec: PolicySpec


class HubOnly(CustomResource):
    group = "hub.operator-kit.test"
    version = "v1"
    kind = "HubOnly"
    spec: PolicySpec


class PolicyController(Controller[Policy]):
    resource = Policy
    fleet = True
    owns = ("v1/ConfigMap",)

    def reconcile(self, obj: Policy, ctx: Context) -> Action:
        return Action.await_change()


class HubController(Controller[HubOnly]):
    resource = HubOnly
    owns = ("apps/v1/Deployment",)

    def reconcile(self, obj: HubOnly, ctx: Context) -> Action:
        return Action.await_change()


@dataclass
class RolloutStatus:
    clusters: ClusterStatuses = field(default_factory=list)


class Rollout(CustomResource):
    group = "hub.operator-kit.test"
    version = "v1"
    kind = "Rollout"
    spec: PolicySpec
    status: RolloutStatus


class PolicyFanOut(FanOut[Rollout]):
    """A hub Rollout keeps a Policy and a RoleBinding on every member."""
    resource = Rollout
    finalizer = "hub.operator-kit.test/children"
    child_kinds = (Policy, "rbac.authorization.k8s.io/v1/RoleBinding")

    def children(self, obj: Rollout, cluster: str) -> list[Any]:
        return []


def member_docs(capsys: pytest.CaptureFixture[str], *controllers: Controller[Any],
                argv: tuple[str, ...] = ()) -> tuple[int, list[dict[str, Any]], str]:
    operator = Operator("policy-operator", controllers)
    code = manifests_main(["--fleet-member", *argv], operator=operator, app="policy:operator")
    out, err = capsys.readouterr()
    return code, [d for d in yaml.safe_load_all(out) if d], err


def resources(role: dict[str, Any]) -> dict[tuple[str, str], list[str]]:
    return {(r["apiGroups"][0], r["resources"][0]): r["verbs"] for r in role["rules"]}


def test_a_member_gets_the_fleet_controllers_crd_and_rbac_and_nothing_of_the_hubs(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, docs, _ = member_docs(capsys, PolicyController(), HubController())
    assert code == 0
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("Namespace", "policy-operator"),
        ("CustomResourceDefinition", "policies.fleet.operator-kit.test"),
        ("ServiceAccount", "policy-operator"),
        ("ClusterRole", "policy-operator"),
        ("ClusterRoleBinding", "policy-operator"),
        ("Secret", "policy-operator-fleet-token"),
    ]
    granted = resources(next(d for d in docs if d["kind"] == "ClusterRole"))
    assert ("fleet.operator-kit.test", "policies") in granted
    assert {"create", "patch", "delete", "watch"} <= set(granted[("", "configmaps")])
    assert (HubOnly.group, HubOnly.plural) not in granted and ("apps", "deployments") \
        not in granted  # the hub controller's
    assert ("coordination.k8s.io", "leases") not in granted
    token = docs[-1]
    assert token["type"] == "kubernetes.io/service-account-token"
    assert token["metadata"]["annotations"] == {
        "kubernetes.io/service-account.name": "policy-operator"}
    assert all(d["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "operator-kit"
               for d in docs)


def test_a_fan_outs_member_rules_and_child_crds_go_to_the_members_and_its_kind_stays_on_the_hub(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, docs, _ = member_docs(capsys, PolicyFanOut())
    assert code == 0
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "CustomResourceDefinition"] \
        == ["policies.fleet.operator-kit.test"]  # a child kind; HubOnly is the hub's
    granted = resources(next(d for d in docs if d["kind"] == "ClusterRole"))
    rules = {(r.api_groups[0], r.resources[0]): list(r.verbs)
             for r in PolicyFanOut().member_rules()}
    assert granted == rules
    assert granted[("rbac.authorization.k8s.io", "clusterroles")] == ["bind"]
    assert (HubOnly.group, HubOnly.plural) not in granted


def test_the_namespace_flags_apply_to_the_member_documents_too(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, docs, _ = member_docs(capsys, PolicyController(),
                                argv=("--namespace", "ops", "--no-namespace"))
    assert code == 0 and docs[0]["kind"] == "CustomResourceDefinition"
    account = next(d for d in docs if d["kind"] == "ServiceAccount")
    assert account["metadata"]["namespace"] == "ops"


def test_an_operator_without_fleet_controllers_is_told_to_leave_the_flag_out(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, docs, err = member_docs(capsys, HubController())
    assert code == 2 and docs == []
    assert "has no fleet controller" in err and "leave out --fleet-member" in err


def test_flags_about_the_hubs_installation_are_refused_with_fleet_member(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, docs, err = member_docs(capsys, PolicyController(),
                                  argv=("--image", "x:1", "--uninstall",
                                        "--metrics-secure"))
    assert code == 2 and docs == []
    assert "--fleet-member with --image, --uninstall, --metrics-secure" in err


def test_the_hub_rules_leave_the_fleet_controllers_out() -> None:
    operator = Operator("policy-operator", [PolicyController(), HubController()])
    rules = operator.rules()
    assert any(r.resources == ("deployments",) for r in rules)
    assert not any(r.resources in (("policies",), ("configmaps",)) for r in rules)


def hub_docs(provider: Any) -> list[dict[str, Any]]:
    operator = Operator("policy-operator", [PolicyController(), HubController()])
    Fleet.of(operator, provider)
    return operator_manifests(operator, app="policy:operator", namespace="ops",
                              image="policy:1")


SECRETS_AND_EVENTS = [Rule([""], ["secrets"], ["list", "watch"]).to_dict(),
                      Rule(["events.k8s.io"], ["events"], ["create", "get", "patch"]).to_dict()]


def test_the_hub_reads_the_kubeconfig_secrets_of_one_namespace_with_a_role_there() -> None:
    docs = hub_docs(KubeconfigSecrets(namespace="capi"))
    role = next(d for d in docs if d["kind"] == "Role"
                and d["metadata"]["name"] == "policy-operator-fleet")
    assert role["metadata"]["namespace"] == "capi"
    assert role["rules"] == SECRETS_AND_EVENTS
    binding = next(d for d in docs if d["kind"] == "RoleBinding"
                   and d["metadata"]["name"] == "policy-operator-fleet")
    assert binding["metadata"]["namespace"] == "capi"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "policy-operator",
                                    "namespace": "ops"}]
    cluster_role = next(d for d in docs if d["kind"] == "ClusterRole")
    assert ("", "secrets") not in resources(cluster_role)  # nowhere else


def test_several_namespaces_are_a_role_and_binding_in_each_and_no_cluster_role() -> None:
    docs = hub_docs(KubeconfigSecrets(namespace=["capi-eu", "capi-us"]))
    fleet = [d for d in docs if d["metadata"]["name"] == "policy-operator-fleet"]
    assert sorted((d["kind"], d["metadata"]["namespace"]) for d in fleet) == [
        ("Role", "capi-eu"), ("Role", "capi-us"),
        ("RoleBinding", "capi-eu"), ("RoleBinding", "capi-us")]
    assert not any(("", "secrets") in resources(d) for d in docs
                   if d["kind"] == "ClusterRole")


def test_every_namespace_is_a_cluster_role_only_when_asked_and_files_need_no_hub_rbac() -> None:
    docs = hub_docs(KubeconfigSecrets(all_namespaces=True))
    role = next(d for d in docs if d["kind"] == "ClusterRole"
                and d["metadata"]["name"] == "policy-operator-fleet")
    assert role["rules"] == SECRETS_AND_EVENTS
    assert any(d["kind"] == "ClusterRoleBinding"
               and d["metadata"]["name"] == "policy-operator-fleet" for d in docs)
    docs = hub_docs(StaticClusters({"eu": "/nowhere/eu.yaml"}))
    assert not any(d["metadata"]["name"] == "policy-operator-fleet" for d in docs)


def test_the_member_token_is_not_one_the_legacy_token_cleaner_removes() -> None:
    """Kubernetes' legacy token cleaner removes only the token Secrets a ServiceAccount
    lists in ``secrets`` (legacy_serviceaccount_token_cleaner.go: hasSecretReference)."""
    operator = Operator("policy-operator", [PolicyController(), HubController()])
    docs = fleet_member_manifests(operator, namespace="ops")
    account = next(d for d in docs if d["kind"] == "ServiceAccount")
    token = next(d for d in docs if d["kind"] == "Secret")
    assert token["type"] == "kubernetes.io/service-account-token"
    assert token["metadata"]["annotations"] == {
        "kubernetes.io/service-account.name": account["metadata"]["name"]}
    assert "secrets" not in account


def test_fleet_member_documents_can_be_a_kustomize_base(
        capsys: pytest.CaptureFixture[str], tmp_path: Any) -> None:
    code, _, err = member_docs(capsys, PolicyController(),
                               argv=("--kustomize", str(tmp_path / "member")))
    assert code == 0 and "wrote" in err
    written = {p.name: p.read_text() for p in (tmp_path / "member").iterdir()}
    assert "kustomization.yaml" in written
    docs = [d for name, text in written.items() if not name.startswith("kustomiz")
            for d in yaml.safe_load_all(text) if d]
    assert sorted(d["kind"] for d in docs) == [
        "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "Namespace",
        "Secret", "ServiceAccount"]
