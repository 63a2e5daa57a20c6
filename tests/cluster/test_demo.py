"""README's first command, ``bash ci/demo.sh``, in both of its modes, as a user runs it:
no KUBECONFIG, so it starts a local plane of its own (here under a state folder of the
test's: ``XDG_STATE_HOME``) and stops nothing.

- where no node can run (here: ``OPERATOR_KIT_BINARIES`` holds the plane's binaries but
  no kubelet), the operator runs as processes on this host, and the demo says so and why;
- where one can (root, the packages, the node's binaries built: CI's node stage), it runs
  as two Pods from the Backup sample's image, built and loaded by the demo, and says so.

The demo installs into the interpreter it is given (OPERATOR_KIT_DEMO_PYTHON): the test's
own when that is a virtual environment (ci/test.sh's .venv, this checkout's), else a
fresh one that sees this Python's packages, so that no shared install is repointed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from operator_kit.localcluster import LocalCluster, find_or_build
from operator_kit.localcluster.node import NODE_NAME
from operator_kit.testing import TestCluster
from tests.cluster.test_node import IMAGE, leftovers, machine

ROOT = Path(__file__).resolve().parents[2]

__all__ = ["machine"]  # the fixture, shared with test_node


def demo_python(tmp_path: Path) -> str:
    """An interpreter ci/demo.sh may install this checkout and the sample into."""
    if sys.prefix != sys.base_prefix:
        return sys.executable
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True, timeout=300)
    return str(venv / "bin" / "python")


def run_demo(tmp_path: Path, **env: str) -> tuple[str, float]:
    """``bash ci/demo.sh`` without KUBECONFIG; its output and how long it took."""
    state = tmp_path / "state"
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("KUBECONFIG", "OPERATOR_KIT_DEMO_MODE", "PYTHONPATH")}
    environment.update(XDG_STATE_HOME=str(state),
                       OPERATOR_KIT_DEMO_PYTHON=demo_python(tmp_path), **env)
    started = time.monotonic()
    result = subprocess.run(["bash", "ci/demo.sh"], cwd=ROOT, env=environment,
                            capture_output=True, text=True, timeout=1500, check=False)
    seconds = time.monotonic() - started
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-8000:]
    return output, seconds


def assert_the_demo_ran(output: str) -> None:
    """What the demo shows in either mode: the webhooks and the reconcile."""
    assert "denied the request: spec.schedule is required" in output, output[-4000:]
    assert '"example.com/managed": "true"' in output  # the mutating webhook
    assert "CronJob nightly is up to date" in output  # reconciled
    assert '"database": "orders"' in output  # read as v2 through the conversion webhook


def test_the_demo_runs_processes_on_this_host_where_no_node_can_run(tmp_path: Path) -> None:
    binaries = find_or_build(log=False)
    without_node = tmp_path / "binaries"
    without_node.mkdir()
    for path in (binaries.etcd, binaries.kube_apiserver, binaries.kube_controller_manager,
                 binaries.kubectl):
        assert path is not None
        (without_node / path.name).symlink_to(path)
    try:
        output, seconds = run_demo(tmp_path, OPERATOR_KIT_BINARIES=str(without_node))
    finally:
        LocalCluster(tmp_path / "state" / "operator_kit" / "localcluster").down()
    print(f"the demo with processes: {seconds:.0f}s")
    assert f"no node: {without_node} (OPERATOR_KIT_BINARIES) has no kubelet, " \
        "kube-scheduler, pause; the operator runs as processes on this host" in output
    assert "mode: processes on this host" in output
    assert "mode: a real node" not in output and "with a node" not in output
    assert_the_demo_ran(output)
    assert "replicas stopped; the local control plane keeps running" in output


@pytest.mark.node
def test_the_demo_runs_the_operator_as_pods_where_a_node_can_run(
        machine: None, tmp_path: Path) -> None:
    plane = tmp_path / "state" / "operator_kit" / "localcluster"
    before = leftovers(plane)
    try:
        output, seconds = run_demo(tmp_path)
        print(f"the demo on a node: {seconds:.0f}s")
        assert "started local control plane (Kubernetes" in output
        assert "with a node" in output
        assert f"mode: a real node: the operator runs as Pods from the image {IMAGE}" in output
        assert "2 Pods Ready through their probes" in output
        assert_the_demo_ran(output)
        # The Pods are there, from the image, on the node, after the demo.
        cluster = TestCluster(str(plane / "kubeconfig"))
        pods = cluster.api.get("/api/v1/namespaces/backup-operator/pods")["items"]
        running = [p for p in pods if p["status"].get("phase") == "Running"]
        assert len(running) == 2, [p["status"] for p in pods]
        for pod in running:
            assert pod["spec"]["nodeName"] == NODE_NAME
            assert pod["spec"]["containers"][0]["image"] == IMAGE
    finally:
        stopping = time.monotonic()
        LocalCluster(plane).down()
        print(f"down {time.monotonic() - stopping:.0f}s")
    after = leftovers(plane)
    left = {k: after[k] ^ before[k] for k in after if after[k] != before[k]}
    print(f"left behind: {left}" if left else "nothing left behind")
    assert not left
