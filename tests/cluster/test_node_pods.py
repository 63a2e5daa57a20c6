"""The operator's Pods at their limits, and Pods that cannot start, on a real node.

The webhook server's memory bounds against a real memory limit: the Backup operator as a
Pod on a real node, its conversion webhook asked through its Service (the API server's
service proxy: the Service's endpoints, as the API server calls a webhook).

- With the generated limit (`operator_kit.webhooks.limits.memory_limit_mib`, 416 MiB),
  eight of the largest conversions the limits allow at once: every one answered, 200 or
  the 503 the body budget gives (``Retry-After: 1``), the container never OOM-killed
  (restartCount 0, no kill counted in its memory cgroup). The container's peak (its
  cgroup's ``memory.peak``, or ``memory.max_usage_in_bytes`` on cgroup v1) is printed.
- With a limit lowered below what one answer needs, the documented way (a kustomize
  overlay patching the Deployment's resources): one such conversion ends in an OOM kill,
  seen where this machine's kernel puts it (``OOMKilled`` in the Pod's status when the
  whole container is killed, as cgroup v2's ``memory.oom.group`` does; on cgroup v1 the
  kernel kills the worker alone, counted in the cgroup, and gunicorn's master starts
  another), and the Pod back Ready, answering conversions again.

Bad input, each ending in one message naming the Pod, what failed and where its log is
(`operator_kit.localcluster.pods.wait_available`): an image the node does not have and an
operator that exits at start (at once: they cannot fix themselves), a Pod whose readiness
probe never passes (at the timeout, with the probe's failure).
"""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from operator_kit.localcluster import LocalCluster
from operator_kit.localcluster.node import Node
from operator_kit.localcluster.pods import PodsError, wait_available
from operator_kit.testing import TestCluster, eventually
from operator_kit.webhooks.limits import DEFAULT_MAX_CONVERSION_BODY_BYTES, MIB
from tests.cluster.test_node import IMAGE, SAMPLE, image_tar, machine, post_mortem

__all__ = ["machine"]  # the fixture, shared with test_node

pytestmark = pytest.mark.node

NAMESPACE = "backup-memory"
NAME = "backup-operator"
CONVERT = f"/api/v1/namespaces/{NAMESPACE}/services/https:{NAME}:443/proxy/convert"


