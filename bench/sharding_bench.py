"""Sharding: 1 member vs 3 on an I/O-bound reconcile, a 4th joining, a member SIGKILLed.

Member processes (tests/cluster/shard_member.py) reconcile Widgets with a reconcile that
waits ``--work`` seconds (default 50 ms: a call to a database or a cloud API) on
``--workers`` threads each, and log the start and end of every reconcile to one file.

1. **Speedup.** In a fresh namespace, 1 member, then (in another) 3 members, each joined
   before N Widgets are created at once. The figure for each is the time from the first
   reconcile's start to the last one's end; speedup = 1-member time / 3-member time.
2. **moved_on_join.** A 4th member joins the 3: the share of objects whose assignment
   label changed once every object sits at its ring target again.
3. **takeover_s.** A member that is not the leader is SIGKILLed: the time until every
   object it held has been reconciled by another member — its Lease expiring, the
   reassignment, and the survivors working through the backlog of its objects.
4. **overlaps.** The log of the whole run (both namespaces) is checked for two
   reconciles of one key that ran at the same time (the killed member's last reconcile,
   if any, ends at the kill).

5. **writes_per_object.** The writes the sharding itself caused: PATCH and UPDATE
   requests on the Widgets themselves (not their status) that kube-apiserver counted
   (``apiserver_request_total``) from the 3 members' start to the end of the run, over
   the objects. The members' reconciles write nothing, so these are the sharder's
   label patches and the members' let-go patches.
6. **cache_share.** The mean, over the 3 members once every object was reconciled, of
   the objects in a member's primary cache over all the objects (1/3 is the ideal).

Both modes run, one after the other, on one API server with ``ShardedListAndWatch`` on
(``--mode`` picks one): ``labels`` (``Sharding(mode="labels")``: the leader's sharder
labels each object) and ``server`` (the API server filters each member's hash ranges;
moved_on_join is then the share of objects whose last reconciler changed after the join).

Member Leases use client-go's timings (15 s, 10 s, 2 s) unless ``--lease`` says
otherwise. Goals: speedup ≥ 2.5, overlaps 0, moved_on_join ≤ 35 (labels), takeover_s ≤
lease + 5 (labels; server mode: ≤ 30); server mode: writes_per_object 0, cache_share ≈
1/3.

    python bench/sharding_bench.py [--objects 900] [--mode both|labels|server]
        [--kubeconfig PATH]

Without --kubeconfig a local control plane with the gate is started in a temporary
folder (with --kubeconfig, server mode needs that cluster's gate on). One line per mode,
the last lines: ``sharding: mode=<labels|server> members=3 speedup=<x.xx> overlaps=<n>
moved_on_join=<p>% takeover_s=<s> writes_per_object=<x> cache_share=<x.xx>``.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from operator_kit.election.shard_ranges import SLOTS  # noqa: E402
from operator_kit.localcluster import LocalCluster  # noqa: E402
from operator_kit.localcluster.gates import apiserver_args  # noqa: E402
from operator_kit.testing import Namespace, TestCluster, eventually  # noqa: E402
from tests.cluster.conftest import Widget  # noqa: E402
from tests.cluster.test_sharding import (  # noqa: E402
    Member,
    create_widgets,
    lease_holder,
    overlaps,
    runs,
    settled,
)


def start(ns: Namespace, kubeconfig: str, identity: str, log: Path,
          options: list[str]) -> Member:
    return Member(ns, kubeconfig, identity, log, *options)


def joined(ns: Namespace, count: int) -> bool:
    leases = ns.list("coordination.k8s.io/v1", "Lease")
    return sum(1 for lease in leases if "-member-" in lease["metadata"]["name"]) == count


def reconcile_time(log: Path, ns: Namespace, count: int) -> float:
    """First start to last end of the reconciles of `ns`'s objects, once all are done."""
    prefix = ns.name + "/"
    eventually(600, lambda: len({r.key for r in runs(log) if r.key.startswith(prefix)})
               == count, interval=0.5)
    time.sleep(1.0)
    mine = [r for r in runs(log) if r.key.startswith(prefix)]
    return max(r.end for r in mine) - min(r.start for r in mine)


