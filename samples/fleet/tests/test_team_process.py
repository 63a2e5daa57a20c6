"""``python -m team_operator`` as a process: the command line runs the hub operator with
its fleet (the members' kubeconfigs in TEAM_OPERATOR_CLUSTERS) until SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from team_fleet_helpers import settle
from team_operator import Team, TeamSpec

from operator_kit.testing import TestCluster, eventually

TEAMS = "/apis/example.com/v1/teams"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def ready_everywhere(cluster: TestCluster, name: str) -> bool:
    found: dict[str, Any] = cluster.api.get_or_none(f"{TEAMS}/{name}") or {}
    entries = (found.get("status") or {}).get("clusters") or ()
    return sorted((e["name"], e["conditions"][0]["status"]) for e in entries) == [
        ("m1", "True"), ("m2", "True")]


def test_the_operators_command_runs_the_hub_and_its_fleet_until_sigterm(
        cluster: TestCluster, members: dict[str, TestCluster], directory: Path,
        tmp_path: Path) -> None:
    cluster.install_crd(Team)
    settle(members)
    port = free_port()
    log = (tmp_path / "operator.log").open("w")  # a file: a pipe could fill up and block
    process = subprocess.Popen(
        [sys.executable, "-m", "team_operator", "--kubeconfig", cluster.kubeconfig,
         "--namespace", "default", "--health-probe-bind-address", f"127.0.0.1:{port}",
         "--metrics-bind-address", "0"],
        env={**os.environ, "TEAM_OPERATOR_CLUSTERS": str(directory)},
        stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        eventually(30, lambda: urllib.request.urlopen(
            f"http://127.0.0.1:{port}/readyz", timeout=2).status == 200,
            message="the operator ready")
        cluster.api.request("POST", TEAMS, body=Team("proc", TeamSpec(
            config={"via": "command"})).to_dict())
        eventually(60, lambda: ready_everywhere(cluster, "proc"),
                   message="Ready on both members")
        for member in members.values():
            config = member.api.get("/api/v1/namespaces/team-proc/configmaps/team-config")
            assert config["data"]["via"] == "command"
        cluster.api.request("DELETE", f"{TEAMS}/proc")
        eventually(30, lambda: cluster.api.get_or_none(f"{TEAMS}/proc") is None,
                   message="the Team deleted by the process's finalizer")
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        log.close()
    output = (tmp_path / "operator.log").read_text()
    assert process.returncode == 0, output[-3000:]
    assert "cluster m1 joined" in output and "cluster m2 joined" in output, output[-3000:]
    settle(members)
