"""`python -m operator_kit.localcluster`: a second `up` reuses the plane, `down` leaves nothing.

These start their own plane in a temporary folder (a few seconds with cached binaries),
so they need the binaries rather than OPERATOR_KIT_TEST_KUBECONFIG.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from operator_kit.localcluster import LocalCluster, LocalClusterError
from operator_kit.localcluster.binaries import SUPPORTED, resolve


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().split(") ", 1)[1][:1] != "Z"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "operator_kit.localcluster", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.usefixtures("binaries")
def test_up_twice_reuses_the_plane_and_down_stops_every_process(tmp_path: Path) -> None:
    folder = tmp_path / "plane"
    first = cli("up", "--dir", str(folder))
    assert first.returncode == 0, first.stderr
    kubeconfig = first.stdout.strip().splitlines()[-1]
    assert kubeconfig == str(folder / "kubeconfig")
    pids = dict(LocalCluster(folder).state.pids)
    assert set(pids) == {"etcd", "kube-apiserver", "kube-controller-manager"}
    try:
        second = cli("up", "--dir", str(folder))
        assert second.returncode == 0, second.stderr
        assert second.stdout.strip().splitlines()[-1] == kubeconfig
        assert "reusing" in second.stderr
        assert LocalCluster(folder).state.pids == pids, "a second up must not start new processes"
        running = LocalCluster(folder).state.kubernetes_version
        assert running == resolve(None).kubernetes
        other = next(r for r in SUPPORTED.values() if r.kubernetes != running).kubernetes
        mismatch = cli("up", "--dir", str(folder), "--kubernetes-version", other)
        assert mismatch.returncode == 1, "a plane is reused only for the version asked for"
        assert f"runs Kubernetes {running}, not the {other} asked for" in mismatch.stderr
        assert LocalCluster(folder).state.pids == pids
        assert all(alive(pid) for pid in pids.values())
        key = folder / "pki" / "admin.key"
        assert key.stat().st_mode & 0o077 == 0, "private keys must not be group/world readable"
    finally:
        down = cli("down", "--dir", str(folder))
    assert down.returncode == 0, down.stderr
    assert not any(alive(pid) for pid in pids.values()), "down left a process behind"
    assert not folder.exists(), "down must remove the plane's state"


@pytest.mark.usefixtures("binaries")
def test_component_that_dies_on_start_is_reported_with_its_log(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path / "broken")
    with pytest.raises(LocalClusterError) as failed:
        cluster.up(apiserver_args=["--no-such-flag=1"], timeout=60)
    message = str(failed.value)
    assert "kube-apiserver exited" in message
    assert "no-such-flag" in message, "the tail of the component's log is shown"
    assert not (tmp_path / "broken").exists(), "a failed up cleans up after itself"