@dataclass
class Deployed:
    plane: LocalCluster
    cluster: TestCluster
    kubectl: str
    base: Path
    started_peak: int = 0  # the container's peak memory at start (bytes), before any test

    def pod(self) -> dict[str, Any]:
        """The Deployment's one live Pod."""
        pods = [p for p in self.cluster.api.get(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
                if not p["metadata"].get("deletionTimestamp")]
        assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
        return pods[0]

    def apply(self, folder: Path) -> None:
        applied = subprocess.run([self.kubectl, "apply", "--server-side", "-k", str(folder)],
                                 # kubectl's discovery cache under HOME: the test's
                                 env={"KUBECONFIG": str(self.plane.kubeconfig),
                                      "HOME": str(self.base.parent)},
                                 capture_output=True, text=True, check=False, timeout=120)
        assert applied.returncode == 0, applied.stderr

    def available(self) -> dict[str, Any]:
        return wait_available(self.cluster.api, NAMESPACE, NAME, timeout=300,
                              plane_dir=self.plane.dir)


@pytest.fixture(scope="module")
def deployed(machine: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployed]:
    """The Backup operator, one replica (``--replicas 1``: every request reaches the one
    Pod), from the generated kustomize base with the generated limits."""
    folder = tmp_path_factory.mktemp("memory") / "plane"
    plane = LocalCluster(folder)
    try:
        kubeconfig = plane.up(node=True, timeout=300)
        tar = image_tar(tmp_path_factory)
        if tar.exists():  # built by test_node in this session
            plane.node.import_image(tar)
        else:
            built = subprocess.run(
                [sys.executable, "-m", "operator_kit.localcluster", "image", str(SAMPLE),
                 "--dir", str(folder), "--out", str(tar)],
                capture_output=True, text=True, check=False)
            assert built.returncode == 0, built.stderr
        base = folder.parent / "base"
        generated = subprocess.run(
            [sys.executable, "-m", "operator_kit.manifests", "backup_operator:operator",
             "--image", IMAGE, "--namespace", NAMESPACE, "--replicas", "1",
             "--kustomize", str(base)], capture_output=True, text=True, check=False)
        assert generated.returncode == 0, generated.stderr
        kubectl = plane.binaries().kubectl
        assert kubectl is not None
        deployed = Deployed(plane, TestCluster(str(kubeconfig)), str(kubectl), base)
        deployed.apply(base)
        deployed.available()
        time.sleep(5)  # past the first reconciles and probes
        deployed.started_peak = peak_bytes(memory_cgroup(plane.node, deployed.pod()))
        yield deployed
    finally:
        plane.down()


def conversion_review(count: int, pad: int) -> bytes:
    objects = [{"apiVersion": "example.com/v1", "kind": "Backup",
                "metadata": {"name": f"b{i}", "namespace": "team-a",
                             "annotations": {"pad": "p" * pad}},
                "spec": {"database": f"db{i}", "schedule": "0 3 * * *"}}
               for i in range(count)]
    return json.dumps({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                       "request": {"uid": "c-1", "desiredAPIVersion": "example.com/v2",
                                   "objects": objects}}).encode()


def largest_conversion() -> bytes:
    """As many objects of ~1 KiB as the conversion limit takes."""
    one = len(conversion_review(2, 1000)) - len(conversion_review(1, 1000))
    count = DEFAULT_MAX_CONVERSION_BODY_BYTES // one
    body = conversion_review(count, 1000)
    while len(body) > DEFAULT_MAX_CONVERSION_BODY_BYTES:
        count -= (len(body) - DEFAULT_MAX_CONVERSION_BODY_BYTES) // one + 1
        body = conversion_review(count, 1000)
    assert DEFAULT_MAX_CONVERSION_BODY_BYTES - 64 * 1024 < len(body)
    return body


def through_the_service(plane: LocalCluster, body: bytes) -> tuple[int, dict[str, str], bytes]:
    """POST `body` to the conversion webhook through the API server's service proxy, as
    the admin, on a connection of its own; the status, headers and body answered (status
    0: the connection broke with no answer). A refusal (503, 413) may come, and the
    connection close, before the whole body is sent: the answer is read all the same."""
    context = ssl.create_default_context(cafile=str(plane.dir / "pki" / "ca.crt"))
    context.load_cert_chain(str(plane.dir / "pki" / "admin.crt"),
                            str(plane.dir / "pki" / "admin.key"))
    head = (f"POST {CONVERT} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode()
    answer = b""
    with socket.create_connection(("127.0.0.1", plane.state.apiserver_port), timeout=120) \
            as raw, context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
        try:
            sock.sendall(head + body)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass  # answered and closed before the whole body was sent
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except (ConnectionResetError, ssl.SSLError):
            pass
    if not answer:
        return 0, {}, b""
    first, _, content = answer.partition(b"\r\n\r\n")
    lines = first.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    if headers.get("Transfer-Encoding") == "chunked":
        content = dechunked(content)
    return int(lines[0].split()[1]), headers, content


def dechunked(data: bytes) -> bytes:
    out = b""
    while data:
        size, _, data = data.partition(b"\r\n")
        length = int(size.split(b";")[0], 16)
        if length == 0:
            break
        out, data = out + data[:length], data[length + 2:]
    return out


def memory_cgroup(node: Node, pod: dict[str, Any]) -> Path:
    """The container's memory cgroup folder (named after its id, under the node's root)."""
    container = pod["status"]["containerStatuses"][0]["containerID"].split("://")[-1]
    roots = [Path("/sys/fs/cgroup/memory") / node.cgroup, Path("/sys/fs/cgroup") / node.cgroup]
    found = [p for root in roots if root.is_dir() for p in root.rglob(container) if p.is_dir()]
    assert found, f"no memory cgroup named {container} under {roots}"
    return found[0]


def peak_bytes(cgroup: Path) -> int:
    for name in ("memory.peak", "memory.max_usage_in_bytes"):
        if (cgroup / name).exists():
            return int((cgroup / name).read_text())
    raise AssertionError(f"no memory.peak nor memory.max_usage_in_bytes in {cgroup}")


def oom_kills(cgroup: Path) -> int:
    """The OOM kills the kernel counted in this cgroup (v2 memory.events, v1 oom_control)."""
    for name in ("memory.events", "memory.oom_control"):
        if (cgroup / name).exists():
            fields = dict(line.split() for line in (cgroup / name).read_text().splitlines())
            return int(fields.get("oom_kill", 0))
    raise AssertionError(f"no memory.events nor memory.oom_control in {cgroup}")


def test_the_largest_conversions_eight_at_once_stay_under_the_generated_limit(
        deployed: Deployed) -> None:
    pod = deployed.pod()
    limit = pod["spec"]["containers"][0]["resources"]["limits"]["memory"]
    assert limit == "416Mi"
    cgroup = memory_cgroup(deployed.plane.node, pod)
    assert int(next(iter((cgroup / n).read_text() for n in (
        "memory.max", "memory.limit_in_bytes") if (cgroup / n).exists()))) == 416 * MIB
    before = int(next(iter((cgroup / n).read_text() for n in (
        "memory.current", "memory.usage_in_bytes") if (cgroup / n).exists())))
    body = largest_conversion()
    results: list[tuple[int, dict[str, str], bytes]] = []
    lock = threading.Lock()

    def convert() -> None:
        result = through_the_service(deployed.plane, body)
        with lock:
            results.append(result)

    started = time.monotonic()
    clients = [threading.Thread(target=convert, name=f"largest-{i}") for i in range(8)]
    for thread in clients:
        thread.start()
    for thread in clients:
        thread.join(timeout=300)
    seconds = time.monotonic() - started
    peak = peak_bytes(cgroup)
    statuses = sorted(status for status, _, _ in results)
    print(f"\n8 conversions of {len(body) / MIB:.2f} MiB at once through the Service in "
          f"{seconds:.1f}s: {statuses}; the container at rest {before / MIB:.0f} MiB, its "
          f"peak {peak / MIB:.0f} MiB of its {limit} limit ({cgroup})")
    after = deployed.pod()["status"]["containerStatuses"][0]
    try:
        assert len(results) == 8 and set(statuses) <= {200, 503} and 200 in statuses, \
            [(s, c[:300]) for s, _, c in results]
        for status, headers, content in results:
            if status == 503:  # the budget was full for 2 s: retry, nothing half done
                assert headers.get("Retry-After") == "1", headers
                assert "body budget (Webhooks.body_budget_bytes)" in \
                    json.loads(content)["message"]
            else:
                converted = json.loads(content)["response"]["convertedObjects"]
                assert len(converted) == len(json.loads(body)["request"]["objects"])
                assert converted[0]["spec"]["source"] == {"database": "db0"}
        assert after["restartCount"] == 0 and not after.get("lastState"), after
        assert oom_kills(cgroup) == 0
        assert peak < 416 * MIB
    except AssertionError as err:
        raise AssertionError(f"{err}\n{post_mortem(deployed.cluster, deployed.plane, NAMESPACE)}"
                             ) from None


def test_a_limit_lowered_below_one_answer_ends_in_an_oom_kill_and_the_pod_comes_back(
        deployed: Deployed) -> None:
    # Room for the operator as it started, and 24 MiB more: well below what one 8 MiB
    # conversion takes (8-16 bytes per body byte).
    lowered = 16 * -(-(deployed.started_peak + 24 * MIB) // (16 * MIB))
    overlay = deployed.base.parent / "lowered"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(f"""\
resources: [../base]
patches:
  - target: {{kind: Deployment, name: {NAME}}}
    patch: |-
      - op: replace
        path: /spec/template/spec/containers/0/resources/limits/memory
        value: {lowered}Mi
""")
    deployed.apply(overlay)
    found = deployed.available()
    assert found["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"][
        "memory"] == f"{lowered}Mi"
    pod = deployed.pod()
    name = pod["metadata"]["name"]
    cgroup = memory_cgroup(deployed.plane.node, pod)
    assert oom_kills(cgroup) == 0
    body = largest_conversion()
    answers = [through_the_service(deployed.plane, body) for _ in range(2)]
    log = next((deployed.plane.dir / "node" / "pod-logs").glob(
        f"{NAMESPACE}_{name}_*/operator/0.log"))
    if (Path("/sys/fs/cgroup") / "cgroup.controllers").exists():
        # cgroup v2: the kubelet asks for memory.oom.group, the kernel kills the whole
        # container, and the Pod's status says so.
        def oom_killed() -> dict[str, Any] | None:
            status: dict[str, Any] = deployed.cluster.api.get(
                f"/api/v1/namespaces/{NAMESPACE}/pods/{name}")["status"]["containerStatuses"][0]
            terminated = status.get("lastState", {}).get("terminated", {})
            return status if terminated.get("reason") == "OOMKilled" else None
        status = eventually(60, oom_killed, interval=1, message="OOMKilled in the Pod's status")
        assert status["lastState"]["terminated"]["exitCode"] == 137
        assert status["restartCount"] >= 1
        seen = "OOMKilled in the Pod's status"
    else:
        # cgroup v1: the kernel kills the largest process of the container, gunicorn's
        # worker (the answers in it); the master logs it and starts another worker, the
        # container goes on (restartCount 0): the kill is in the cgroup and the log.
        eventually(60, lambda: oom_kills(cgroup) >= 1, interval=1,
                   message="an OOM kill counted in the container's memory cgroup")
        eventually(60, lambda: "was sent SIGKILL! Perhaps out of memory?" in log.read_text(),
                   interval=1, message=f"gunicorn's master logging the worker's kill in {log}")
        status = deployed.cluster.api.get(
            f"/api/v1/namespaces/{NAMESPACE}/pods/{name}")["status"]["containerStatuses"][0]
        assert status["restartCount"] == 0, status
        seen = (f"{oom_kills(cgroup)} OOM kill(s) in the container's cgroup, the worker's "
                "SIGKILL in its log, restartCount 0")
    # The answer being built died with the worker: the API server's proxy answers an error.
    assert all(status_ != 200 for status_, _, _ in answers), [a[:2] for a in answers]
    print(f"\nlimit {lowered} MiB (the first Pod's peak at start "
          f"{deployed.started_peak / MIB:.0f} MiB): answers "
          f"{[(a[0], a[2][:120]) for a in answers]}; {seen}")
    # Back: Ready again, and answering (a small conversion) through the Service.
    deployed.available()
    small = conversion_review(10, 10)
    eventually(60, lambda: through_the_service(deployed.plane, small)[0] == 200, interval=1,
               message="the Pod converts again")


# ---------------------------------------------------------------------- bad input


def small_deployment(deployed: Deployed, name: str, container: dict[str, Any]) -> None:
    deployed.cluster.ensure_namespace("bad-input")
    labels = {"app": name}
    deployed.cluster.api.apply({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "bad-input"},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels}, "spec": {
                     "containers": [{"name": "main", **container}],
                     "terminationGracePeriodSeconds": 1}}}}, field_manager="test-node")


