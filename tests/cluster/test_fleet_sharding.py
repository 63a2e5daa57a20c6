"""A fleet's clusters spread over sharded replicas (tests/cluster/fleet_replica.py).

Three member clusters — the hub's plane (OPERATOR_KIT_TEST_KUBECONFIG) and two more,
started for the session or named in OPERATOR_KIT_TEST_FLEET_KUBECONFIGS (``a:b``) — and
replicas as processes; they hold their Leases on the hub. Every reconcile's start and
end goes to one shared log; `overlaps` finds two reconciles of one (cluster, object)
that ran at the same time. Timings are shortened (lease 4 s, renew deadline 3 s, retry
0.5 s), as in test_sharding.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from operator_kit.fleet.sharding import cluster_lease
from operator_kit.testing import Namespace, TestCluster, eventually

from .conftest import freeze
from .fleet_replica import OPERATOR, Crate, overlaps, runs, writes_begun_after

LEASE, DEADLINE, RETRY = 4.0, 3.0, 0.5
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Site:
    name: str
    cluster: TestCluster


@pytest.fixture(scope="session")
def sites(fleet_clusters: list[TestCluster]) -> list[Site]:
    """Three member clusters, the hub's plane first, each with the Crate CRD."""
    found = [Site(f"m{i}", cluster) for i, cluster in enumerate(fleet_clusters)]
    for site in found:
        site.cluster.install_crd(Crate)
    return found


class Replica:
    """A replica process; its output goes to a file."""

    def __init__(self, fleet: Rig, identity: str, *args: str) -> None:
        self.identity = identity
        self.status = fleet.folder / f"{identity}.json"
        self.output = fleet.folder / f"{identity}.out"
        with self.output.open("w") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.cluster.fleet_replica",
                 str(fleet.hub.kubeconfig), fleet.space.name, identity, str(fleet.clusters),
                 str(fleet.log), str(self.status), "--lease-duration", str(LEASE),
                 "--renew-deadline", str(DEADLINE), "--retry-period", str(RETRY), *args],
                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)

    def state(self) -> dict[str, Any]:
        try:
            return dict(json.loads(self.status.read_text()))
        except (FileNotFoundError, json.JSONDecodeError):
            return {"held": [], "running": {}}

    def running(self) -> set[str]:
        """The clusters it runs with synced caches."""
        return {name for name, synced in self.state()["running"].items() if synced}

    def stop(self, sig: int = signal.SIGTERM, wait: float = 30.0) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        self.process.wait(wait)


@dataclass
class Rig:
    hub: TestCluster
    space: Namespace
    folder: Path
    clusters: Path
    log: Path
    sites: list[Site]
    spaces: dict[str, Namespace]
    replicas: list[Replica]

    def start(self, identity: str, *args: str) -> Replica:
        replica = Replica(self, identity, *args)
        self.replicas.append(replica)
        return replica

    def spread(self, replicas: list[Replica]) -> dict[str, str]:
        """cluster -> the replica running it, once each cluster runs on exactly one of
        `replicas` with synced caches."""
        where: dict[str, list[str]] = {}
        for replica in replicas:
            for name in replica.running():
                where.setdefault(name, []).append(replica.identity)
        assert sorted(where) == [s.name for s in self.sites], where
        assert all(len(ids) == 1 for ids in where.values()), where
        # Balanced: every replica runs a share (one each, when there are three).
        assert {ids[0] for ids in where.values()} == {r.identity for r in replicas}, where
        return {name: ids[0] for name, ids in where.items()}

    def lease_holder(self, cluster: str) -> str | None:
        lease = self.space.get("coordination.k8s.io/v1", "Lease",
                               cluster_lease(OPERATOR, cluster))
        return (lease["spec"].get("holderIdentity") or None) if lease else None

    def runs(self, killed: dict[str, float] | None = None) -> dict[tuple[str, str], Any]:
        return runs(self.log.read_text().splitlines(), killed)