def backlog(cluster: TestCluster, log: Path, names: list[str], count: int,
            options: list[str], members: list[Member]) -> tuple[Namespace, float]:
    ns = cluster.namespace(f"shard-bench-{len(names)}")
    members.append(start(ns, cluster.kubeconfig, names[0], log, options))
    eventually(60, lambda: lease_holder(ns) == names[0])
    members += [start(ns, cluster.kubeconfig, n, log, options) for n in names[1:]]
    eventually(60, lambda: joined(ns, len(names)))
    if "server" in options:  # every slot served before the objects come
        eventually(60, lambda: sum(served(m) for m in members[-len(names):]) == SLOTS,
                   interval=0.5)
    time.sleep(1.0)  # the sharder has seen every member Lease
    create_widgets(ns, count)
    took = reconcile_time(log, ns, count)
    print(f"{len(names)} member(s): {count} objects reconciled in {took:.1f}s "
          f"({count / took:.0f}/s)", flush=True)
    return ns, took


def served(member: Member) -> int:
    """The slots a server-mode member last said it serves."""
    for line in reversed(member.lines):
        if line.startswith("cache ") and " slots " in line:
            return int(line.split()[-1])
    return 0


def cached(member: Member) -> int:
    """Objects in the member's primary cache as it last said: its own only (labels: those
    labelled with it; server: what the API server sent)."""
    for line in reversed(member.lines):
        if line.startswith("cache "):
            parts = line.split()
            return int(parts[1]) - int(parts[2])
    return 0


def sharding_writes(cluster: TestCluster) -> int:
    """PATCH and UPDATE requests on Widgets (not their status) kube-apiserver counted."""
    text = cluster.api.request("GET", "/metrics", accept="text/plain", decode=False,
                               stream=True).data.decode()
    total = 0
    for line in text.splitlines():
        if line.startswith("apiserver_request_total{") and 'resource="widgets"' in line \
                and 'subresource=""' in line and ('verb="PATCH"' in line
                                                  or 'verb="UPDATE"' in line):
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


def last_reconciler(log: Path, prefix: str) -> dict[str, str]:
    found: dict[str, tuple[float, str]] = {}
    for run in runs(log):
        if run.key.startswith(prefix) and run.end != float("inf"):
            if run.key not in found or run.start > found[run.key][0]:
                found[run.key] = (run.start, run.member)
    return {k: m for k, (_, m) in found.items()}


def quiet(log: Path, seconds: float) -> bool:
    """No reconcile started or ended in the last `seconds`."""
    return time.time() - max((max(r.start, r.end if r.end != float("inf") else 0)
                              for r in runs(log)), default=0) > seconds


