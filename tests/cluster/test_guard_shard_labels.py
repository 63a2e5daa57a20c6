"""The shard-label policy names the operator's ServiceAccount exactly, on CREATE and UPDATE.

A tenant that may edit the sharded objects in its own namespace creates a ServiceAccount
there named like the operator. The policy used to trust any account with that name
(``endsWith(':<operator>')``), so the tenant could move an object to another member
while the first reconciled it, or create one already given to a member. Now the policy's
parameter is the operator's own ServiceAccount (``paramRef``): only
``system:serviceaccount:<install namespace>:<operator>`` may set or change the labels.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from operator_kit import LeaderElection, Operator, Sharding
from operator_kit.client.transport import Api, api_client
from operator_kit.manifests import operator_manifests
from operator_kit.testing import Namespace, TestCluster, eventually
from operator_kit.testing.deploy import service_account_kubeconfig

from .conftest import Widget, WidgetController

pytestmark = pytest.mark.usefixtures("widget_kind")

OPERATOR = "guard-shard"  # not the sharding tests' operator: its label is another one
LABEL = "shard.operator-kit.io/" + OPERATOR
DRAIN = "drain." + LABEL


def widget(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": Widget.api_version(), "kind": "Widget",
            "metadata": {"name": name, **({"labels": labels} if labels else {})},
            "spec": {"size": 1}}


def refusal(call: Any, status: int = 403) -> str | None:
    """None if the dry-run `call` was admitted, else the API server's refusal (`status`)."""
    try:
        call()
    except ApiException as err:
        assert err.status == status, (err.status, err.body)
        return str(err.body)
    return None


class As:
    """Writes of Widgets in one namespace, as one user: dry runs unless told otherwise."""

    def __init__(self, api: Api, namespace: str) -> None:
        self.api = api
        self.path = f"/apis/{Widget.api_version()}/namespaces/{namespace}/widgets"

    def create(self, name: str, labels: dict[str, str] | None = None, *,
               dry_run: bool = True) -> str | None:
        return refusal(lambda: self.api.request(
            "POST", self.path, body=widget(name, labels),
            query={"dryRun": "All"} if dry_run else None))

    def label(self, name: str, labels: dict[str, str | None], *,
              dry_run: bool = True) -> str | None:
        return refusal(lambda: self.api.request(
            "PATCH", f"{self.path}/{name}", body={"metadata": {"labels": labels}},
            query={"dryRun": "All"} if dry_run else None,
            content_type="application/merge-patch+json"))


def policy_documents(namespace: str) -> list[dict[str, Any]]:
    """The sharded operator's ServiceAccount, ClusterRole and binding, and its shard-label
    policy, as generated for `namespace`."""
    operator = Operator(OPERATOR, [WidgetController(None)],
                        leader_election=LeaderElection(), sharding=Sharding())
    docs = [d for d in operator_manifests(operator, app="unused:operator",
                                          namespace=namespace, image="unused")
            if d["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")
            or d["metadata"]["name"] == f"{OPERATOR}-shard-labels-{namespace}"]
    assert [d["kind"] for d in docs][-2:] == ["ValidatingAdmissionPolicy",
                                              "ValidatingAdmissionPolicyBinding"]
    return docs


def unguard(cluster: TestCluster, namespace: Namespace, docs: list[dict[str, Any]]) -> None:
    """Delete the cluster-scoped `docs`, last first, and wait until the API server no
    longer enforces the shard-label policy."""
    for doc in reversed(docs):
        if doc["kind"] in ("ClusterRole", "ClusterRoleBinding") or \
                doc["kind"].startswith("ValidatingAdmissionPolicy"):
            resource = cluster.api.resource_for(doc["apiVersion"], doc["kind"])
            cluster.api.request("DELETE", resource.path(None, doc["metadata"]["name"]))
    admin = As(cluster.api, namespace.name)
    eventually(30, lambda: admin.create("policy-gone", {LABEL: "m-0"}) is None,
               message="the deleted shard-label policy forgotten")


@pytest.fixture
def installed(cluster: TestCluster, namespace: Namespace) -> Iterator[list[dict[str, Any]]]:
    """The operator's RBAC and shard-label policy, applied in `namespace`; the policy is
    deleted afterwards and waited out."""
    docs = policy_documents(namespace.name)
    for doc in docs:
        cluster.api.apply(doc, field_manager="test")
    try:
        yield docs
    finally:
        unguard(cluster, namespace, docs)