@pytest.fixture
def fleet(cluster: TestCluster, sites: list[Site], tmp_path: Path) -> Iterator[Rig]:
    clusters = tmp_path / "clusters"
    clusters.mkdir()
    for site in sites:
        shutil.copy(site.cluster.kubeconfig, tmp_path / f".{site.name}.yaml")
        (tmp_path / f".{site.name}.yaml").rename(clusters / f"{site.name}.yaml")
    made = Rig(cluster, cluster.namespace("fleet-shard"), tmp_path, clusters,
                 tmp_path / "reconciles.log",
                 sites, {s.name: s.cluster.namespace("crates") for s in sites}, [])
    made.log.touch()
    yield made
    for replica in made.replicas:
        replica.stop(signal.SIGKILL, 10)
    for replica in made.replicas:
        print(f"--- {replica.identity}\n" + replica.output.read_text()[-4000:])
    made.space.delete()
    for space in made.spaces.values():
        space.delete()


def create_crates(fleet: Rig, names: list[str], note: str = "") -> None:
    def one(item: tuple[Site, str]) -> None:
        site, name = item
        space = fleet.spaces[site.name]
        site.cluster.api.request(
            "POST", f"/apis/{Crate.api_version()}/namespaces/{space.name}/crates",
            body={"apiVersion": Crate.api_version(), "kind": "Crate",
                  "metadata": {"name": name}, "spec": {"note": note}})

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, [(s, n) for s in fleet.sites for n in names]))


def touch_crates(fleet: Rig, names: list[str], note: str) -> None:
    """Change every Crate's spec: each is reconciled again."""
    def one(item: tuple[Site, str]) -> None:
        site, name = item
        space = fleet.spaces[site.name]
        site.cluster.api.request(
            "PATCH", f"/apis/{Crate.api_version()}/namespaces/{space.name}/crates/{name}",
            body={"spec": {"note": note}}, content_type="application/merge-patch+json")

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, [(s, n) for s in fleet.sites for n in names]))


def made_by(fleet: Rig, site: Site, name: str) -> str | None:
    """The replica that wrote the Crate's ConfigMap (None: not yet)."""
    found = fleet.spaces[site.name].get("v1", "ConfigMap", f"crate-{name}")
    return found["data"]["by"] if found else None


def keep_busy(fleet: Rig, names: list[str], stop: threading.Event) -> threading.Thread:
    """Touch every Crate every 0.5 s until `stop`: reconciles run all the time."""
    def loop() -> None:
        i = 0
        while not stop.wait(0.5):
            i += 1
            touch_crates(fleet, names, f"round-{i}")

    thread = threading.Thread(target=loop, name="keep-busy", daemon=True)
    thread.start()
    return thread


def reconcilers(fleet: Rig, after: float = 0.0,
                killed: dict[str, float] | None = None) -> dict[str, set[str]]:
    """cluster -> the replicas that started a reconcile on it after `after`."""
    found: dict[str, set[str]] = {}
    for (cluster, _key), those in fleet.runs(killed).items():
        for identity, start, _end in those:
            if start >= after:
                found.setdefault(cluster, set()).add(identity)
    return found


def wait(seconds: float, check: Callable[[], Any], message: str) -> Any:
    return eventually(seconds, check, message=message)


def test_three_replicas_each_run_one_cluster_and_each_cluster_is_reconciled_by_one(
        fleet: Rig) -> None:
    replicas = [fleet.start(f"replica-{i}") for i in range(3)]
    placed = wait(60, lambda: fleet.spread(replicas), "each cluster on one replica")
    assert sorted(placed.values()) == sorted(r.identity for r in replicas)
    for name, identity in placed.items():
        assert fleet.lease_holder(name) == identity
    names = [f"c{i}" for i in range(20)]
    since = time.monotonic()
    create_crates(fleet, names)
    for site in fleet.sites:
        wait(60, lambda site=site: all(made_by(fleet, site, n) == placed[site.name]
                                       for n in names),
             f"the Crates on {site.name} reconciled by {placed[site.name]}")
    assert reconcilers(fleet, since) == {name: {who} for name, who in placed.items()}
    assert overlaps(fleet.runs()) == []
    print(f"figure: spread {placed}; {sum(map(len, fleet.runs().values()))} reconciles")


