"""The CRD versioning guide (docs/how-to/versions.md), step by step, through the real API
server: serve v2 beside v1, move storage to v2, migrate what is stored (the guide's
kubectl commands, run as written), deprecate v1, and drop it — which the API server
refuses while objects may still be stored as v1."""

from __future__ import annotations

import copy
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from operator_kit import CustomResource
from operator_kit.localcluster import find_or_build
from operator_kit.manifests import crd
from operator_kit.testing import Namespace, TestCluster, eventually

PAGE = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "versions.md"
CRD = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets.upgrade.operator-kit.test"


@dataclass
class GadgetSpec:
    size: int = 0


class Gadget(CustomResource):
    group = "upgrade.operator-kit.test"
    version = "v1"
    kind = "Gadget"
    spec: GadgetSpec


class GadgetV2(CustomResource, version_of=Gadget):
    version = "v2"
    spec: GadgetSpec


@pytest.fixture
def gadgets(cluster: TestCluster) -> Iterator[None]:
    cluster.install_crd(Gadget)
    yield
    GadgetV2.storage = None
    Gadget.deprecated = False
    try:
        cluster.api.request("DELETE", CRD)
    except ApiException as err:
        if err.status != 404:
            raise


def page_command(starts: str) -> str:
    lines = [line for line in PAGE.read_text().splitlines() if line.startswith(starts)]
    assert len(lines) == 1, f"docs/how-to/versions.md: {len(lines)} lines start with {starts!r}"
    return lines[0].replace("backups.example.com", "gadgets.upgrade.operator-kit.test")


def kubectl_line(cluster: TestCluster, line: str) -> subprocess.CompletedProcess[str]:
    """A page's shell line, with `kubectl` the plane's (talking to the test cluster)."""
    path = find_or_build(log=False).kubectl
    assert path is not None, "no kubectl next to the control plane's binaries"
    line = line.replace("kubectl ", f"{path} --kubeconfig {cluster.kubeconfig} ")
    return subprocess.run(["bash", "-o", "pipefail", "-c", line], capture_output=True,
                          text=True, timeout=120)


def stored_versions(cluster: TestCluster) -> list[str]:
    found: list[str] = cluster.api.get(CRD)["status"]["storedVersions"]
    return found


def without_v1(definition: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(definition)
    out["spec"]["versions"] = [v for v in out["spec"]["versions"] if v["name"] != "v1"]
    return out


def test_storage_moves_to_v2_the_stored_objects_are_migrated_and_then_v1_can_go(
        cluster: TestCluster, namespace: Namespace, gadgets: None) -> None:
    path = f"/apis/{Gadget.api_version()}/namespaces/{namespace.name}/gadgets"
    for name in ("a", "b", "c"):
        namespace.api.request("POST", path, body=Gadget(name, GadgetSpec(size=1),
                                                       namespace=namespace.name).to_dict())
    assert stored_versions(cluster) == ["v1"]

    # Step 2: storage = True on v2. New writes are stored as v2; the old objects stay v1.
    GadgetV2.storage = True
    definition = crd(Gadget)
    assert [v["name"] for v in definition["spec"]["versions"] if v["storage"]] == ["v2"]
    cluster.install_crd(definition)
    assert stored_versions(cluster) == ["v1", "v2"]

    # Dropping v1 now is refused: objects may still be stored as v1.
    with pytest.raises(ApiException) as refused:
        cluster.install_crd(without_v1(definition))
    assert refused.value.status == 422
    assert "storedVersions" in str(refused.value.body)

    # Step 3: rewrite every object (stored again, as v2), then tell the CRD.
    before = {i["metadata"]["name"]: i["metadata"]["resourceVersion"]
              for i in cluster.api.get(path)["items"]}
    rewrite = kubectl_line(cluster, page_command("kubectl get backups.example.com -A -o json"))
    assert rewrite.returncode == 0, rewrite.stderr
    after = {i["metadata"]["name"]: i["metadata"]["resourceVersion"]
             for i in cluster.api.get(path)["items"]}
    assert set(after) == set(before) and all(after[n] != before[n] for n in before), (
        "each object written again (stored as v2)")
    status = kubectl_line(cluster, page_command("kubectl patch crd backups.example.com"))
    assert status.returncode == 0, status.stderr
    assert stored_versions(cluster) == ["v2"]

    # Step 4: deprecate v1: clients reading it are warned.
    Gadget.deprecated = "upgrade.operator-kit.test/v1 Gadget is deprecated; use v2"
    cluster.install_crd(crd(Gadget))
    warned = kubectl_line(cluster, f"kubectl get gadgets.v1.upgrade.operator-kit.test "
                                   f"-n {namespace.name}")
    assert warned.returncode == 0, warned.stderr
    assert "Gadget is deprecated; use v2" in warned.stderr

    # Step 5: v1 removed from the CRD; the objects are read as v2.
    cluster.install_crd(without_v1(crd(Gadget)))
    v2 = f"/apis/{GadgetV2.api_version()}/namespaces/{namespace.name}/gadgets"
    eventually(30, lambda: sorted(i["metadata"]["name"]
                                  for i in cluster.api.get(v2)["items"]) == ["a", "b", "c"],
               message="the objects served as v2")
