"""Controllers over any kind, without a cluster: declaration checks, RBAC from the
declaration, mapping keys of a discovered primary, and the errors users read."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from operator_kit import Controller, CustomResource, manifests
from operator_kit.api.kinds import Kind
from operator_kit.client.transport import Resource, error_message
from operator_kit.runtime.children import ForbiddenChild, OwnedKinds, foreign_status
from operator_kit.runtime.mapping import Mapped, primary_keys


@dataclass
class CertSpec:
    secret_name: str = ""


class Certificate(CustomResource):
    group = "cert-manager.io"
    version = "v1"
    kind = "Certificate"
    external = True
    json_names = "camelCase"
    spec: CertSpec


def rules_of(controller: Controller[Any]) -> dict[tuple[str, str], set[str]]:
    return {(r.api_groups[0], r.resources[0]): set(r.verbs)
            for r in controller.required_rules()}


def controller(resource: Any, **attributes: Any) -> Controller[Any]:
    made = type("Made", (Controller,), {"resource": resource, **attributes,
                                        "reconcile": lambda self, obj, ctx: None})
    return made()  # type: ignore[no-any-return]


@pytest.mark.parametrize(("resource", "name", "group", "plural", "namespaced"), [
    ("apps/v1/Deployment", "deployment", "apps", "deployments", True),
    ("v1/Namespace", "namespace", "", "namespaces", False),
    (k8s.V1Deployment, "deployment", "apps", "deployments", True),
    (Certificate, "certificate", "cert-manager.io", "certificates", True),
    ("cert-manager.io/v1/Certificate", "certificate", "cert-manager.io", "certificates", None),
])
def test_any_form_of_kind_names_a_primary(resource: Any, name: str, group: str, plural: str,
                                          namespaced: bool | None) -> None:
    made = controller(resource)
    kind = made.primary_kind()
    assert (made.name, kind.group, kind.resource_name, kind.namespaced) == (
        name, group, plural, namespaced)
    assert not kind.defined_here


def test_a_model_class_that_is_not_a_kubernetes_object_is_refused_naming_it() -> None:
    class NotAModel:
        pass

    with pytest.raises(TypeError, match=r"Made.resource: .*NotAModel.* does not name a kind"):
        controller(NotAModel)


def test_a_controller_without_resource_says_what_to_write() -> None:
    class Nothing(Controller[Any]):
        pass

    with pytest.raises(TypeError, match="'apps/v1/Deployment'"):
        Nothing()


def test_rules_for_another_partys_kind_are_read_only_unless_declared() -> None:
    assert rules_of(controller("apps/v1/Deployment"))[("apps", "deployments")] == {
        "get", "list", "watch"}
    with_finalizer = rules_of(controller("v1/Namespace", finalizer="example.com/x",
                                         owns=("v1/ConfigMap",)))
    assert with_finalizer[("", "namespaces")] == {"get", "list", "watch", "patch"}
    assert with_finalizer[("", "namespaces/finalizers")] == {"update"}
    assert ("", "namespaces/status") not in with_finalizer
    status = rules_of(controller(Certificate, writes_status=True))
    assert status[("cert-manager.io", "certificates/status")] == {"get", "patch", "update"}
    assert ("cert-manager.io", "certificates/status") not in rules_of(controller(Certificate))


def test_no_crd_is_generated_for_an_external_kind() -> None:
    with pytest.raises(TypeError, match="external = True"):
        manifests.crd(Certificate)
    assert Kind.of(Certificate).defined_resource is None


def test_mapping_accepts_models_of_a_discovered_primary() -> None:
    config_maps = Resource("", "v1", "configmaps", "ConfigMap", True)
    model = k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name="web", namespace="ns"))
    other = k8s.V1Secret(metadata=k8s.V1ObjectMeta(name="web", namespace="ns"))
    changed = {"metadata": {"namespace": "ns"}}
    assert primary_keys([model], config_maps, changed) == Mapped([("ns", "web")], [])
    assert primary_keys([other], config_maps, changed).errors == [
        "V1Secret ns/web (not a ConfigMap)"]
    namespaces = Resource("", "v1", "namespaces", "Namespace", False)
    assert primary_keys(["a", ("x", "b")], namespaces, changed).keys == [("", "a"), ("", "b")]


def test_patch_status_of_a_built_in_kind_is_a_type_error() -> None:
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}}
    with pytest.raises(TypeError, match="belongs to Kubernetes"):
        foreign_status(SimpleNamespace(api=SimpleNamespace(client=k8s.ApiClient())),  # type: ignore[arg-type]
                       namespace, {"phase": "x"})


def test_a_child_of_a_kind_not_in_owns_warns_once_per_kind(
        caplog: pytest.LogCaptureFixture) -> None:
    owned = OwnedKinds("web", [Kind.of("v1/Secret")])
    log = logging.getLogger("test.owned")
    with caplog.at_level(logging.WARNING, logger="test.owned"):
        for _ in range(3):
            owned.check(Kind.of("v1/ConfigMap"), log)
        owned.check(Kind.of("v1/Secret"), log)
    assert len(caplog.records) == 1
    assert "owns = [..., 'v1/ConfigMap']" in caplog.records[0].getMessage()


def forbidden() -> ApiException:
    err = ApiException(status=403, reason="Forbidden")
    err.body = json.dumps({"message": 'configmaps "x" is forbidden: User "u" cannot get '
                                      'resource "configmaps" in API group "" in the '
                                      'namespace "n"'})
    return err


@pytest.mark.parametrize("owned", [False, True])
def test_a_forbidden_child_names_every_verb(owned: bool) -> None:
    configmaps = Resource("", "v1", "configmaps", "ConfigMap", True)
    with pytest.raises(ApiException) as raised:
        with ForbiddenChild(Kind.of("v1/ConfigMap"), configmaps, owned):
            raise forbidden()
    message = error_message(raised.value)
    assert message.startswith("403 Forbidden: configmaps \"x\" is forbidden")
    assert "get, create, patch" in message
    assert ("regenerate and apply the manifests" in message) is owned
    assert ("declare 'v1/ConfigMap' in the controller's `owns`" in message) is not owned
    assert "Rule([''], ['configmaps'], ['get'])" not in message


def test_a_plain_403_still_names_the_rule_to_grant() -> None:
    assert "Rule([''], ['configmaps'], ['get'])" in error_message(forbidden())


def test_context_accepts_any_owner_form_for_owner_references() -> None:
    from operator_kit.runtime.context import owner_reference
    api_client = k8s.ApiClient()
    as_dict = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a", "uid": "u"}}
    model = k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name="a", uid="u"))
    expected = {"apiVersion": "v1", "kind": "Namespace", "name": "a", "uid": "u",
                "controller": True, "blockOwnerDeletion": True}
    assert owner_reference(as_dict, api_client) == expected
    assert owner_reference(model, api_client) == expected


# -- webhooks on kinds the operator does not define -----------------------------------------

def pod_review(pod: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "resource": {"group": "", "version": "v1", "resource": "pods"},
                        "name": "p", "namespace": "ns", "operation": "CREATE",
                        "userInfo": {"username": "alice"}, "object": pod}}


POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"},
       "spec": {"containers": [{"name": "main", "image": "forbidden"}]}}


def test_pod_webhooks_get_dicts_or_models_as_registered() -> None:
    from operator_kit.webhooks.server import AdmissionRequest, Denied, Webhooks

    app = Webhooks()
    seen: list[type] = []

    @app.mutate("v1/Pod", "/mutate-pod")
    def mutate(pod: dict[str, Any], request: AdmissionRequest[dict[str, Any]]) -> dict[str, Any]:
        seen.append(type(pod))
        pod["metadata"]["labels"] = {"mutated": "yes"}
        return pod

    @app.validate(k8s.V1Pod, "/validate-pod")
    def validate(request: AdmissionRequest[k8s.V1Pod]) -> None:
        assert request.object is not None
        seen.append(type(request.object))
        if request.object.spec.containers[0].image == "forbidden":
            raise Denied("no")

    @app.mutate("v1/Pod", "/wrong-form")
    def wrong(pod: dict[str, Any], request: AdmissionRequest[dict[str, Any]]) -> Any:
        return k8s.V1Pod()

    http = app.test_client()
    mutated = http.post("/mutate-pod", json=pod_review(POD)).get_json()["response"]
    assert mutated["allowed"] and mutated["patchType"] == "JSONPatch"
    denied = http.post("/validate-pod", json=pod_review(POD)).get_json()["response"]
    assert denied["allowed"] is False and denied["status"]["message"] == "no"
    assert seen == [dict, k8s.V1Pod]
    wrong_form = http.post("/wrong-form", json=pod_review(POD))  # a handler bug: 500
    assert wrong_form.status_code == 500
    registrations = {r.path: r for r in app.registrations()}
    assert registrations["/validate-pod"].kind is None
    assert str(registrations["/validate-pod"].target) == "v1/Pod"


def test_webhook_rules_for_built_in_and_unknown_scopes() -> None:
    from operator_kit.manifests import WebhookRule

    assert WebhookRule(Kind.of("v1/Pod"), "/p").rule()["scope"] == "Namespaced"
    assert WebhookRule(Kind.of("v1/Namespace"), "/n").rule()["scope"] == "Cluster"
    unknown = WebhookRule(Kind.of("cert-manager.io/v1/Certificate"), "/c").rule()
    assert unknown == {"apiGroups": ["cert-manager.io"], "apiVersions": ["v1"],
                       "operations": ["CREATE", "UPDATE"], "resources": ["certificates"],
                       "scope": "*"}


def test_a_sharded_controller_over_another_partys_kind_may_patch_its_shard_label() -> None:
    from operator_kit import LeaderElection, Operator, Sharding

    operator = Operator("sharded", [controller("v1/ConfigMap")],
                        leader_election=LeaderElection(), sharding=Sharding())
    rules = {(r.api_groups[0], r.resources[0]): set(r.verbs) for r in operator.rules()}
    assert rules[("", "configmaps")] == {"get", "list", "watch", "patch"}
