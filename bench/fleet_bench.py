"""Fleets: one operator reconciling the same kind on several member clusters, sharded.

Replica processes (tests/cluster/fleet_replica.py: an Operator with `Sharding` and a
fleet controller, `Fleet.of(...).run_with(...)`) run the fleet controller of Crates on
the member clusters listed by a watched kubeconfig folder; the Leases live on the first
plane (the hub, which is also member m0). Each reconcile waits ``--work`` seconds
(default 50 ms: a call to a database or a cloud API), then server-side applies a
ConfigMap owned by the Crate on its own cluster, on ``--workers`` threads per member
cluster; every reconcile's start and end goes to one shared log by (cluster, namespace,
name). Leases use client-go's timings (15 s, 10 s, 2 s) unless ``--lease`` says otherwise.

1. **speedup** (3 replicas vs 1 on the same 3 clusters). With 3 replicas running, each
   holding one cluster (waited for), ``--objects`` Crates are created on each cluster
   (12 at a time) and timed from the first create to the last first reconcile's end; then two
   replicas stop (SIGTERM: they drain and release their clusters), the third runs all
   three, and the same again. speedup = the 1-replica time / the 3-replica time. Both
   run 4 workers per cluster, so what the spread buys is CPU: three processes (three
   GILs) instead of one. The order of the two alternates from round to round.
2. **isolation** (in the 1-replica phase: the unreachable cluster shares the process).
   Crates are created open-loop (``--rate`` per second, alternating over the two healthy
   members) and each one's latency measured from just before its create to the end of its
   first reconcile; p99 over ``--samples`` of them with all three members healthy, then
   again with the third member unreachable: its API server sits behind a TCP proxy
   (operator_kit.testing.faults) that is closed — every connection reset, every new one
   refused, as a stopped API server looks to its clients. Even rounds measure it the
   other way round (still down first, then back behind a new proxy: its kubeconfig file
   rewritten, it rejoins). isolation = p99 one down / p99 all healthy (goal ≤ 1.5).
   speedup and isolation are medians over ``--rounds`` (default 5).
3. **join_s.** With 3 replicas, a fourth cluster, with a Crate already on it, joins by its
   kubeconfig file appearing in the folder (written aside, then renamed in); join_s is
   the time from the rename to the end of that Crate's first reconcile (goal ≤ 10 s; the
   folder is polled every second, and the replica placed to run it first acquires its
   Lease).
4. **takeover.** Under a steady load (every Crate of m0-m2 changed each second), the
   replica running m1 is SIGKILLed; takeover_s (printed, not on the last line) is the
   time until another replica's first reconcile on m1: its member Lease expiring, then
   its cluster Lease freed and acquired.
5. **overlaps.** The log of the whole run is checked for two reconciles of one (cluster,
   object) that ran at the same time (goal 0); the killed replica's last reconciles, if
   any, end at the kill.

    python bench/fleet_bench.py [--kubeconfigs A:B:C:D] [--objects 200]

Clusters not given by ``--kubeconfigs`` (four are used; the first holds the Leases) are
local planes started in a temporary folder and stopped at the end. The last line is
``fleet: clusters=3 replicas=3 objects=<n> speedup=<x.xx> isolation=<x.xx> join_s=<s>
overlaps=<n>``, objects being the Crates of one speedup run (all three clusters).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from operator_kit.localcluster import LocalCluster  # noqa: E402
from operator_kit.testing import Namespace, TestCluster, eventually  # noqa: E402
from operator_kit.testing.faults import TcpProxy  # noqa: E402
from tests.cluster.fleet_replica import Crate, overlaps, runs  # noqa: E402

Key = tuple[str, str, str]  # cluster, namespace, name


class Log:
    """The replicas' shared reconcile log, read as it grows: the first end of each key."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.touch()
        self.first: dict[Key, float] = {}
        self.first_start: dict[str, list[tuple[float, str]]] = {}  # cluster -> (start, who)
        self._offset = 0
        self._partial = ""
        self.lock = threading.Lock()

    def read(self) -> None:
        with self.lock, self.path.open() as file:
            file.seek(self._offset)
            text = self._partial + file.read()
            self._offset = file.tell()
            lines = text.split("\n")
            self._partial = lines.pop()
            for line in lines:
                parts = line.split()
                if len(parts) != 5:
                    continue
                what, who, cluster, key, at = parts
                namespace, _, name = key.partition("/")
                if what == "E":
                    self.first.setdefault((cluster, namespace, name), float(at))
                elif what == "S":
                    self.first_start.setdefault(cluster, []).append((float(at), who))

    def first_end(self, key: Key) -> float | None:
        self.read()
        return self.first.get(key)