def test_a_killed_replicas_cluster_is_taken_over_once_its_lease_expired(fleet: Rig) -> None:
    replicas = [fleet.start(f"replica-{i}") for i in range(3)]
    placed = wait(60, lambda: fleet.spread(replicas), "each cluster on one replica")
    names = [f"k{i}" for i in range(10)]
    create_crates(fleet, names)
    for site in fleet.sites:
        wait(60, lambda site=site: all(made_by(fleet, site, n) for n in names),
             f"the Crates on {site.name} reconciled")
    stop = threading.Event()
    busy = keep_busy(fleet, names, stop)
    try:
        time.sleep(2.0)
        victim = next(r for r in replicas if r.identity == placed["m1"])
        victim.process.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        victim.process.wait(10)
        survivors = [r for r in replicas if r is not victim]
        now = wait(LEASE + 30, lambda: fleet.spread(survivors), "m1 run by a survivor")
        took = time.monotonic() - killed_at
        killed = {victim.identity: killed_at}

        def taken_over() -> list[float]:
            return [start for (cluster, _k), those in fleet.runs(killed).items()
                    if cluster == "m1"
                    for who, start, _end in those if who != victim.identity and start > killed_at]

        # Synced caches come first; the reconciles they queue are logged a moment later.
        taken = wait(15, taken_over, "a survivor reconciling m1 after the kill")
    finally:
        stop.set()
        busy.join(10)
    # Not before the dead replica's member Lease expired (seen up to one retry late):
    assert min(taken) - killed_at >= LEASE - RETRY - 0.5
    assert took <= LEASE + 15
    assert now["m0"] == placed["m0"] or now["m2"] == placed["m2"]  # one stayed put at least
    assert fleet.lease_holder("m1") == now["m1"]
    assert overlaps(fleet.runs(killed)) == []
    print(f"figure: m1 first reconciled by a survivor {min(taken) - killed_at:.1f} s after "
          f"the kill, running there after {took:.1f} s; "
          f"{sum(map(len, fleet.runs().values()))} reconciles")


def test_a_joining_replica_gets_clusters_only_after_they_drained(fleet: Rig) -> None:
    first = fleet.start("replica-a", "--work", "0.3")
    wait(60, lambda: fleet.spread([first]), "every cluster on the only replica")
    names = [f"j{i}" for i in range(8)]
    create_crates(fleet, names)
    stop = threading.Event()
    busy = keep_busy(fleet, names, stop)
    try:
        time.sleep(2.0)
        joined_at = time.monotonic()
        others = [fleet.start(f"replica-{x}", "--work", "0.3") for x in "bc"]
        placed = wait(60, lambda: fleet.spread([first, *others]), "spread over three")
        assert sorted(placed.values()) == ["replica-a", "replica-b", "replica-c"]
        time.sleep(2.0)  # the new owners reconcile under load
    finally:
        stop.set()
        busy.join(10)
    found = fleet.runs()
    assert overlaps(found) == []
    for name, owner in placed.items():
        if owner == first.identity:
            continue
        # Drained first: the new owner's first reconcile on the cluster began after the
        # old owner's last one there ended.
        old = [end for (c, _k), those in found.items() if c == name
               for who, _s, end in those if who == first.identity]
        new = [start for (c, _k), those in found.items() if c == name
               for who, start, _e in those if who == owner and start > joined_at]
        assert new, f"{owner} never reconciled {name}"
        assert min(new) >= max(old), (name, min(new) - max(old))
        print(f"figure: {name} moved to {owner}: its first reconcile {min(new) - max(old):.2f}"
              f" s after the old owner's last ended")
    print(f"figure: {sum(map(len, found.values()))} reconciles")


