"""The test cluster is a real control plane: the behaviours operators rely on really happen.

These run against any cluster in OPERATOR_KIT_TEST_KUBECONFIG (the local plane, kind,
k3d). Each proves one behaviour a fake API server would get wrong or not have at all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from operator_kit.client.transport import Api, api_client
from operator_kit.testing import Namespace, TestCluster, eventually
from operator_kit.testing.deploy import service_account_kubeconfig

GROUP = "plane.operator-kit.test"

WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"widgets.{GROUP}"},
    "spec": {
        "group": GROUP,
        "names": {
            "kind": "Widget",
            "plural": "widgets",
            "singular": "widget",
            "listKind": "WidgetList",
        },
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                            "status": {
                                "type": "object",
                                "properties": {"phase": {"type": "string"}},
                            },
                        },
                    }
                },
            }
        ],
    },
}
WIDGETS = f"/apis/{GROUP}/v1/namespaces/{{ns}}/widgets"


@pytest.fixture(scope="module")
def widget_crd(cluster: TestCluster) -> None:
    cluster.install_crd(WIDGET_CRD)


def create_widget(ns: Namespace, name: str, size: int = 1, **meta: Any) -> Any:
    body = {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Widget",
        "metadata": {"name": name, **meta},
        "spec": {"size": size},
    }
    return ns.api.request("POST", WIDGETS.format(ns=ns.name), body=body)


def widget(ns: Namespace, name: str) -> Any:
    return ns.api.get(f"{WIDGETS.format(ns=ns.name)}/{name}")


def gone(api: Api, path: str) -> bool:
    try:
        api.get(path)
    except ApiException as err:
        return err.status == 404
    return False


@pytest.mark.usefixtures("widget_crd")
def test_status_subresource_patch_changes_status_only(namespace: Namespace) -> None:
    create_widget(namespace, "w", size=1)
    path = f"{WIDGETS.format(ns=namespace.name)}/w"
    namespace.api.request(
        "PATCH",
        path + "/status",
        body={"status": {"phase": "Ready"}, "spec": {"size": 99}},
        content_type="application/merge-patch+json",
    )
    after = widget(namespace, "w")
    assert after["status"] == {"phase": "Ready"}
    assert after["spec"] == {"size": 1}, "a status patch must not change spec"


@pytest.mark.usefixtures("widget_crd")
def test_spec_update_does_not_change_status(namespace: Namespace) -> None:
    create_widget(namespace, "w", size=1)
    path = f"{WIDGETS.format(ns=namespace.name)}/w"
    namespace.api.request(
        "PATCH",
        path + "/status",
        body={"status": {"phase": "Ready"}},
        content_type="application/merge-patch+json",
    )
    before = widget(namespace, "w")
    namespace.api.request(
        "PATCH",
        path,
        body={"spec": {"size": 2}, "status": {"phase": "X"}},
        content_type="application/merge-patch+json",
    )
    after = widget(namespace, "w")
    assert after["spec"] == {"size": 2}
    assert after["status"] == {"phase": "Ready"}, "a main-resource write must not change status"
    assert after["metadata"]["generation"] == before["metadata"]["generation"] + 1


@pytest.mark.usefixtures("widget_crd")
def test_config_map_owned_by_a_custom_resource_is_garbage_collected(namespace: Namespace) -> None:
    owner = create_widget(namespace, "owner")
    core = client.CoreV1Api(namespace.cluster.client)
    core.create_namespaced_config_map(
        namespace.name,
        {
            "metadata": {
                "name": "child",
                "ownerReferences": [
                    {
                        "apiVersion": f"{GROUP}/v1",
                        "kind": "Widget",
                        "name": "owner",
                        "uid": owner["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "data": {"k": "v"},
        },
    )
    namespace.api.request("DELETE", f"{WIDGETS.format(ns=namespace.name)}/owner")
    # The garbage collector re-reads discovery every 30 s, so a kind installed a moment
    # ago can take that long to be collected.
    eventually(
        90,
        lambda: gone(namespace.api, f"/api/v1/namespaces/{namespace.name}/configmaps/child"),
        message="owned ConfigMap garbage collected",
    )


@pytest.mark.usefixtures("widget_crd")
def test_object_with_a_finalizer_stays_until_it_is_removed(namespace: Namespace) -> None:
    create_widget(namespace, "held", finalizers=["plane.operator-kit.test/hold"])
    path = f"{WIDGETS.format(ns=namespace.name)}/held"
    namespace.api.request("DELETE", path)
    held = widget(namespace, "held")
    assert held["metadata"]["deletionTimestamp"], "deletion is pending"
    assert held["metadata"]["finalizers"] == ["plane.operator-kit.test/hold"]
    namespace.api.request(
        "PATCH",
        path,
        body={"metadata": {"finalizers": None}},
        content_type="application/merge-patch+json",
    )
    eventually(30, lambda: gone(namespace.api, path), message="finalized object deleted")


@pytest.mark.usefixtures("widget_crd")
def test_namespace_with_objects_finishes_deleting(cluster: TestCluster) -> None:
    ns = cluster.namespace("doomed")
    create_widget(ns, "w")
    client.CoreV1Api(cluster.client).create_namespaced_config_map(
        ns.name, {"metadata": {"name": "cm"}, "data": {"a": "b"}}
    )
    ns.delete(wait=True, timeout=120)


def test_service_account_without_rights_is_forbidden(namespace: Namespace,
                                                     tmp_path: Path) -> None:
    core = client.CoreV1Api(namespace.cluster.client)
    core.create_namespaced_service_account(namespace.name, {"metadata": {"name": "nobody"}})
    kubeconfig = service_account_kubeconfig(namespace.cluster, namespace.name, "nobody",
                                            tmp_path / "nobody.kubeconfig")
    with api_client(kubeconfig) as as_nobody:
        with pytest.raises(ApiException) as denied:
            client.CoreV1Api(as_nobody).list_namespaced_config_map(namespace.name)
    assert denied.value.status == 403
    assert "system:serviceaccount:" + namespace.name + ":nobody" in str(denied.value.body)
