"""Fleet providers and the supervisor's bookkeeping (no API server needed: the member
clusters here are kubeconfigs pointing at a closed port)."""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from operator_kit import Controller, CustomResource
from operator_kit.fleet import Cluster, Fleet, KubeconfigDirectory, StaticClusters, plan
from operator_kit.testing import eventually


@dataclass
class ThingSpec:
    size: int = 0


class Thing(CustomResource):
    group = "fleet.operator-kit.test"
    version = "v1"
    kind = "Thing"
    plural = "things"
    spec: ThingSpec


class ThingController(Controller[Thing]):
    resource = Thing
    fleet = True


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_kubeconfig(path: Path, port: int) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{port}",
                                               "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return path


def test_static_clusters_are_the_mapping_given() -> None:
    provider = StaticClusters({"east": "/k/east.yaml", "west": Path("/k/west.yaml")})
    assert provider.clusters() == {"east": Cluster("east", "/k/east.yaml"),
                                   "west": Cluster("west", "/k/west.yaml")}


def test_a_name_that_cannot_name_a_cluster_is_refused_with_what_would_do() -> None:
    with pytest.raises(ValueError, match="cannot name a cluster: use lower case"):
        StaticClusters({"East_1": "/k/e.yaml"})


def test_a_file_added_to_the_directory_joins_and_a_removed_one_leaves(tmp_path: Path) -> None:
    provider = KubeconfigDirectory(tmp_path)
    assert provider.clusters() == {}
    write_kubeconfig(tmp_path / "east.yaml", 1)
    write_kubeconfig(tmp_path / "west.kubeconfig", 1)
    found = provider.clusters()
    assert sorted(found) == ["east", "west"]
    assert found["east"].kubeconfig == str(tmp_path / "east.yaml")
    (tmp_path / "east.yaml").unlink()
    assert sorted(provider.clusters()) == ["west"]


def test_a_rewritten_kubeconfig_is_another_version(tmp_path: Path) -> None:
    provider = KubeconfigDirectory(tmp_path)
    path = write_kubeconfig(tmp_path / "east.yaml", 1)
    before = provider.clusters()["east"]
    write_kubeconfig(path, 22222)
    os.utime(path, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    after = provider.clusters()["east"]
    assert after.kubeconfig == before.kubeconfig and after.version != before.version


def test_hidden_files_and_folders_are_ignored_and_bad_names_reported(tmp_path: Path) -> None:
    provider = KubeconfigDirectory(tmp_path)
    write_kubeconfig(tmp_path / ".east.yaml.swp", 1)
    (tmp_path / "sub").mkdir()
    write_kubeconfig(tmp_path / "Bad_Name.yaml", 1)
    write_kubeconfig(tmp_path / "west.yaml", 1)
    write_kubeconfig(tmp_path / "west.yml", 1)
    assert sorted(provider.clusters()) == ["west"]
    assert len(provider.problems) == 2
    assert "Bad_Name" in provider.problems[0]
    assert "named by west.yaml already" in provider.problems[1]


def test_a_missing_directory_is_an_empty_fleet(tmp_path: Path) -> None:
    assert KubeconfigDirectory(tmp_path / "not-yet").clusters() == {}


def test_plan_joins_new_leaves_gone_and_rejoins_changed_clusters() -> None:
    a, b, c = Cluster("a", "/a"), Cluster("b", "/b"), Cluster("c", "/c")
    changes = plan({"a": a, "b": b}, {"b": Cluster("b", "/b", "2"), "c": c})
    assert changes.leave == ["a", "b"]
    assert changes.join == [Cluster("b", "/b", "2"), c]
    unchanged = plan({"a": a}, {"a": a})
    assert unchanged.join == [] and unchanged.leave == []


def test_the_fleet_starts_a_member_per_file_and_stops_its_threads_on_leave(
        tmp_path: Path) -> None:
    port = closed_port()
    write_kubeconfig(tmp_path / "east.yaml", port)
    fleet = Fleet("fleet-test", [ThingController()], KubeconfigDirectory(tmp_path),
                  shutdown_timeout=2.0)
    try:
        assert [c.name for c in fleet.sync().join] == ["east"]
        east = fleet.members()["east"]
        assert east.alive()
        write_kubeconfig(tmp_path / "west.yaml", port)
        changes = fleet.sync()
        assert [c.name for c in changes.join] == ["west"] and changes.leave == []
        assert fleet.members()["east"] is east  # not restarted
        (tmp_path / "east.yaml").unlink()
        assert fleet.sync().leave == ["east"]
        assert sorted(fleet.members()) == ["west"]
        eventually(5, lambda: not east.alive(), message="east's thread ending")
        assert east.threads() == [] and fleet.leaving() == []
        assert not any(t.name.startswith("reconcile-thing@east") for t in threading.enumerate())
    finally:
        fleet.stop()
    assert fleet.members() == {}


def test_nothing_joins_while_the_operator_may_not_reconcile(tmp_path: Path) -> None:
    write_kubeconfig(tmp_path / "east.yaml", closed_port())
    leading = threading.Event()
    fleet = Fleet("fleet-test", [ThingController()], KubeconfigDirectory(tmp_path),
                  may_reconcile=leading.is_set, shutdown_timeout=2.0)
    try:
        assert fleet.sync().join == [] and fleet.members() == {}
        leading.set()
        assert [c.name for c in fleet.sync().join] == ["east"]
    finally:
        fleet.stop()


def test_a_failing_provider_keeps_the_members(tmp_path: Path) -> None:
    write_kubeconfig(tmp_path / "east.yaml", closed_port())

    class Flaky:
        def __init__(self) -> None:
            self.fail = False

        def clusters(self) -> dict[str, Cluster]:
            if self.fail:
                raise OSError("inventory unreachable")
            return KubeconfigDirectory(tmp_path).clusters()

    provider = Flaky()
    fleet = Fleet("fleet-test", [ThingController()], provider, shutdown_timeout=2.0)
    try:
        fleet.sync()
        provider.fail = True
        changes = fleet.sync()
        assert changes.join == [] and changes.leave == []
        assert sorted(fleet.members()) == ["east"]
    finally:
        fleet.stop()


def test_two_fleet_controllers_with_one_name_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="two controllers share a name"):
        Fleet("f", [ThingController(), ThingController()], KubeconfigDirectory(tmp_path))


def test_the_fleet_stops_with_its_operators_event(tmp_path: Path) -> None:
    write_kubeconfig(tmp_path / "east.yaml", closed_port())
    operator_stopping = threading.Event()
    fleet = Fleet("fleet-test", [ThingController()], KubeconfigDirectory(tmp_path),
                  stop=operator_stopping, poll_interval=0.05, shutdown_timeout=2.0)
    fleet.start()
    eventually(5, lambda: "east" in fleet.members(), message="east joining")
    east = fleet.members()["east"]
    operator_stopping.set()
    eventually(5, lambda: fleet.members() == {} and not east.alive(),
               message="the fleet stopping with the operator")
    fleet.stop()


def test_stopping_the_fleet_leaves_the_operator_running(tmp_path: Path) -> None:
    operator_stopping = threading.Event()
    fleet = Fleet("fleet-test", [ThingController()], KubeconfigDirectory(tmp_path),
                  stop=operator_stopping)
    fleet.start()
    fleet.stop()
    assert fleet.stopping.is_set() and not operator_stopping.is_set()
