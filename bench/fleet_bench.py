"""Fleets: one operator reconciling the same kind on several member clusters.

A `Fleet` (operator_kit.fleet) in this process runs one fleet controller on each member
cluster listed by a watched kubeconfig folder. Its reconcile waits ``--work`` seconds
(default 50 ms: a call to a database or a cloud API), then server-side applies a
ConfigMap owned by the object on the object's own cluster, on ``--workers`` threads per
member; it logs the start and end of every reconcile by (cluster, namespace, name).

1. **speedup** (``replicas`` replicas vs 1 on the same clusters). Sharding clusters over
   replicas is not implemented yet, so ``replicas`` is 1: both runs are one replica,
   ``--objects`` Parcels created at once on each of the first three clusters, timed from
   the first create to the last reconcile's end; speedup = the 1-replica time / the
   ``replicas``-replica time. With replicas=1 this is the same setup measured twice (its
   spread is the run-to-run noise), not a scale-out figure.
2. **isolation.** Parcels are created open-loop (``--rate`` per second, alternating over the
   two healthy members) and each one's latency measured from just before its create to the
   end of its first reconcile; p99 over ``--samples`` of them with all three members
   healthy, then again with the third member unreachable: its API server sits behind a
   TCP proxy (operator_kit.testing.faults) that is closed — every connection reset, every
   new one refused, as a stopped API server looks to its clients — and its member keeps
   retrying meanwhile. isolation = p99 with one down / p99 all healthy (goal ≤ 1.5).
   The next round measures it the other way round — the third member still down first,
   then back behind a new proxy (its kubeconfig file rewritten: it rejoins), healthy —
   and the speedup runs in the other order, so no phase always runs first. speedup and
   isolation are medians over ``--rounds`` (default 5).
3. **join_s.** A fourth cluster, with a Parcel already on it, joins by its kubeconfig file
   appearing in the folder (written aside, then renamed in); join_s is the time from the
   rename to the end of that Parcel's first reconcile (goal ≤ 10 s; the folder is polled
   every second).
4. **overlaps.** Every reconcile logged over the run is checked for two reconciles of one
   (cluster, object) that ran at the same time (goal 0). One replica: the per-member work
   queue is what guarantees it; no replica is killed (there is only one).

    python bench/fleet_bench.py [--kubeconfigs A:B:C:D] [--objects 60]

Clusters not given by ``--kubeconfigs`` (four are used) are local planes started in a
temporary folder and stopped at the end. The last line is ``fleet: clusters=3 replicas=1
objects=<n> speedup=<x.xx> isolation=<x.xx> join_s=<s> overlaps=<n>``, objects being the
Parcels of one speedup run (all three clusters).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from operator_kit import Action, Context, Controller, CustomResource  # noqa: E402
from operator_kit.fleet import Fleet, KubeconfigDirectory  # noqa: E402
from operator_kit.localcluster import LocalCluster  # noqa: E402
from operator_kit.testing import Namespace, TestCluster, eventually  # noqa: E402
from operator_kit.testing.faults import TcpProxy  # noqa: E402


@dataclass
class BenchParcelSpec:
    note: str = ""


class BenchParcel(CustomResource):
    group = "fleet-bench.operator-kit.test"
    version = "v1"
    kind = "BenchParcel"
    plural = "benchparcels"
    spec: BenchParcelSpec


Key = tuple[str, str, str]  # cluster, namespace, name


class Log:
    """Every reconcile's (cluster, namespace, name, start, end), and first ends by key."""

    def __init__(self) -> None:
        self.runs: list[tuple[Key, float, float]] = []
        self.first: dict[Key, float] = {}
        self.lock = threading.Lock()

    def add(self, key: Key, start: float, end: float) -> None:
        with self.lock:
            self.runs.append((key, start, end))
            self.first.setdefault(key, end)

    def first_end(self, key: Key) -> float | None:
        with self.lock:
            return self.first.get(key)


