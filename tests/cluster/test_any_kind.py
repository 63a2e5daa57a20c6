"""Controllers over kinds the operator does not define, against the real API server.

A built-in kind (a cluster-scoped ``v1/Namespace``, ``apps/v1/Deployment`` as a client
model) or another party's CRD (installed here as another team would, read through a
typed class declared ``external = True`` or as dicts) is reconciled through the same
runner, caches and Context as the operator's own kinds: finalizers, owned children,
watches, Events and status where the kind has one the operator may write.
"""

from __future__ import annotations

import logging
import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from operator_kit import (
    Context,
    Controller,
    CustomResource,
    LeaderElection,
    Operator,
    Sharding,
    Watch,
    manifests,
)
from operator_kit.client.transport import api_client
from operator_kit.testing import Namespace, TestCluster, eventually
from operator_kit.testing.deploy import service_account_kubeconfig

RunOperator = Callable[..., Operator]

FINALIZER = "test.operator-kit.io/cleanup"


def namespace_object(cluster: TestCluster, name: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = cluster.api.get(f"/api/v1/namespaces/{name}")
    except ApiException as err:
        if err.status == 404:
            return None
        raise
    return found


# -- a cluster-scoped built-in kind, with a finalizer and owned children ------------------

class NamespaceDefaults(Controller[dict[str, Any]]):
    """Gives each selected Namespace a ConfigMap of defaults; cleanup records the name."""

    resource = "v1/Namespace"
    owns = ("v1/ConfigMap",)
    finalizer = FINALIZER

    def __init__(self, selector: str) -> None:
        self.label_selector = selector
        super().__init__()
        self.cleaned: list[str] = []

    def reconcile(self, obj: dict[str, Any], ctx: Context) -> None:
        assert obj["kind"] == "Namespace"
        ctx.apply_owned(obj, {"apiVersion": "v1", "kind": "ConfigMap",
                              "metadata": {"name": "defaults"},
                              "data": {"namespace": obj["metadata"]["name"]}})
        ctx.event(obj, False, "Defaulted", "the defaults ConfigMap is applied")

    def cleanup(self, obj: dict[str, Any], ctx: Context) -> None:
        self.cleaned.append(obj["metadata"]["name"])


@pytest.fixture
def labelled_namespaces(cluster: TestCluster) -> Iterator[tuple[str, list[Namespace]]]:
    """Two namespaces labelled with a value of this test's own (the controller selects
    only them, never another test's), deleted after the test."""
    value = uuid.uuid4().hex[:8]
    made = [cluster.namespace("anykind") for _ in range(2)]
    for ns in made:
        cluster.api.request("PATCH", f"/api/v1/namespaces/{ns.name}",
                            body={"metadata": {"labels": {"any-kind-test": value}}},
                            content_type="application/merge-patch+json")
    yield f"any-kind-test={value}", made
    for ns in made:
        try:
            cluster.api.request("PATCH", f"/api/v1/namespaces/{ns.name}", body={
                "metadata": {"finalizers": None}}, content_type="application/merge-patch+json")
        except ApiException:
            pass
        ns.delete()


def test_a_namespace_controller_adds_its_finalizer_applies_children_and_cleans_up(
        cluster: TestCluster, run_operator: RunOperator,
        labelled_namespaces: tuple[str, list[Namespace]]) -> None:
    selector, (first, second) = labelled_namespaces
    controller = NamespaceDefaults(selector)
    run_operator(controller)
    for ns in (first, second):
        cm = eventually(30, lambda ns=ns: ns.get("v1", "ConfigMap", "defaults"))
        assert cm["data"] == {"namespace": ns.name}
        ref = cm["metadata"]["ownerReferences"][0]
        assert (ref["apiVersion"], ref["kind"], ref["name"], ref["controller"]) == (
            "v1", "Namespace", ns.name, True)
        assert FINALIZER in (namespace_object(cluster, ns.name) or {})["metadata"][
            "finalizers"]
    # An owned child deleted by hand is made again (owns watches the ConfigMaps).
    uid = first.get("v1", "ConfigMap", "defaults")["metadata"]["uid"]
    cluster.api.request("DELETE", f"/api/v1/namespaces/{first.name}/configmaps/defaults")
    eventually(30, lambda: (cm := first.get("v1", "ConfigMap", "defaults")) is not None
               and cm["metadata"]["uid"] != uid)
    # The Event regarding a cluster-scoped object lives in "default".
    events = cluster.api.get("/apis/events.k8s.io/v1/namespaces/default/events")["items"]
    assert any(e["regarding"].get("name") == first.name and e["reason"] == "Defaulted"
               for e in events)
    # Deleting the Namespace runs cleanup, then removes the finalizer: the namespace goes.
    cluster.api.request("DELETE", f"/api/v1/namespaces/{second.name}")
    eventually(60, lambda: namespace_object(cluster, second.name) is None)
    assert controller.cleaned == [second.name]


def test_patch_status_of_a_namespace_is_a_type_error_that_says_whose_status_it_is(
        cluster: TestCluster, run_operator: RunOperator,
        labelled_namespaces: tuple[str, list[Namespace]]) -> None:
    selector, _ = labelled_namespaces
    errors: list[str] = []

    class StatusWriter(Controller[dict[str, Any]]):
        resource = "v1/Namespace"
        label_selector = selector

        def reconcile(self, obj: dict[str, Any], ctx: Context) -> None:
            try:
                ctx.patch_status(obj, {"phase": "Mine"})
            except TypeError as err:
                errors.append(str(err))

    run_operator(StatusWriter())
    eventually(30, lambda: errors)
    assert "belongs to Kubernetes" in errors[0] and "v1/Namespace" in errors[0]


# -- a built-in kind as a client model, with a Watch ------------------------------------

RESTARTED = "example.com/config-hash"


class RestartOnConfig(Controller[k8s.V1Deployment]):
    """Stamps each Deployment's pod template with the resourceVersion of the ConfigMap
    its ``example.com/config`` annotation names (a changed ConfigMap rolls it)."""

    resource = k8s.V1Deployment
    watches = (Watch("v1/ConfigMap", lambda cm, objects: [
        d for d in objects.list(k8s.V1Deployment, cm["metadata"]["namespace"])
        if (d.metadata.annotations or {}).get("example.com/config") == cm["metadata"]["name"]
    ]),)

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        super().__init__()
        self.seen: list[type] = []

    def reconcile(self, obj: k8s.V1Deployment, ctx: Context) -> None:
        self.seen.append(type(obj))
        name = (obj.metadata.annotations or {}).get("example.com/config")
        config = ctx.get("v1/ConfigMap", name) if name else None
        if config is None:
            return
        version = config["metadata"]["resourceVersion"]
        template = obj.spec.template.metadata.annotations or {}
        if template.get(RESTARTED) != version:
            ctx.patch(k8s.V1Deployment, obj.metadata.name, {"spec": {"template": {
                "metadata": {"annotations": {RESTARTED: version}}}}})


def deployment(name: str, config: str) -> dict[str, Any]:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "annotations": {"example.com/config": config}},
            "spec": {"selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "app", "image": "example.com/app:1"}]}}}}


def test_a_deployment_controller_rolls_a_deployment_when_the_configmap_it_names_changes(
        namespace: Namespace, run_operator: RunOperator) -> None:
    controller = RestartOnConfig(namespace.name)
    run_operator(controller)
    namespace.apply({"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": "settings"}, "data": {"level": "1"}})
    namespace.apply(deployment("web", "settings"))

    def stamped() -> str | None:
        found = namespace.get("apps/v1", "Deployment", "web")
        return ((found or {}).get("spec", {}).get("template", {}).get("metadata", {})
                .get("annotations") or {}).get(RESTARTED)

    first = eventually(30, stamped)
    namespace.apply({"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": "settings"}, "data": {"level": "2"}})
    eventually(30, lambda: stamped() not in (None, first))
    assert set(controller.seen) == {k8s.V1Deployment}, "reconcile gets the client model"


