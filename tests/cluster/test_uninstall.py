"""Uninstalling cannot hang: ``--uninstall`` deletes the custom objects while the operator
still runs (each cleanup runs, each finalizer goes), then the manifests; with the
operator gone it stops, deletes nothing else, and names each object left with the
command that frees it — which, run, lets the uninstall finish."""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from operator_kit.localcluster import find_or_build
from operator_kit.testing import Namespace, TestCluster, eventually
from tests.cluster import uninstall_operator
from tests.cluster.uninstall_operator import Keepsake, KeepsakeSpec

REPO = Path(__file__).resolve().parents[2]
APP = "tests.cluster.uninstall_operator:operator"
CRD = ("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
       "keepsakes.uninstall.operator-kit.test")
ROLE = "/apis/rbac.authorization.k8s.io/v1/clusterroles/keepsake-operator"


def manifests(cluster: TestCluster, namespace: str,
              *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "operator_kit.manifests", APP, "--namespace", namespace,
         "--kubeconfig", str(cluster.kubeconfig), *flags],
        cwd=REPO, capture_output=True, text=True, timeout=300)


def install(cluster: TestCluster, kubectl: str, namespace: str) -> None:
    stream = manifests(cluster, namespace)
    assert stream.returncode == 0, stream.stderr
    applied = subprocess.run([kubectl, "--kubeconfig", str(cluster.kubeconfig), "apply",
                              "-f", "-"], input=stream.stdout, capture_output=True,
                             text=True, timeout=120)
    assert applied.returncode == 0, applied.stderr
    eventually(30, lambda: cluster.api.get_or_none(
        f"/apis/{Keepsake.api_version()}/keepsakes") is not None,
        message="the Keepsake kind served")


def keepsakes(cluster: TestCluster) -> list[str]:
    found = cluster.api.get_or_none(f"/apis/{Keepsake.api_version()}/keepsakes")
    return sorted(f"{i['metadata']['namespace']}/{i['metadata']['name']}"
                  for i in (found or {"items": []})["items"])


def make_keepsakes(cluster: TestCluster, *namespaces: Namespace) -> list[str]:
    for ns in namespaces:
        for name in ("one", "two"):
            body = Keepsake(name, KeepsakeSpec(note=name), namespace=ns.name).to_dict()
            ns.api.request("POST", f"/apis/{Keepsake.api_version()}/namespaces/{ns.name}/"
                           "keepsakes", body=body)
    return sorted(f"{ns.name}/{name}" for ns in namespaces for name in ("one", "two"))


def with_finalizers(cluster: TestCluster, names: list[str]) -> bool:
    found = cluster.api.get(f"/apis/{Keepsake.api_version()}/keepsakes")["items"]
    return len(found) == len(names) and all(
        uninstall_operator.FINALIZER in (i["metadata"].get("finalizers") or [])
        for i in found)


@pytest.fixture(scope="module")
def kubectl() -> str:
    path = find_or_build(log=False).kubectl
    if path is None:
        pytest.fail("no kubectl next to the control plane's binaries")
    return str(path)


@pytest.fixture
def installed(cluster: TestCluster, kubectl: str) -> Iterator[str]:
    """The keepsake operator's manifests applied in a namespace of their own (its name);
    whatever a test leaves is removed afterwards, finalizers and all."""
    namespace = f"keepsake-{uuid.uuid4().hex[:6]}"
    install(cluster, kubectl, namespace)
    yield namespace
    for item in (cluster.api.get_or_none(f"/apis/{Keepsake.api_version()}/keepsakes")
                 or {"items": []})["items"]:
        meta = item["metadata"]
        cluster.api.request(
            "PATCH", f"/apis/{Keepsake.api_version()}/namespaces/{meta['namespace']}/"
            f"keepsakes/{meta['name']}", body={"metadata": {"finalizers": None}},
            content_type="application/merge-patch+json")
    manifests(cluster, namespace, "--uninstall", "--timeout", "10")


@pytest.fixture
def another_namespace(cluster: TestCluster) -> Iterator[Namespace]:
    ns = cluster.namespace("keepsake-other")
    yield ns
    ns.delete()


def test_uninstall_cleans_up_every_custom_object_first_then_deletes_the_manifests(
        cluster: TestCluster, installed: str, namespace: Namespace,
        another_namespace: Namespace) -> None:
    operator, controller = uninstall_operator.make_operator()
    operator.use(cluster.client)
    operator.start()
    try:
        assert operator.wait_synced(30)
        names = make_keepsakes(cluster, namespace, another_namespace)
        eventually(30, lambda: with_finalizers(cluster, names),
                   message="the operator added its finalizer to every Keepsake")

        done = manifests(cluster, installed, "--uninstall", "--timeout", "60")

        assert done.returncode == 0, done.stderr
        assert sorted(controller.cleaned) == names, done.stderr
        assert f"{len(names)} custom object(s) cleaned up" in done.stderr
        assert keepsakes(cluster) == []
    finally:
        operator.stop(timeout=10)
    eventually(60, lambda: cluster.api.get_or_none(CRD) is None, message="the CRD gone")
    assert cluster.api.get_or_none(ROLE) is None
    namespace_left = cluster.api.get_or_none(f"/api/v1/namespaces/{installed}")
    assert namespace_left is None or namespace_left["metadata"].get("deletionTimestamp")


def test_with_the_operator_gone_uninstall_stops_names_what_is_left_and_its_fix_works(
        cluster: TestCluster, installed: str, namespace: Namespace, kubectl: str) -> None:
    operator, _ = uninstall_operator.make_operator()
    operator.use(cluster.client)
    operator.start()
    try:
        names = make_keepsakes(cluster, namespace)
        eventually(30, lambda: with_finalizers(cluster, names),
                   message="the operator added its finalizer to every Keepsake")
    finally:
        operator.stop(timeout=10)  # the operator is gone before the uninstall

    started = time.monotonic()
    stopped = manifests(cluster, installed, "--uninstall", "--timeout", "3")

    assert stopped.returncode == 1, stopped.stderr
    assert time.monotonic() - started < 60, "it gave up after its timeout, not hung"
    for name in ("one", "two"):
        assert (f"error: Keepsake {namespace.name}/{name} is still there (finalizers "
                f"{uninstall_operator.FINALIZER})") in stopped.stderr
    assert "nothing else was deleted" in stopped.stderr
    assert cluster.api.get_or_none(CRD) is not None, "the CRD stays while objects are left"
    assert cluster.api.get_or_none(ROLE) is not None

    commands = [line.strip() for line in stopped.stderr.splitlines()
                if line.strip().startswith("kubectl patch ")]
    assert len(commands) == 2, stopped.stderr
    for command in commands:  # the printed fix, run as printed (kubectl from the plane)
        argv = shlex.split(command)
        run = subprocess.run([kubectl, "--kubeconfig", str(cluster.kubeconfig), *argv[1:]],
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr

    done = manifests(cluster, installed, "--uninstall", "--timeout", "60")
    assert done.returncode == 0, done.stderr
    assert keepsakes(cluster) == []
    eventually(60, lambda: cluster.api.get_or_none(CRD) is None, message="the CRD gone")