def run_mode(mode: str, cluster: TestCluster, args: argparse.Namespace,
             options: list[str], members: list[Member]) -> str:
    """One mode's run; its result line."""
    lease = args.lease[0]
    options = [*options, "--mode", mode]
    log = Path(tempfile.mkdtemp()) / f"reconciles-{mode}.log"
    log.touch()
    count = args.objects
    single_ns, single = backlog(cluster, log, [f"{mode[0]}-solo"], count, options, members)
    for member in members:
        member.stop()
    members.clear()
    single_ns.delete()
    names = [f"{mode[0]}-{i}" for i in range(3)]
    writes_before = sharding_writes(cluster)
    ns, three = backlog(cluster, log, names, count, options, members)
    speedup = single / three
    prefix = ns.name + "/"
    if mode == "labels":
        before = eventually(120, lambda: settled(ns, names), interval=1.0)
    else:
        eventually(60, lambda: quiet(log, 2.0), interval=0.5)
        before = last_reconciler(log, prefix)
    share = sum(cached(m) for m in members) / len(members) / count
    members.append(start(ns, cluster.kubeconfig, f"{mode[0]}-3", log, options))
    if mode == "labels":
        after = eventually(300, lambda: settled(ns, [*names, f"{mode[0]}-3"]), interval=1.0)
    else:  # every slot served by the 4, and the moved objects reconciled by their new owner
        eventually(120, lambda: served(members[-1]) and sum(served(m) for m in members)
                   == SLOTS, interval=0.5)
        eventually(120, lambda: quiet(log, 3.0), interval=0.5)
        after = last_reconciler(log, prefix)
    moved = 100 * sum(1 for k in after if after[k] != before.get(k)) / count
    print(f"{mode}: a 4th member joined: {moved:.1f}% of the objects moved", flush=True)

    victim = next(m for m in members if m.identity == names[1])
    orphans = {k for k, m in after.items() if m == victim.identity}
    victim.process.send_signal(signal.SIGKILL)
    killed = time.time()
    taken: dict[str, float] = {}

    def all_taken() -> bool:
        for run in runs(log, {victim.identity: killed}):
            # A run still going has no end yet (runs() gives it inf): not taken yet.
            if (run.key in orphans and run.member != victim.identity
                    and run.start > killed and run.end != float("inf")):
                taken[run.key] = min(taken.get(run.key, run.end), run.end)
        return len(taken) == len(orphans)

    try:
        eventually(lease * 4 + 60, all_taken, interval=0.2)
    except AssertionError:
        left = sorted(orphans - set(taken))
        print(f"gave up: {len(left)} of the killed member's {len(orphans)} objects were "
              f"not reconciled by another member, e.g. {left[:10]}", flush=True)
        raise
    takeover = max(taken.values(), default=killed) - killed
    print(f"{mode}: SIGKILL of a member: its {len(orphans)} objects reconciled by the "
          f"others after {takeover:.1f}s (lease {lease:g}s)", flush=True)
    writes = (sharding_writes(cluster) - writes_before) / count
    found = overlaps(runs(log, {victim.identity: killed}))
    print(f"{mode}: overlap checker: {len(runs(log))} reconciles checked", flush=True)
    for member in members:
        member.stop()
    members.clear()
    ns.delete()
    return (f"sharding: mode={mode} members=3 speedup={speedup:.2f} overlaps={len(found)} "
            f"moved_on_join={moved:.1f}% takeover_s={takeover:.1f} "
            f"writes_per_object={writes:.2f} cache_share={share:.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=900)
    parser.add_argument("--work", type=float, default=0.05)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--lease", type=float, nargs=3, default=[15.0, 10.0, 2.0],
                        metavar=("DURATION", "DEADLINE", "RETRY"))
    parser.add_argument("--mode", choices=["both", "labels", "server"], default="both")
    parser.add_argument("--kubeconfig")
    args = parser.parse_args()
    lease, deadline, retry = args.lease
    options = ["--work", str(args.work), "--workers", str(args.workers),
               "--lease-duration", str(lease), "--renew-deadline", str(deadline),
               "--retry-period", str(retry)]
    plane: LocalCluster | None = None
    kubeconfig = args.kubeconfig
    if kubeconfig is None:
        plane = LocalCluster(Path(tempfile.mkdtemp()) / "plane")
        kubeconfig = str(plane.up(apiserver_args=apiserver_args({"ShardedListAndWatch": True})))
    members: list[Member] = []
    try:
        cluster = TestCluster(kubeconfig)
        cluster.install_crd(Widget)
        modes = ["labels", "server"] if args.mode == "both" else [args.mode]
        lines = [run_mode(mode, cluster, args, options, members) for mode in modes]
        print(f"goals: speedup >= 2.5, overlaps 0, moved_on_join <= 35, takeover_s <= "
              f"{lease + 5:g} (server: <= 30), server: writes_per_object 0, cache_share "
              "about 0.33")
        for line in lines:
            print(line, flush=True)
        return 0
    finally:
        for member in members:
            member.stop()
        if plane is not None:
            plane.down()


if __name__ == "__main__":
    sys.exit(main())