# -- another party's CRD: not generated, read typed or as dicts, status written --------

GADGETS = "gadgets.partner.example.org"


def gadget_crd() -> dict[str, Any]:
    """The CRD another team installs (not generated by this operator)."""
    schema = {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {"colour": {"type": "string"}}},
        "status": {"type": "object", "properties": {"seen": {"type": "string"}}}}}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": GADGETS},
            "spec": {"group": "partner.example.org", "scope": "Namespaced",
                     "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget",
                               "listKind": "GadgetList"},
                     "versions": [{"name": "v1", "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": schema},
                                   "subresources": {"status": {}}}]}}


@dataclass
class GadgetSpec:
    colour: str = ""


@dataclass
class GadgetStatus:
    seen: str | None = None


class Gadget(CustomResource):
    group = "partner.example.org"
    version = "v1"
    kind = "Gadget"
    external = True
    spec: GadgetSpec
    status: GadgetStatus


class TypedGadgets(Controller[Gadget]):
    resource = Gadget
    writes_status = True

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        super().__init__()

    def reconcile(self, obj: Gadget, ctx: Context) -> None:
        ctx.patch_status(obj, GadgetStatus(seen=obj.spec.colour))


class DictGadgets(Controller[dict[str, Any]]):
    resource = "partner.example.org/v1/Gadget"
    writes_status = True
    name = "gadgets-as-dicts"

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        super().__init__()

    def reconcile(self, obj: dict[str, Any], ctx: Context) -> None:
        ctx.patch_status(obj, {"seen": "dict:" + obj["spec"]["colour"]})


