"""Admission webhooks on built-in kinds, called by the real API server over TLS.

An operator registers a mutating webhook on ``v1/Pod`` (handler gets dicts) and a
validating one on ``kubernetes.client.V1Pod`` (handler gets models); its generated webhook
configurations (`operator_manifests`) carry the rules for Pods, the declared object
selector and a namespace selector that leaves the operator's own namespace out, so a
broken webhook on Pods cannot stop the operator's own Pods. Only Pods labelled with this
module's scenario label are ever sent to it.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from operator_kit import Operator
from operator_kit.manifests import operator_manifests
from operator_kit.testing import Namespace, TestCluster, eventually
from operator_kit.webhooks.certificates import WebhookCertificate
from operator_kit.webhooks.server import AdmissionRequest, Denied

from .test_webhooks_cluster import Gunicorn, delete_quietly, external_name_service

SCENARIO = "builtin.operator-kit.test/scenario"
MUTATED = "builtin.operator-kit.test/mutated"
SELECTOR = {"matchLabels": {SCENARIO: "pods"}}

operator = Operator("podhooks")


@operator.webhooks.mutate("v1/Pod", "/mutate-pod", object_selector=SELECTOR)
def label_pod(pod: dict[str, Any], request: AdmissionRequest[dict[str, Any]]) -> dict[str, Any]:
    pod["metadata"].setdefault("labels", {})[MUTATED] = "true"
    return pod


@operator.webhooks.validate(k8s.V1Pod, "/validate-pod", object_selector=SELECTOR)
def no_forbidden_images(request: AdmissionRequest[k8s.V1Pod]) -> None:
    pod = request.object
    assert isinstance(pod, k8s.V1Pod), type(pod)
    if any(c.image == "forbidden" for c in pod.spec.containers):
        raise Denied("image 'forbidden' is not allowed")


@dataclass
class Setup:
    own: Namespace  # the operator's namespace: excluded from its Pod webhooks
    tenant: Namespace


def pod(name: str, image: str = "busybox:1.36") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {SCENARIO: "pods"}},
            "spec": {"containers": [{"name": "main", "image": image}]}}


def create_pod(ns: Namespace, body: dict[str, Any]) -> dict[str, Any]:
    created: dict[str, Any] = ns.api.request("POST", f"/api/v1/namespaces/{ns.name}/pods",
                                             body=body)
    return created


@pytest.fixture(scope="module")
def setup(cluster: TestCluster) -> Iterator[Setup]:
    own, tenant = cluster.namespace("podhooks"), cluster.namespace("tenant")
    tmp = tempfile.TemporaryDirectory(prefix="okpod-")
    cert = WebhookCertificate.generate(operator.webhook_service, own.name)
    server = Gunicorn(cert, Path(tmp.name), app=f"{__name__}:operator.webhooks",
                      probe="/validate-pod")
    docs = operator_manifests(operator, app=f"{__name__}:operator", namespace=own.name,
                              image="podhooks:test", ca_bundle=cert.ca_pem,
                              webhook_port=server.port)
    configurations = [d for d in docs if d["kind"].endswith("WebhookConfiguration")]
    paths = [f"/apis/admissionregistration.k8s.io/v1/{d['kind'].lower()}s/"
             f"{d['metadata']['name']}" for d in configurations]
    try:
        k8s.CoreV1Api(cluster.client).create_namespaced_service(
            own.name, external_name_service(operator.webhook_service, own.name, server.port))
        for doc in configurations:
            cluster.api.apply(doc, field_manager="test")
        eventually(30, lambda: MUTATED in (_probe(tenant) or {}),
                   message="the Pod webhooks in force")
        yield Setup(own, tenant)
    finally:
        for path in paths:
            delete_quietly(cluster.api, path)
        server.stop()
        own.delete()
        tenant.delete()
        tmp.cleanup()


def _probe(ns: Namespace) -> dict[str, str] | None:
    """The labels of a dry-run Pod in `ns` as admitted (None when refused)."""
    try:
        made = ns.api.request("POST", f"/api/v1/namespaces/{ns.name}/pods",
                              body=pod("probe"), query={"dryRun": "All"})
    except ApiException:
        return None
    return dict(made["metadata"].get("labels") or {})


def test_the_generated_configuration_has_pod_rules_and_leaves_the_operators_namespace_out(
        setup: Setup) -> None:
    docs = operator_manifests(operator, app=f"{__name__}:operator", namespace="ops",
                              image="podhooks:test")
    hooks = [h for d in docs if d["kind"].endswith("WebhookConfiguration")
             for h in d["webhooks"]]
    assert {h["name"] for h in hooks} == {"mutate-pod.core.operator-kit.io",
                                          "validate-pod.core.operator-kit.io"}
    for hook in hooks:
        assert hook["rules"][0]["resources"] == ["pods"]
        assert hook["rules"][0]["apiGroups"] == [""]
        assert hook["rules"][0]["scope"] == "Namespaced"
        assert hook["objectSelector"] == SELECTOR
        assert {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                "values": ["ops"]} in hook["namespaceSelector"]["matchExpressions"]


def test_a_pod_in_a_tenant_namespace_is_mutated_and_validated_as_dicts_and_models(
        setup: Setup) -> None:
    created = create_pod(setup.tenant, pod("web"))
    assert created["metadata"]["labels"][MUTATED] == "true"
    with pytest.raises(ApiException) as refused:
        create_pod(setup.tenant, pod("bad", image="forbidden"))
    assert "image 'forbidden' is not allowed" in json.loads(refused.value.body)["message"]


def test_the_operators_own_namespace_is_not_sent_to_its_pod_webhooks(setup: Setup) -> None:
    created = create_pod(setup.own, pod("own", image="forbidden"))  # neither webhook runs
    assert MUTATED not in created["metadata"]["labels"]