class Replicas:
    """Replica processes of the bench's fleet operator."""

    def __init__(self, folder: Path, hub: str, namespace: str, clusters: Path, log: Path,
                 options: list[str]) -> None:
        self.folder, self.hub, self.namespace = folder, hub, namespace
        self.clusters, self.log, self.options = clusters, log, options
        self.running: dict[str, subprocess.Popen[bytes]] = {}
        self.count = 0

    def start(self) -> str:
        self.count += 1
        identity = f"replica-{self.count}"
        with (self.folder / f"{identity}.out").open("w") as out:
            self.running[identity] = subprocess.Popen(
                [sys.executable, "-m", "tests.cluster.fleet_replica", self.hub,
                 self.namespace, identity, str(self.clusters), str(self.log),
                 str(self.folder / f"{identity}.json"), *self.options],
                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        return identity

    def stop(self, identity: str, sig: int = signal.SIGTERM) -> None:
        process = self.running.pop(identity)
        process.send_signal(sig)
        process.wait(60)

    def runs(self) -> dict[str, set[str]]:
        """replica -> the clusters it runs with synced caches (from its status file)."""
        found: dict[str, set[str]] = {}
        for identity in self.running:
            try:
                state = json.loads((self.folder / f"{identity}.json").read_text())
            except (FileNotFoundError, json.JSONDecodeError):
                state = {"running": {}}
            found[identity] = {n for n, synced in state["running"].items() if synced}
        return found

    def settle(self, clusters: list[str], label: str) -> dict[str, str]:
        """Wait until each of `clusters` runs on exactly one replica, every replica running
        its share; cluster -> replica."""
        def check() -> dict[str, str]:
            where: dict[str, list[str]] = {}
            for identity, names in self.runs().items():
                for name in names:
                    where.setdefault(name, []).append(identity)
            assert sorted(where) == sorted(clusters), where
            assert all(len(ids) == 1 for ids in where.values()), where
            share = -(-len(clusters) // len(self.running))
            assert all(len([c for c in where if where[c] == [r]]) in (share, share - 1)
                       for r in self.running), where
            return {name: ids[0] for name, ids in where.items()}

        return eventually(180, check, interval=0.2, message=label)

    def stop_all(self) -> None:
        for identity in list(self.running):
            self.stop(identity, signal.SIGKILL)


def create(cluster: TestCluster, ns: Namespace, name: str, note: str = "") -> float:
    """Create a Crate; the time just before the create."""
    at = time.monotonic()
    cluster.api.request("POST", f"/apis/{Crate.api_version()}/namespaces/{ns.name}/crates",
                        body={"apiVersion": Crate.api_version(), "kind": "Crate",
                              "metadata": {"name": name}, "spec": {"note": note}})
    return at


def add_file(folder: Path, name: str, kubeconfig: str | Path) -> float:
    staged = folder.parent / f".{name}.yaml"
    shutil.copy(kubeconfig, staged)
    at = time.monotonic()
    staged.rename(folder / f"{name}.yaml")
    return at


def proxied(kubeconfig: str, proxy: TcpProxy, into: Path) -> Path:
    """`kubeconfig` with its server replaced by the proxy's address (same certificate:
    the plane's serving certificate names 127.0.0.1, whatever the port)."""
    text = Path(kubeconfig).read_text()
    server = next(line for line in text.splitlines() if "server:" in line)
    into.write_text(text.replace(server.split("server:")[1].strip(),
                                 f"https://{proxy.address}"))
    return into


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))]


def speedup_run(members: list[tuple[str, TestCluster]], log: Log, count: int,
                label: str, made: list[Namespace]) -> float:
    spaces = {name: cluster.namespace("fleet-bench") for name, cluster in members}
    keys = [(name, spaces[name].name, f"s{i}") for i in range(count) for name, _ in members]
    by_name = dict(members)
    started = time.monotonic()
    with ThreadPoolExecutor(12) as creators:  # creates at once: the replicas are the limit
        list(creators.map(lambda k: create(by_name[k[0]], spaces[k[0]], k[2]), keys))
    eventually(600, lambda: all(log.first_end(k) for k in keys), interval=0.05,
               message=f"{label}: every Crate reconciled")
    took = max(log.first_end(k) or 0.0 for k in keys) - started
    print(f"{label}: {len(keys)} Crates on {len(members)} clusters reconciled in "
          f"{took:.2f} s", flush=True)
    made += spaces.values()  # deleted at the end: a namespace being deleted makes noise
    time.sleep(2.0)  # the echoes of the children settle
    return took