@pytest.fixture(scope="module")
def gadget_kind(cluster: TestCluster) -> None:
    cluster.install_crd(gadget_crd())


def gadget_seen(ns: Namespace, name: str) -> str | None:
    found = ns.get("partner.example.org/v1", "Gadget", name)
    return ((found or {}).get("status") or {}).get("seen")


@pytest.mark.usefixtures("gadget_kind")
@pytest.mark.parametrize("controller_class", [TypedGadgets, DictGadgets],
                         ids=["typed-external", "string"])
def test_a_controller_over_another_teams_crd_writes_its_status(
        namespace: Namespace, run_operator: RunOperator,
        controller_class: type[Controller[Any]]) -> None:
    run_operator(controller_class(namespace.name))  # type: ignore[call-arg]
    namespace.apply({"apiVersion": "partner.example.org/v1", "kind": "Gadget",
                     "metadata": {"name": "g1"}, "spec": {"colour": "teal"}})
    expected = "teal" if controller_class is TypedGadgets else "dict:teal"
    assert eventually(30, lambda: gadget_seen(namespace, "g1")) == expected


def test_no_crd_is_generated_for_another_teams_kind_and_its_rules_are_exact() -> None:
    """(No cluster needed: the manifests come from the code.)"""
    operator = Operator("gadget-operator", [TypedGadgets("x"), NamespaceDefaults("a=b")])
    docs = manifests.operator_manifests(operator, app="gadgets:operator",
                                        namespace="gadget-system", image="example.com/g:1")
    assert [d for d in docs if d["kind"] == "CustomResourceDefinition"] == []
    assert operator.custom_kinds() == []
    with pytest.raises(TypeError, match="external"):
        manifests.crd(Gadget)
    rules = {(tuple(r.api_groups), tuple(r.resources)): set(r.verbs) for r in operator.rules()}
    assert rules[(("partner.example.org",), ("gadgets",))] == {"get", "list", "watch"}
    assert rules[(("partner.example.org",), ("gadgets/status",))] == {"get", "patch", "update"}
    # A finalizer on a Namespace: patch (to add and remove it), and no status rule.
    assert rules[(("",), ("namespaces",))] == {"get", "list", "watch", "patch"}
    assert (("",), ("namespaces/status",)) not in rules


def test_a_kind_the_server_does_not_serve_fails_the_start_naming_what_it_serves(
        cluster: TestCluster) -> None:
    class Unknown(Controller[dict[str, Any]]):
        resource = "apps/v9/Deployment"

        def reconcile(self, obj: dict[str, Any], ctx: Context) -> None: ...

    operator = Operator("unknown-kind", [Unknown()])
    operator.use(cluster.client)
    with pytest.raises(LookupError) as raised:
        operator.start()
    message = str(raised.value)
    assert "apps/v9/Deployment" in message and "v1" in message, message


# -- children of kinds not in owns ---------------------------------------------------------

class Unowned(Controller[dict[str, Any]]):
    """Applies a ConfigMap child without naming v1/ConfigMap in ``owns``."""

    resource = "v1/Namespace"

    def __init__(self, selector: str) -> None:
        self.label_selector = selector
        super().__init__()

    def reconcile(self, obj: dict[str, Any], ctx: Context) -> None:
        ctx.apply_owned(obj, {"apiVersion": "v1", "kind": "ConfigMap",
                              "metadata": {"name": "unowned"}})
        ctx.apply_owned(obj, {"apiVersion": "v1", "kind": "ConfigMap",
                              "metadata": {"name": "unowned-2"}})


