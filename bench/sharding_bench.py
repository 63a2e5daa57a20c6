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

Member Leases use client-go's timings (15 s, 10 s, 2 s) unless ``--lease`` says
otherwise. Goals: speedup ≥ 2.5, overlaps 0, moved_on_join ≤ 35, takeover_s ≤ lease + 5.

    python bench/sharding_bench.py [--objects 900] [--kubeconfig PATH]

Without --kubeconfig a local control plane is started in a temporary folder. The last
line is ``sharding: members=3 speedup=<x.xx> overlaps=<n> moved_on_join=<p>%
takeover_s=<s>``.
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

from operator_kit.localcluster import LocalCluster  # noqa: E402
from operator_kit.testing import Namespace, TestCluster, eventually  # noqa: E402
from tests.cluster.conftest import Widget  # noqa: E402
from tests.cluster.test_sharding import (  # noqa: E402
    Member,
    assignments,
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
    time.sleep(1.0)  # the sharder has seen every member Lease
    create_widgets(ns, count)
    took = reconcile_time(log, ns, count)
    print(f"{len(names)} member(s): {count} objects reconciled in {took:.1f}s "
          f"({count / took:.0f}/s)", flush=True)
    return ns, took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=900)
    parser.add_argument("--work", type=float, default=0.05)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--lease", type=float, nargs=3, default=[15.0, 10.0, 2.0],
                        metavar=("DURATION", "DEADLINE", "RETRY"))
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
        kubeconfig = str(plane.up())
    members: list[Member] = []
    log = Path(tempfile.mkdtemp()) / "reconciles.log"
    log.touch()
    try:
        cluster = TestCluster(kubeconfig)
        cluster.install_crd(Widget)
        count = args.objects
        single_ns, single = backlog(cluster, log, ["solo"], count, options, members)
        for member in members:
            member.stop()
        single_ns.delete()
        names = ["m-0", "m-1", "m-2"]
        ns, three = backlog(cluster, log, names, count, options, members)
        speedup = single / three

        before = eventually(120, lambda: settled(ns, names), interval=1.0)
        members.append(start(ns, kubeconfig, "m-3", log, options))
        after = eventually(300, lambda: settled(ns, [*names, "m-3"]), interval=1.0)
        moved = 100 * sum(1 for k in after if after[k] != before[k]) / count
        print(f"a 4th member joined: {moved:.1f}% of the objects moved", flush=True)

        victim = next(m for m in members if m.identity == "m-1")
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
            now = assignments(ns)
            print(f"gave up: {len(left)} of the killed member's {len(orphans)} objects were "
                  f"not reconciled by another member; (label, draining) of the first: "
                  + ", ".join(f"{k} {now.get(k)}" for k in left[:10]), flush=True)
            raise
        takeover = max(taken.values()) - killed
        print(f"SIGKILL of a member: its {len(orphans)} objects reconciled by the others "
              f"after {takeover:.1f}s (lease {lease:g}s)", flush=True)
        found = overlaps(runs(log, {victim.identity: killed}))
        print(f"overlap checker: {len(runs(log))} reconciles checked", flush=True)
        print(f"goals: speedup >= 2.5, overlaps 0, moved_on_join <= 35, "
              f"takeover_s <= {lease + 5:g}")
        print(f"sharding: members=3 speedup={speedup:.2f} overlaps={len(found)} "
              f"moved_on_join={moved:.1f}% takeover_s={takeover:.1f}")
        return 0
    finally:
        for member in members:
            member.stop()
        if plane is not None:
            plane.down()


if __name__ == "__main__":
    sys.exit(main())
