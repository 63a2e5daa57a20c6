"""The Backup operator as real Pods on a real node: ``localcluster up --node``, its image
built and loaded without a registry, its generated manifests applied unchanged, the Pods
Ready through their probes, its webhooks called by the API server through the Service,
leader election across the two Pods (the leader's deleted), the PodDisruptionBudget
refusing a second eviction, a rolling update with no failed admission, and ``down``
leaving nothing behind.

It starts a plane of its own (a node cannot be added to a running plane). Where this
machine cannot run a node (not root, no overlayfs, a package missing) it is skipped with
the reason, or fails when ``OPERATOR_KIT_TEST_REQUIRE_NODE`` is set, as in CI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from backup_operator import operator
from kubernetes.client.exceptions import ApiException

from operator_kit.localcluster import LocalCluster
from operator_kit.localcluster.node import (
    KERNEL_SETTINGS,
    KUBELET_CHAINS,
    NodeError,
    check_machine,
)
from operator_kit.localcluster.pods import PodsError, wait_available
from operator_kit.manifests import operator_manifests
from operator_kit.testing import Namespace, TestCluster, eventually

REQUIRE_ENV = "OPERATOR_KIT_TEST_REQUIRE_NODE"
SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "backup"
IMAGE = "operator-kit.local/backup-operator:0.1.0"

pytestmark = pytest.mark.node


@pytest.fixture(scope="module")
def machine() -> None:
    try:
        check_machine()
    except NodeError as err:
        if os.environ.get(REQUIRE_ENV):
            pytest.fail(f"{REQUIRE_ENV} is set and {err}")
        pytest.skip(str(err))


def leftovers(plane: Path) -> dict[str, Any]:
    """What a node could leave behind on this machine, as comparable sets."""
    def out(*cmd: str) -> str:
        return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout

    chains = {f"{tool} {table} {line}" for tool in ("iptables", "ip6tables")
              for table in ("filter", "nat", "mangle")
              for line in out(tool, "-w", "-t", table, "-S").splitlines()}
    processes = set()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and str(plane).encode() in (entry / "cmdline").read_bytes():
                processes.add((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            pass
    return {
        "processes": processes,
        "mounts": {line.split()[4] for line in Path("/proc/self/mountinfo").read_text()
                   .splitlines() if str(plane) in line or "/run/netns" in line},
        "links": set(os.listdir("/sys/class/net")),
        "iptables": {c for c in chains if "KUBE-" in c or "OKIT-" in c},
        "cgroups": {str(p) for p in Path("/sys/fs/cgroup").glob("*/operator-kit-*")},
        "cni cache": {p.name for p in Path("/var/lib/cni/results").glob("*")}
        if Path("/var/lib/cni/results").exists() else set(),
        "folders": {p for p in ("/var/lib/kubelet", "/var/lib/cni", "/run/containerd",
                                "/var/log/containers", "/var/log/pods") if Path(p).exists()}
        | {str(p) for p in Path("/run").glob("operator-kit-*")},
        "kernel": {f"{k}={Path('/proc/sys', k).read_text().strip()}" for k in KERNEL_SETTINGS},
    }


def post(cluster: TestCluster, namespace: str, name: str, schedule: str) -> dict[str, Any]:
    result: dict[str, Any] = cluster.api.request(
        "POST", f"/apis/example.com/v1/namespaces/{namespace}/backups",
        body={"apiVersion": "example.com/v1", "kind": "Backup", "metadata": {"name": name},
              "spec": {"database": "orders", "schedule": schedule}})
    return result


def post_mortem(cluster: TestCluster, plane: LocalCluster, namespace: str) -> str:
    lines = []
    for pod in cluster.api.get(f"/api/v1/namespaces/{namespace}/pods")["items"]:
        lines.append(f"pod {pod['metadata']['name']}: {json.dumps(pod.get('status', {}))[:1500]}")
    for event in cluster.api.get(f"/api/v1/namespaces/{namespace}/events")["items"]:
        lines.append(f"event {event['involvedObject']['name']} {event['reason']}: "
                     f"{event['message']}")
    lines.append(f"--- kubelet\n{plane.log_tail('kubelet', 30)}")
    lines.append(f"--- containerd\n{plane.log_tail('containerd', 15)}")
    return "\n".join(lines)


def failover_and_eviction(cluster: TestCluster, namespace: Namespace) -> None:
    """Leader election across the two Pods (the leader's Pod deleted, the other leads and
    reconciles), then the PodDisruptionBudget: of two Ready Pods one may be evicted, the
    second eviction right after is refused."""
    election = operator.leader_election
    lease = (f"/apis/coordination.k8s.io/v1/namespaces/"
             f"{(election.namespace if election else None) or namespace.name}/leases/"
             f"{(election.lease_name if election else '') or operator.name}")
    pods = f"/api/v1/namespaces/{namespace.name}/pods"

    def holder() -> str | None:
        found: str | None = cluster.api.get(lease)["spec"].get("holderIdentity")
        return found
    leader = eventually(60, holder, interval=1, message="a Pod holds the Lease")
    cluster.api.request("DELETE", f"{pods}/{leader}")  # kubectl delete pod
    eventually(90, lambda: holder() not in (None, leader), interval=1,
               message="the other Pod took the Lease")
    eventually(60, lambda: post(cluster, namespace.name, "after-failover", "0 4 * * *"),
               interval=1, message="a Backup created after the failover")
    eventually(90, lambda: namespace.get("batch/v1", "CronJob", "after-failover"),
               interval=1, message="reconciled by the new leader")

    def two_ready() -> list[str]:
        ready = [p["metadata"]["name"] for p in cluster.api.get(pods)["items"]
                 if not p["metadata"].get("deletionTimestamp") and any(
                     c["type"] == "Ready" and c["status"] == "True"
                     for c in p.get("status", {}).get("conditions", []))]
        budget = cluster.api.get(f"/apis/policy/v1/namespaces/{namespace.name}/"
                                 f"poddisruptionbudgets/{operator.name}")
        allowed = budget.get("status", {}).get("disruptionsAllowed")
        return ready if len(ready) == 2 and allowed == 1 else []
    first, second = eventually(180, two_ready, interval=1,
                               message="two Ready Pods, one disruption allowed")

    def evict(pod: str) -> None:
        cluster.api.request("POST", f"{pods}/{pod}/eviction", body={
            "apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": pod, "namespace": namespace.name}})
    evict(first)
    with pytest.raises(ApiException) as refused:
        evict(second)
    assert refused.value.status == 429, refused.value.body
    assert "disruption budget" in str(refused.value.body)


def rolling_update(cluster: TestCluster, namespace: Namespace, path: str,
                   replicas: int) -> None:
    """A rollout of new Pods (the Deployment's own RollingUpdate strategy), with the
    webhooks asked all along: no admission fails."""
    def rolled_out() -> bool:
        found = cluster.api.get(path)
        status = found.get("status", {})
        return bool(status.get("observedGeneration", 0) >= found["metadata"]["generation"]
                    and status.get("updatedReplicas") == replicas
                    and status.get("availableReplicas") == replicas
                    and status.get("replicas") == replicas)
    eventually(180, rolled_out, interval=1, message="the Deployment settled after the eviction")
    cluster.api.request("PATCH", path, content_type="application/merge-patch+json", body={
        "spec": {"template": {"metadata": {"annotations": {
            "operator-kit.io/test-rollout": str(time.time())}}}}})
    failures: list[str] = []
    asked = 0
    deadline = time.monotonic() + 300
    while not rolled_out():
        assert time.monotonic() < deadline, "the rollout did not finish within 300s"
        try:
            cluster.api.request(
                "POST", f"/apis/example.com/v1/namespaces/{namespace.name}/backups",
                query={"dryRun": "All"},
                body={"apiVersion": "example.com/v1", "kind": "Backup",
                      "metadata": {"name": f"during-rollout-{asked}"},
                      "spec": {"database": "orders", "schedule": "0 5 * * *"}})
        except ApiException as err:
            failures.append(f"{err.status}: {err.body}")
        asked += 1
        time.sleep(0.2)
    assert asked > 0 and not failures, f"{len(failures)} of {asked} admissions failed: " \
        f"{failures[:3]}"
    print(f"rolling update: {asked} dry-run admissions during the rollout, none failed")


def image_tar(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the session keeps the Backup image's tar: built once by the first node test
    (the build is reproducible), imported by the next ones."""
    return tmp_path_factory.getbasetemp() / "backup-operator-0.1.0.tar"


def test_backup_operator_runs_as_pods_on_a_real_node(
        machine: None, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    folder = tmp_path / "plane"
    before = leftovers(folder)
    plane = LocalCluster(folder)
    started = time.monotonic()
    try:
        kubeconfig = plane.up(node=True, timeout=300)
        up_seconds = time.monotonic() - started
        cluster = TestCluster(str(kubeconfig))
        built = subprocess.run(
            [sys.executable, "-m", "operator_kit.localcluster", "image", str(SAMPLE),
             "--dir", str(folder), "--out", str(image_tar(tmp_path_factory))],
            capture_output=True, text=True, check=False)
        assert built.returncode == 0, built.stderr
        assert built.stdout.strip() == IMAGE

        # The generated manifests, unchanged: only the image is ours.
        documents = operator_manifests(operator, app="backup_operator:operator",
                                       namespace="backup-system", image=IMAGE)
        namespace = cluster.ensure_namespace("backup-system")
        for doc in documents:
            if doc["kind"] == "CustomResourceDefinition":
                cluster.install_crd(doc)
            elif doc["kind"] != "Namespace":
                cluster.api.apply(doc, field_manager="test-node")
        deployment = next(d for d in documents if d["kind"] == "Deployment")
        replicas = deployment["spec"]["replicas"]
        path = "/apis/apps/v1/namespaces/backup-system/deployments/" \
            + deployment["metadata"]["name"]
        try:
            # Every Pod Ready through its probes (or one line saying which is not, why,
            # and where its log is).
            wait_available(cluster.api, "backup-system", deployment["metadata"]["name"],
                           timeout=240, plane_dir=folder)
            # The API server calls the webhooks through the Service (its endpoints, the
            # Pods' addresses): a bad Backup is denied with the webhook's message...
            def denied() -> bool:
                with pytest.raises(ApiException) as refused:
                    post(cluster, "backup-system", "broken", "")
                return "spec.schedule is required" in json.loads(refused.value.body)["message"]
            eventually(60, denied, interval=1, message="the validating webhook denies")
            # ...and a good one is mutated, then reconciled by the leader into a CronJob.
            created = post(cluster, "backup-system", "nightly", "0 3 * * *")
            assert created["metadata"]["labels"]["example.com/managed"] == "true"
            eventually(90, lambda: namespace.get("batch/v1", "CronJob", "nightly"),
                       interval=1, message="the operator in its Pod made the CronJob")
            failover_and_eviction(cluster, namespace)
            rolling_update(cluster, namespace, path, replicas)
        except (AssertionError, ApiException, PodsError) as err:
            raise AssertionError(f"{err}\n{post_mortem(cluster, plane, 'backup-system')}") \
                from None
    finally:
        stopping = time.monotonic()
        plane.down()
        down_seconds = time.monotonic() - stopping
    print(f"up --node {up_seconds:.0f}s, down {down_seconds:.0f}s")
    after = leftovers(folder)
    assert not folder.exists()
    assert after == before, {k: after[k] ^ before[k] for k in after if after[k] != before[k]}
    assert not any(chain in line for line in after["iptables"] for chain in KUBELET_CHAINS)