def test_apply_owned_of_a_kind_not_in_owns_warns_once_with_the_line_to_add(
        run_operator: RunOperator, labelled_namespaces: tuple[str, list[Namespace]],
        caplog: pytest.LogCaptureFixture) -> None:
    selector, (first, second) = labelled_namespaces
    caplog.set_level(logging.WARNING, logger="operator_kit.controller")
    run_operator(Unowned(selector))
    for ns in (first, second):
        eventually(30, lambda ns=ns: ns.get("v1", "ConfigMap", "unowned-2"))
    warnings = [r.getMessage() for r in caplog.records if "does not list in `owns`" in
                r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "owns = [..., 'v1/ConfigMap']" in warnings[0]
    assert "not repaired" in warnings[0] and "GET" in warnings[0]


def test_a_forbidden_child_names_every_verb_and_owns(
        cluster: TestCluster, namespace: Namespace,
        labelled_namespaces: tuple[str, list[Namespace]], tmp_path: Path) -> None:
    """The operator runs as a ServiceAccount that may read Namespaces but not touch
    ConfigMaps: the 403 of its apply_owned says what to declare, not only 'get'."""
    selector, _ = labelled_namespaces
    account = "unowned-children"
    rbac = "rbac.authorization.k8s.io/v1"
    role = f"any-kind-test-{namespace.name}"
    namespace.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                     "metadata": {"name": account}})
    cluster.api.apply({"apiVersion": rbac, "kind": "ClusterRole", "metadata": {"name": role},
                       "rules": [{"apiGroups": [""], "resources": ["namespaces"],
                                  "verbs": ["get", "list", "watch"]},
                                 {"apiGroups": ["events.k8s.io"], "resources": ["events"],
                                  "verbs": ["create", "patch"]}]},
                      field_manager="test")
    cluster.api.apply({"apiVersion": rbac, "kind": "ClusterRoleBinding",
                       "metadata": {"name": role},
                       "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                   "kind": "ClusterRole", "name": role},
                       "subjects": [{"kind": "ServiceAccount", "name": account,
                                     "namespace": namespace.name}]}, field_manager="test")
    errors: list[str] = []

    class Forbidden(Unowned):
        def reconcile(self, obj: dict[str, Any], ctx: Context) -> None:
            try:
                super().reconcile(obj, ctx)
            except ApiException as err:
                errors.append(str(err))

    try:
        kubeconfig = service_account_kubeconfig(cluster, namespace.name, account,
                                                tmp_path / "kubeconfig")
        operator = Operator("forbidden-children", [Forbidden(selector)])
        operator.use(api_client(str(kubeconfig)))
        operator.start()
        try:
            eventually(40, lambda: errors)
        finally:
            operator.stop(timeout=10)
    finally:
        for kind in ("clusterrolebindings", "clusterroles"):
            cluster.api.request("DELETE", f"/apis/{rbac}/{kind}/{role}")
    message = errors[0]
    assert message.startswith("403"), message
    assert "get, create, patch" in message and "owns" in message, message
    assert "'v1/ConfigMap'" in message, message


@pytest.mark.usefixtures("gadget_kind")
def test_the_manifests_of_every_shape_pass_a_server_side_dry_run(namespace: Namespace) -> None:
    """A built-in cluster-scoped kind with a finalizer, a built-in kind as a model with a
    watch, another team's CRD with status: the generated documents (no CRD among them)
    are accepted by the API server."""
    operator = Operator("any-kind-shapes", [NamespaceDefaults("a=b"),
                                            RestartOnConfig(namespace.name),
                                            TypedGadgets(namespace.name)])
    docs = manifests.operator_manifests(operator, app="shapes:operator",
                                        namespace=namespace.name, image="shapes:1")
    assert not [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    applied = subprocess.run(["kubectl", "apply", "--dry-run=server", "-f", "-"],
                             input=manifests.to_yaml(docs), capture_output=True, text=True,
                             env={**os.environ, "KUBECONFIG": namespace.cluster.kubeconfig})
    assert applied.returncode == 0, applied.stderr


# -- sharding a built-in kind ---------------------------------------------------------------

class ShardedConfigMaps(Controller[dict[str, Any]]):
    """Records which member reconciled each ConfigMap labelled for this test."""

    resource = "v1/ConfigMap"
    label_selector = "any-kind-shard=yes"

    def __init__(self, namespace: str, member: str, seen: dict[str, set[str]]) -> None:
        self.namespace = namespace
        super().__init__()
        self.member, self.seen = member, seen

    def reconcile(self, obj: dict[str, Any], ctx: Context) -> None:
        self.seen.setdefault(obj["metadata"]["name"], set()).add(self.member)


@pytest.mark.filterwarnings("ignore::operator_kit.ExperimentalWarning")
def test_a_built_in_kind_is_sharded_over_two_members(
        cluster: TestCluster, namespace: Namespace) -> None:
    seen: dict[str, set[str]] = {}
    members = []
    try:
        for member in ("a", "b"):
            operator = Operator(f"shard-{namespace.name}",
                                [ShardedConfigMaps(namespace.name, member, seen)],
                                namespace=namespace.name, exit_on_lost_lease=False,
                                leader_election=LeaderElection(identity=member),
                                sharding=Sharding())
            operator.use(cluster.client)
            operator.start()
            members.append(operator)
        names = [f"cm-{i}" for i in range(12)]
        for name in names:
            namespace.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
                "name": name, "labels": {"any-kind-shard": "yes"}}})
        eventually(60, lambda: set(seen) == set(names), message="every ConfigMap reconciled")
        label = f"shard.operator-kit.io/shard-{namespace.name}"
        holders = {namespace.get("v1", "ConfigMap", n)["metadata"]["labels"].get(label)
                   for n in names}
        assert None not in holders and len(holders) == 2, holders  # both members hold some
        assert all(len(by) == 1 for by in seen.values()), seen  # each by its one member
        assert {m for by in seen.values() for m in by} == {"a", "b"}
    finally:
        for operator in members:
            operator.stop(timeout=10)