def test_a_clean_stop_hands_its_clusters_over_without_waiting_for_the_lease(
        fleet: Rig) -> None:
    replicas = [fleet.start(f"replica-{i}", "--work", "0.2") for i in range(2)]
    placed = wait(60, lambda: fleet.spread(replicas), "spread over two")
    names = [f"s{i}" for i in range(8)]
    create_crates(fleet, names)
    stop = threading.Event()
    busy = keep_busy(fleet, names, stop)
    try:
        time.sleep(2.0)
        leaving = next(r for r in replicas if list(placed.values()).count(r.identity) >= 1)
        stayer = next(r for r in replicas if r is not leaving)
        stopped_at = time.monotonic()
        leaving.stop(signal.SIGTERM)
        wait(30, lambda: fleet.spread([stayer]), "every cluster on the one left")
        took = time.monotonic() - stopped_at
        time.sleep(1.0)
    finally:
        stop.set()
        busy.join(10)
    assert leaving.process.returncode == 0
    assert overlaps(fleet.runs()) == []
    assert took < LEASE + 10
    print(f"figure: every cluster on the remaining replica {took:.1f} s after SIGTERM")


def test_a_forged_cluster_lease_holds_its_cluster_for_one_lease_duration_at_most(
        fleet: Rig) -> None:
    fleet.hub.api.request(
        "POST", f"/apis/coordination.k8s.io/v1/namespaces/{fleet.space.name}/leases",
        body={"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
              "metadata": {"name": cluster_lease(OPERATOR, "m2")},
              "spec": {"holderIdentity": "ghost", "leaseDurationSeconds": 3600,
                       "renewTime": "2026-01-01T00:00:00.000000Z"}})
    replica = fleet.start("replica-a")
    started = time.monotonic()
    wait(60, lambda: replica.running() >= {"m0", "m1"}, "the unforged clusters run")
    wait(30, lambda: "m2" in replica.running(), "m2 taken from the forged holder")
    assert time.monotonic() - started < LEASE + 15  # not the hour it claims
    print(f"figure: m2 runs {time.monotonic() - started:.1f} s after the replica started")
    assert fleet.lease_holder("m2") == "replica-a"


def test_a_paused_replicas_writes_are_refused_once_its_cluster_was_taken_over(
        fleet: Rig) -> None:
    replicas = [fleet.start(f"replica-{i}", "--work", "1.0") for i in range(2)]
    placed = wait(60, lambda: fleet.spread(replicas), "spread over two")
    victim = next(r for r in replicas if r.identity == placed["m1"])
    stayer = next(r for r in replicas if r is not victim)
    names = [f"p{i}" for i in range(4)]
    create_crates(fleet, names)
    # Pause it inside its reconciles' waits: they resume after the takeover, and write.
    wait(30, lambda: any(who == victim.identity and end == float("inf")
                         for (c, _k), those in fleet.runs().items() if c == "m1"
                         for who, _s, end in those), "a reconcile running on m1")
    freeze(victim.process)
    paused_at = time.monotonic()
    try:
        wait(LEASE + 30, lambda: "m1" in stayer.running(), "m1 taken over")
        touch_crates(fleet, names, "after the takeover")
        wait(30, lambda: all(made_by(fleet, fleet.sites[1], n) == stayer.identity
                             for n in names), "m1's Crates written by the other replica")
    finally:
        victim.process.send_signal(signal.SIGCONT)
    victim.process.wait(30)  # its member Lease lapsed: it exits
    time.sleep(1.0)
    lines = fleet.log.read_text().splitlines()
    assert writes_begun_after(lines, victim.identity, paused_at) == []
    assert victim.process.returncode != 0
    assert all(made_by(fleet, fleet.sites[1], n) == stayer.identity for n in names)
    refused = victim.output.read_text().count("Fenced: ")
    print(f"figure: {refused} writes refused after resuming")