def account(cluster: TestCluster, namespace: str, name: str, path: Path) -> Api:
    """An Api acting as ServiceAccount `namespace`/`name` (a TokenRequest token)."""
    return Api(api_client(str(service_account_kubeconfig(cluster, namespace, name, path))))


def test_a_same_named_service_account_in_a_tenant_namespace_may_not_set_shard_labels(
        cluster: TestCluster, namespace: Namespace, installed: list[dict[str, Any]],
        tmp_path: Path) -> None:
    tenant = cluster.namespace("tenant")
    try:
        # The tenant: its own ServiceAccount named like the operator, allowed to edit
        # the Widgets of its namespace (what a namespace admin may grant itself).
        tenant.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                      "metadata": {"name": OPERATOR}})
        tenant.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                      "metadata": {"name": "widget-editor"},
                      "rules": [{"apiGroups": [Widget.group], "resources": ["widgets"],
                                 "verbs": ["create", "get", "patch", "update"]},
                                {"apiGroups": [""], "resources": ["configmaps"],
                                 "verbs": ["create"]}]})
        tenant.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                      "metadata": {"name": "widget-editor"},
                      "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": "widget-editor"},
                      "subjects": [{"kind": "ServiceAccount", "name": OPERATOR,
                                    "namespace": tenant.name}]})
        impostor = As(account(cluster, tenant.name, OPERATOR, tmp_path / "tenant"),
                      tenant.name)
        operator = As(account(cluster, namespace.name, OPERATOR, tmp_path / "operator"),
                      tenant.name)
        admin = As(cluster.api, tenant.name)
        # An object the operator gave to member m-0 (as the sharder does).
        assert admin.create("assigned", dry_run=False) is None
        assert operator.label("assigned", {LABEL: "m-0"}, dry_run=False) is None

        eventually(30, lambda: admin.label("assigned", {LABEL: "m-1"}) is not None,
                   message="the shard-label policy enforced")
        refused = {
            "create with a member's label": impostor.create("new", {LABEL: "m-1"}),
            "create with a member's label (administrator)": admin.create("new",
                                                                         {LABEL: "m-1"}),
            "create with a member's label and the drain label": impostor.create(
                "new", {LABEL: "m-1", DRAIN: "true"}),
            "move to another member": impostor.label("assigned", {LABEL: "m-1"}),
            "drain": impostor.label("assigned", {DRAIN: "true"}),
            "unassign": impostor.label("assigned", {LABEL: None}),
        }
        for what, answer in refused.items():
            assert answer is not None, f"{what}: admitted"
            assert f"only the operator (its ServiceAccount system:serviceaccount:" \
                   f"{namespace.name}:{OPERATOR})" in answer, (what, answer)
        assert "Create the object without the labels" in refused["create with a member's label"]
        assert "reconciled by two replicas at once" in refused["move to another member"]

        # The operator itself still assigns and moves, and creates children with their
        # owner's label (a Widget's ConfigMap); anyone creates an unlabelled object or
        # edits a labelled one without touching its labels.
        assert refusal(lambda: operator.api.request(
            "POST", f"/api/v1/namespaces/{tenant.name}/configmaps", query={"dryRun": "All"},
            body={"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": "child", "labels": {LABEL: "m-1"}}})) is None
        child = refusal(lambda: impostor.api.request(
            "POST", f"/api/v1/namespaces/{tenant.name}/configmaps", query={"dryRun": "All"},
            body={"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": "child", "labels": {LABEL: "m-1"}}}))
        assert child is not None and "Create the object without the labels" in child, child
        assert operator.label("assigned", {LABEL: "m-1", DRAIN: "true"}) is None
        assert impostor.create("unlabelled") is None
        assert impostor.label("assigned", {"team": "a"}) is None
        print(f"\nshard labels: {len(refused) + 1} writes by {tenant.name}/{OPERATOR} and the "
              f"administrator refused (4 CREATE, 3 UPDATE); the operator's "
              f"{namespace.name}/{OPERATOR} admitted")
    finally:
        tenant.delete()