def latencies(healthy: list[tuple[str, TestCluster]], log: Log, samples: int, rate: float,
              label: str, made: list[Namespace]) -> list[float]:
    spaces = {name: cluster.namespace("fleet-bench") for name, cluster in healthy}
    created: dict[Key, float] = {}
    next_at = time.monotonic()
    for i in range(samples):
        name, cluster = healthy[i % len(healthy)]
        time.sleep(max(0.0, next_at - time.monotonic()))
        created[(name, spaces[name].name, f"l{i}")] = create(cluster, spaces[name], f"l{i}")
        next_at += 1.0 / rate
    eventually(120, lambda: all(log.first_end(k) for k in created),
               message=f"{label}: every Crate reconciled")
    values = [(log.first_end(k) or 0.0) - at for k, at in created.items()]
    print(f"{label}: {samples} Crates at {rate:g}/s on {len(healthy)} healthy clusters: "
          f"latency p50 {percentile(values, 50) * 1000:.0f} ms, "
          f"p99 {percentile(values, 99) * 1000:.0f} ms", flush=True)
    made += spaces.values()
    time.sleep(2.0)
    return values


def steady_load(members: list[tuple[str, TestCluster]], count: int, made: list[Namespace],
                stop: threading.Event) -> threading.Thread:
    """`count` Crates on each member, each changed every second until `stop`."""
    spaces = {name: cluster.namespace("fleet-bench") for name, cluster in members}
    made += spaces.values()
    for name, cluster in members:
        for i in range(count):
            create(cluster, spaces[name], f"t{i}")

    def loop() -> None:
        round_ = 0
        while not stop.wait(1.0):
            round_ += 1
            for name, cluster in members:
                for i in range(count):
                    cluster.api.request(
                        "PATCH", f"/apis/{Crate.api_version()}/namespaces/"
                        f"{spaces[name].name}/crates/t{i}", body={"spec": {"note": str(round_)}},
                        content_type="application/merge-patch+json")

    thread = threading.Thread(target=loop, name="steady-load", daemon=True)
    thread.start()
    return thread


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfigs", default="",
                        help="up to four member kubeconfigs, joined by ':' (the rest are "
                             "started as local planes in a temporary folder); the first "
                             "holds the Leases")
    parser.add_argument("--objects", type=int, default=200,
                        help="Crates per cluster in a speedup run (default 200)")
    parser.add_argument("--samples", type=int, default=200,
                        help="Crates per isolation phase (default 200)")
    parser.add_argument("--rate", type=float, default=20.0,
                        help="creates per second in the isolation phases (default 20)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="rounds of the speedup and isolation phases; medians are "
                             "printed (default 5)")
    parser.add_argument("--work", type=float, default=0.05,
                        help="seconds each reconcile waits (default 0.05)")
    parser.add_argument("--workers", type=int, default=4,
                        help="reconcile threads per cluster (default 4)")
    parser.add_argument("--lease", type=float, default=15.0,
                        help="the Leases' duration; renew deadline 2/3 and retry period "
                             "2/15 of it (default 15: client-go's 15, 10, 2)")
    args = parser.parse_args()
    given = [p for p in args.kubeconfigs.split(os.pathsep) if p][:4]
    folder = Path(tempfile.mkdtemp(prefix="fleet-bench-"))
    planes = [LocalCluster(folder / f"plane-{i}") for i in range(4 - len(given))]
    proxy: TcpProxy | None = None
    replicas: Replicas | None = None
    made: list[Namespace] = []
    try:
        kubeconfigs = given + [str(plane.up()) for plane in planes]
        clusters = [TestCluster(path) for path in kubeconfigs]
        for cluster in clusters:
            cluster.install_crd(Crate)
        hub_space = clusters[0].namespace("fleet-bench-operator")
        made.append(hub_space)
        server = next(line for line in Path(kubeconfigs[2]).read_text().splitlines()
                      if "server:" in line).rsplit(":", 1)
        proxy = TcpProxy("127.0.0.1", int(server[1]))
        members_dir = folder / "clusters"
        members_dir.mkdir()
        names = ["m0", "m1", "m2"]
        sources: list[str | Path] = [kubeconfigs[0], kubeconfigs[1],
                                     proxied(kubeconfigs[2], proxy, folder / "m2-proxied")]
        for name, source in zip(names, sources, strict=True):
            add_file(members_dir, name, source)
        log = Log(folder / "reconciles.log")
        lease = args.lease
        replicas = Replicas(folder, kubeconfigs[0], hub_space.name, members_dir, log.path, [
            "--work", str(args.work), "--workers", str(args.workers),
            "--lease-duration", str(lease), "--renew-deadline", str(lease * 2 / 3),
            "--retry-period", str(lease * 2 / 15)])
        pool = replicas
        for _ in range(3):
            pool.start()
        pool.settle(names, "three replicas, one cluster each")
        members = list(zip(names, clusters[:3], strict=True))
        speedups: list[float] = []
        ratios: list[float] = []
        healthy = members[:2]

        def three() -> float:
            while len(pool.running) < 3:
                pool.start()
            pool.settle(names, "three replicas, one cluster each")
            return speedup_run(members, log, args.objects, "3 replicas", made)

        def one() -> float:
            while len(pool.running) > 1:
                pool.stop(sorted(pool.running)[0])  # SIGTERM: drains, releases
            pool.settle(names, "one replica running all three")
            return speedup_run(members, log, args.objects, "1 replica", made)

        def m2_back() -> None:
            nonlocal proxy  # m2 back behind a new proxy: its file changes, so it rejoins
            proxy = TcpProxy("127.0.0.1", int(server[1]))
            staged = proxied(kubeconfigs[2], proxy, folder / ".m2.yaml")
            staged.rename(members_dir / "m2.yaml")
            time.sleep(2.0)
            pool.settle(names, "m2 back")

        for round_ in range(1, args.rounds + 1):
            # Odd rounds: 3 replicas, 1, then (on 1) all healthy, then m2 down. Even
            # rounds the other way round: m2 still down, back, then 1 replica, 3.
            print(f"-- round {round_} of {args.rounds}", flush=True)
            if round_ % 2:
                many = three()
                single = one()
                all_up = latencies(healthy, log, args.samples, args.rate, "all healthy",
                                   made)
                proxy.close()  # m2 unreachable from now on
                time.sleep(3.0)  # its member sees the resets and is retrying
                one_down = latencies(healthy, log, args.samples, args.rate,
                                     "m2 unreachable", made)
            else:
                one_down = latencies(healthy, log, args.samples, args.rate,
                                     "m2 unreachable", made)
                m2_back()
                all_up = latencies(healthy, log, args.samples, args.rate, "all healthy",
                                   made)
                single = one()
                many = three()
            speedups.append(single / many)
            ratios.append(percentile(one_down, 99) / percentile(all_up, 99))
            print(f"round {round_}: speedup {speedups[-1]:.2f}, isolation {ratios[-1]:.2f}",
                  flush=True)
        speedup, isolation = statistics.median(speedups), statistics.median(ratios)
        if args.rounds % 2:
            m2_back()
        three()  # the rounds may end on one replica
        late = clusters[3]
        space = late.namespace("fleet-bench")
        made.append(space)
        create(late, space, "first")
        added = add_file(members_dir, "m3", kubeconfigs[3])
        eventually(120, lambda: log.first_end(("m3", space.name, "first")), interval=0.05,
                   message="the joining cluster's Crate reconciled")
        join_s = (log.first_end(("m3", space.name, "first")) or 0.0) - added
        print(f"join: m3's Crate reconciled {join_s:.2f} s after its kubeconfig appeared",
              flush=True)
        placed = pool.settle([*names, "m3"], "four clusters over three replicas")
        stop = threading.Event()
        load = steady_load(members, 10, made, stop)
        try:
            time.sleep(3.0)
            victim = placed["m1"]
            pool.stop(victim, signal.SIGKILL)
            killed_at = time.monotonic()

            def taken() -> list[float]:
                log.read()
                return [start for start, who in log.first_start.get("m1", [])
                        if who != victim and start > killed_at]

            eventually(lease * 3 + 60, taken, interval=0.1,
                       message="m1 reconciled by another replica after the kill")
            takeover_s = min(taken()) - killed_at
            time.sleep(3.0)
        finally:
            stop.set()
            load.join(30)
        print(f"takeover: m1 reconciled by another replica {takeover_s:.1f} s after the "
              f"replica running it was SIGKILLed (Lease duration {lease:g} s)", flush=True)
        found = runs(log.path.read_text().splitlines(), {victim: killed_at})
        problems = overlaps(found)
        for problem in problems[:10]:
            print(f"overlap: {problem}", flush=True)
        count = sum(len(those) for those in found.values())
        print(f"reconciles logged: {count}; overlapping (cluster, object) pairs: "
              f"{len(problems)}", flush=True)
        print(f"fleet: clusters=3 replicas=3 objects={args.objects * 3} "
              f"speedup={speedup:.2f} isolation={isolation:.2f} join_s={join_s:.1f} "
              f"overlaps={len(problems)}", flush=True)
        return 0
    finally:
        if replicas is not None:
            replicas.stop_all()
        for made_space in made:
            try:
                made_space.delete()
            except Exception as err:  # noqa: BLE001 - the unreachable member's, say
                print(f"could not delete namespace {made_space.name}: {err}", file=sys.stderr)
        if proxy is not None:
            proxy.close()
        for plane in planes:
            plane.down()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