def refusal(deployed: Deployed, name: str, timeout: float) -> tuple[str, float]:
    started = time.monotonic()
    with pytest.raises(PodsError) as failed:
        wait_available(deployed.cluster.api, "bad-input", name, timeout=timeout,
                       plane_dir=deployed.plane.dir)
    return str(failed.value), time.monotonic() - started


def test_an_image_the_node_does_not_have_is_named_at_once_with_where_to_look(
        deployed: Deployed) -> None:
    small_deployment(deployed, "no-image", {"image": "operator-kit.local/missing:1",
                                            "imagePullPolicy": "Never"})
    said, seconds = refusal(deployed, "no-image", timeout=240)
    print(f"\n{said}\n({seconds:.0f}s)")
    assert "\n" not in said and seconds < 120  # not the timeout: it cannot fix itself
    assert said.startswith("Deployment bad-input/no-image is not available: pod bad-input/"
                           "no-image-")
    assert "container main is waiting, ErrImageNeverPull: " in said
    assert 'image "operator-kit.local/missing:1" is not present' in said
    assert "kubectl describe pod -n bad-input no-image-" in said
    assert str(deployed.plane.dir / "logs" / "kubelet.log") in said


def test_an_operator_that_exits_at_start_is_named_with_its_exit_and_its_log(
        deployed: Deployed) -> None:
    # A readiness probe, as the operator's Deployment has: without one a container counts
    # as available the moment it runs, before it exits.
    small_deployment(deployed, "exits", {
        "image": IMAGE, "command": ["python", "-c", "print('no such settings'); exit(3)"],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8443}}})
    said, seconds = refusal(deployed, "exits", timeout=240)
    print(f"\n{said}\n({seconds:.0f}s)")
    assert "\n" not in said and seconds < 180
    assert "container main is waiting, CrashLoopBackOff: " in said
    assert "(it exited 3: Error; " in said
    assert "its log: kubectl logs -n bad-input exits-" in said and " --previous" in said
    log = Path(said.split("(or ", 1)[1].split(")", 1)[0])
    assert log.is_relative_to(deployed.plane.dir / "node" / "pod-logs")
    assert "no such settings" in log.read_text()


def test_a_pod_that_never_becomes_ready_is_named_with_its_failing_probe(
        deployed: Deployed) -> None:
    small_deployment(deployed, "never-ready", {
        "image": IMAGE, "command": ["python", "-m", "http.server", "8080"],
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 2}})
    said, seconds = refusal(deployed, "never-ready", timeout=40)
    print(f"\n{said}\n({seconds:.0f}s)")
    assert "\n" not in said
    assert said.startswith("Deployment bad-input/never-ready is not available after 40s: pod "
                           "bad-input/never-ready-")
    assert "container main runs but is not Ready; last warning event Unhealthy: Readiness " \
        "probe failed: HTTP probe failed with statuscode: 404" in said
    assert "its log: kubectl logs -n bad-input never-ready-" in said