def make_controller(log: Log, work: float, workers: int) -> Controller[Any]:
    class ParcelSync(Controller[BenchParcel]):
        resource = BenchParcel
        owns = ["v1/ConfigMap"]
        fleet = True
        max_concurrent_reconciles = workers

        def reconcile(self, obj: BenchParcel, ctx: Context) -> Action | None:
            start = time.monotonic()
            time.sleep(work)
            ctx.apply_owned(obj, {"apiVersion": "v1", "kind": "ConfigMap",
                                  "metadata": {"name": f"parcel-{obj.name}"},
                                  "data": {"cluster": str(ctx.cluster)}})
            log.add((str(ctx.cluster), obj.namespace or "", obj.name), start,
                    time.monotonic())
            return None

    return ParcelSync()


def create(cluster: TestCluster, ns: Namespace, name: str) -> float:
    """Create a Parcel; the time just before the create."""
    at = time.monotonic()
    cluster.api.request("POST", f"/apis/{BenchParcel.api_version()}/namespaces/{ns.name}/"
                        "benchparcels", body={"apiVersion": BenchParcel.api_version(),
                                              "kind": "BenchParcel",
                                              "metadata": {"name": name}, "spec": {}})
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
    keys: list[Key] = []
    started = time.monotonic()
    for i in range(count):
        for name, cluster in members:
            create(cluster, spaces[name], f"s{i}")
            keys.append((name, spaces[name].name, f"s{i}"))
    eventually(600, lambda: all(log.first_end(k) for k in keys),
               message=f"{label}: every Parcel reconciled")
    took = max(log.first_end(k) or 0.0 for k in keys) - started
    print(f"{label}: {len(keys)} Parcels on {len(members)} clusters reconciled in "
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
               message=f"{label}: every Parcel reconciled")
    values = [(log.first_end(k) or 0.0) - at for k, at in created.items()]
    print(f"{label}: {samples} Parcels at {rate:g}/s on {len(healthy)} healthy clusters: "
          f"latency p50 {percentile(values, 50) * 1000:.0f} ms, "
          f"p99 {percentile(values, 99) * 1000:.0f} ms", flush=True)
    made += spaces.values()
    time.sleep(2.0)
    return values