def test_a_binding_whose_service_account_is_gone_refuses_instead_of_guarding_nothing(
        cluster: TestCluster, namespace: Namespace, installed: list[dict[str, Any]],
        tmp_path: Path) -> None:
    admin = As(cluster.api, namespace.name)
    operator = As(account(cluster, namespace.name, OPERATOR, tmp_path / "operator"),
                  namespace.name)
    assert admin.create("assigned", dry_run=False) is None
    assert operator.label("assigned", {LABEL: "m-0"}, dry_run=False) is None
    eventually(30, lambda: admin.label("assigned", {LABEL: "m-1"}) is not None,
               message="the shard-label policy enforced")
    cluster.api.request("DELETE", f"/api/v1/namespaces/{namespace.name}/serviceaccounts/"
                        f"{OPERATOR}")
    # Without its parameter the binding fails closed: the labelled objects are refused
    # to everyone (unlabelled ones are not matched at all), the policy named.
    def refused() -> str | None:
        answer = refusal(lambda: cluster.api.request(
            "PATCH", f"{admin.path}/assigned", body={"metadata": {"labels": {"team": "a"}}},
            query={"dryRun": "All"}, content_type="application/merge-patch+json"), 422)
        return answer if answer and "no params found" in answer else None

    answer = eventually(30, refused, message="the missing parameter noticed")
    assert f"ValidatingAdmissionPolicy '{OPERATOR}-shard-labels-{namespace.name}'" in answer
    assert admin.create("unlabelled") is None


def test_under_a_name_prefix_overlay_the_renamed_operator_moves_labels_and_the_old_name_not(
        cluster: TestCluster, namespace: Namespace, tmp_path: Path) -> None:
    """The overlay that broke the policy: the ServiceAccount became ``dev-<operator>`` while
    the CEL named ``<operator>``, so the operator's own label writes were refused."""
    import subprocess

    import yaml

    from operator_kit.localcluster import find_or_build
    from operator_kit.manifests import write_kustomize_base

    kubectl = find_or_build(log=False).kubectl
    assert kubectl is not None, "no kubectl next to the control plane's binaries"
    write_kustomize_base(tmp_path / "base", policy_documents("operators"))
    (tmp_path / "overlay").mkdir()
    (tmp_path / "overlay" / "kustomization.yaml").write_text(
        f"namePrefix: dev-\nnamespace: {namespace.name}\nresources: [../base]\n")
    stream = subprocess.run([str(kubectl), "kustomize", str(tmp_path / "overlay")],
                            capture_output=True, text=True, check=True, timeout=120).stdout
    docs = [d for d in yaml.safe_load_all(stream) if d["kind"] != "Namespace"]
    (binding,) = (d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["paramRef"]["name"] == f"dev-{OPERATOR}"
    assert binding["spec"]["paramRef"]["namespace"] == namespace.name
    for doc in docs:
        cluster.api.apply(doc, field_manager="test")
    try:
        # The base's name, in the same namespace: not the operator any more.
        namespace.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                         "metadata": {"name": OPERATOR}})
        cluster.api.apply({"apiVersion": "rbac.authorization.k8s.io/v1",
                           "kind": "ClusterRoleBinding", "metadata": {"name": f"old-{OPERATOR}"},
                           "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                       "kind": "ClusterRole", "name": f"dev-{OPERATOR}"},
                           "subjects": [{"kind": "ServiceAccount", "name": OPERATOR,
                                         "namespace": namespace.name}]},
                          field_manager="test")
        docs.append({"apiVersion": "rbac.authorization.k8s.io/v1",
                     "kind": "ClusterRoleBinding", "metadata": {"name": f"old-{OPERATOR}"}})
        admin = As(cluster.api, namespace.name)
        renamed = As(account(cluster, namespace.name, f"dev-{OPERATOR}", tmp_path / "dev"),
                     namespace.name)
        old = As(account(cluster, namespace.name, OPERATOR, tmp_path / "old"), namespace.name)
        assert admin.create("assigned", dry_run=False) is None
        eventually(30, lambda: admin.label("assigned", {LABEL: "m-1"}) is not None,
                   message="the renamed shard-label policy enforced")
        assert renamed.label("assigned", {LABEL: "m-0"}) is None
        assert renamed.label("assigned", {LABEL: "m-1", DRAIN: "true"}) is None
        answer = old.label("assigned", {LABEL: "m-1"})
        assert answer is not None
        assert f"system:serviceaccount:{namespace.name}:dev-{OPERATOR})" in answer, answer
    finally:
        unguard(cluster, namespace, docs)