def overlaps(log: Log) -> int:
    by_key: dict[Key, list[tuple[float, float]]] = defaultdict(list)
    with log.lock:
        for key, start, end in log.runs:
            by_key[key].append((start, end))
    found = 0
    for runs in by_key.values():
        runs.sort()
        latest_end = float("-inf")
        for start, end in runs:  # one starting before an earlier one of its key ended
            found += start < latest_end
            latest_end = max(latest_end, end)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfigs", default="",
                        help="up to four member kubeconfigs, joined by ':' (the rest are "
                             "started as local planes in a temporary folder)")
    parser.add_argument("--objects", type=int, default=60,
                        help="Parcels per cluster in a speedup run (default 60)")
    parser.add_argument("--samples", type=int, default=200,
                        help="Parcels per isolation phase (default 200)")
    parser.add_argument("--rate", type=float, default=20.0,
                        help="creates per second in the isolation phases (default 20)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="rounds of the speedup and isolation phases; medians are "
                             "printed (default 5)")
    parser.add_argument("--work", type=float, default=0.05,
                        help="seconds each reconcile waits (default 0.05)")
    parser.add_argument("--workers", type=int, default=4,
                        help="reconcile threads per cluster (default 4)")
    args = parser.parse_args()
    given = [p for p in args.kubeconfigs.split(os.pathsep) if p][:4]
    folder = Path(tempfile.mkdtemp(prefix="fleet-bench-"))
    planes = [LocalCluster(folder / f"plane-{i}") for i in range(4 - len(given))]
    proxy: TcpProxy | None = None
    fleet: Fleet | None = None
    made: list[Namespace] = []
    try:
        kubeconfigs = given + [str(plane.up()) for plane in planes]
        clusters = [TestCluster(path) for path in kubeconfigs]
        for cluster in clusters:
            cluster.install_crd(BenchParcel)
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
        log = Log()
        fleet = Fleet("fleet-bench", [make_controller(log, args.work, args.workers)],
                      KubeconfigDirectory(members_dir), shutdown_timeout=10.0)
        fleet.start()
        running = fleet
        eventually(60, lambda: len(running.members()) == 3
                   and all(m.synced() for m in running.members().values()),
                   message="three members synced")
        members = list(zip(names, clusters[:3], strict=True))
        replicas = 1  # sharding clusters over replicas: not implemented
        print(f"replicas={replicas}: clusters are not spread over replicas yet, so both "
              "speedup runs are one replica (the figure is run-to-run noise, not scale-out)",
              flush=True)
        speedups: list[float] = []
        ratios: list[float] = []
        healthy = members[:2]
        m2_up = True
        for round_ in range(1, args.rounds + 1):
            # The order alternates (m2 up at the start of odd rounds, down at even ones),
            # so what runs first in a round is not always the same phase.
            print(f"-- round {round_} of {args.rounds}", flush=True)
            if m2_up:
                many = speedup_run(members, log, args.objects, f"{replicas} replica(s)",
                                   made)
                one = speedup_run(members, log, args.objects, "1 replica", made)
                all_up = latencies(healthy, log, args.samples, args.rate, "all healthy",
                                   made)
                proxy.close()  # m2 unreachable from now on
                time.sleep(3.0)  # its member sees the resets and is retrying
                one_down = latencies(healthy, log, args.samples, args.rate,
                                     "m2 unreachable", made)
            else:
                one_down = latencies(healthy, log, args.samples, args.rate,
                                     "m2 unreachable", made)
                # m2 back behind a new proxy: its kubeconfig file changes, so it rejoins.
                proxy = TcpProxy("127.0.0.1", int(server[1]))
                staged = proxied(kubeconfigs[2], proxy, folder / ".m2.yaml")
                staged.rename(members_dir / "m2.yaml")
                eventually(60, lambda: "m2" in running.members()
                           and running.members()["m2"].synced(), message="m2 back")
                all_up = latencies(healthy, log, args.samples, args.rate, "all healthy",
                                   made)
                one = speedup_run(members, log, args.objects, "1 replica", made)
                many = speedup_run(members, log, args.objects, f"{replicas} replica(s)",
                                   made)
            m2_up = not m2_up
            speedups.append(one / many)
            ratios.append(percentile(one_down, 99) / percentile(all_up, 99))
            print(f"round {round_}: speedup {speedups[-1]:.2f}, isolation {ratios[-1]:.2f}",
                  flush=True)
        speedup, isolation = statistics.median(speedups), statistics.median(ratios)
        late = clusters[3]
        space = late.namespace("fleet-bench")
        made.append(space)
        create(late, space, "first")
        added = add_file(members_dir, "m3", kubeconfigs[3])
        eventually(60, lambda: log.first_end(("m3", space.name, "first")),
                   message="the joining cluster's Parcel reconciled")
        join_s = (log.first_end(("m3", space.name, "first")) or 0.0) - added
        print(f"join: m3's Parcel reconciled {join_s:.2f} s after its kubeconfig appeared",
              flush=True)
        found = overlaps(log)
        print(f"reconciles logged: {len(log.runs)}; overlapping (cluster, object) pairs: "
              f"{found}", flush=True)
        print(f"fleet: clusters=3 replicas={replicas} objects={args.objects * 3} "
              f"speedup={speedup:.2f} isolation={isolation:.2f} join_s={join_s:.1f} "
              f"overlaps={found}", flush=True)
        return 0
    finally:
        if fleet is not None:
            fleet.stop()
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
