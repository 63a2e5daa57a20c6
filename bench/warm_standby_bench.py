"""Failover with N objects: from the new leader's Lease acquisition to its first reconcile,
cold vs warm standby.

Usage::

    python bench/warm_standby_bench.py --kubeconfig K                  # N = 3000, 3 rounds
    python bench/warm_standby_bench.py --kubeconfig K --counts 1000 20000 --rounds 2
    python bench/warm_standby_bench.py                                 # on a plane of its own

Method
------
Unless ``--kubeconfig`` is given, the script starts its own local control plane in a
temporary folder. For each N in ``--counts`` it creates N Widgets (the tests' custom
resource) in a fresh namespace. Then, per round, each contender in turn (the order
alternates from round to round) fails over: a replica (``tests/cluster/replica.py``, in a
process of its own, reconciling by printing a line: ``--noop``) takes the Lease and
reconciles the N Widgets; a second replica starts and follows; once it has settled (a
warm one: its caches listed; ``--settle`` seconds more either way) the leader is
SIGKILLed. The second replica takes the Lease once it expires (lease 4 s, renew deadline
3 s, retry 0.5 s). Its output is read line by line as it comes: the figures are the time
from its ``acquired lease`` line to its first ``reconciled`` line, and to its Nth.

The contenders differ only in ``LeaderElection.warm_standby``:

``cold``
    ``warm_standby=False`` (``--cold``): the new leader lists the Widgets (and the
    ConfigMaps it owns) only after it acquired the Lease, then reconciles.
``warm``
    the default: it listed them while following and keeps them synced, so on acquiring
    the Lease it adds its handlers, which queue every cached key, and its workers start.

Figures: per run, both times; per N, the medians of the rounds for each contender and
the ratio cold / warm. The last line per N: ``warm-standby: objects=<N> cold_s=<s>
warm_s=<s> ratio=<x>``. Everything shares one machine (the API server, etcd, both
replicas, this process), so absolute times move with its load; compare the contenders
within one run.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from operator_kit.localcluster import LocalCluster  # noqa: E402
from operator_kit.testing import Namespace, TestCluster, eventually  # noqa: E402
from tests.cluster.conftest import Widget, WidgetSpec  # noqa: E402

LEASE, DEADLINE, RETRY = 4.0, 3.0, 0.5


class Replica:
    """A replica process whose lines are timestamped (monotonic) as they arrive."""

    def __init__(self, ns: Namespace, kubeconfig: str, identity: str, cold: bool) -> None:
        self.lines: list[tuple[float, str]] = []
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.cluster.replica", ns.name, kubeconfig, identity,
             "--lease-duration", str(LEASE), "--renew-deadline", str(DEADLINE),
             "--retry-period", str(RETRY), "--noop", "--log-lists",
             *(["--cold"] if cold else [])],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert self.process.stdout is not None
        self.reader = threading.Thread(target=self._read, args=(self.process.stdout,),
                                       name=f"read-{identity}", daemon=True)
        self.reader.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.append((time.monotonic(), line))

    def first(self, text: str, since: float = 0.0) -> float | None:
        """When the first line holding `text` (at or after `since`) arrived."""
        return next((at for at, line in list(self.lines) if at >= since and text in line),
                    None)

    def reconciled(self, since: float = 0.0) -> list[float]:
        return [at for at, line in list(self.lines)
                if at >= since and line.startswith("reconciled ")]

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)
        self.reader.join(5)


def holder(ns: Namespace) -> str | None:
    lease = ns.get("coordination.k8s.io/v1", "Lease", "replica-test")
    return lease["spec"].get("holderIdentity") if lease else None


def create_widgets(ns: Namespace, count: int) -> None:
    path = f"/apis/{Widget.api_version()}/namespaces/{ns.name}/widgets"

    def create(i: int) -> None:
        body = Widget(f"w{i:05d}", WidgetSpec(size=i), namespace=ns.name).to_dict()
        ns.api.request("POST", path, body=body)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, range(count)))


def one_run(ns: Namespace, kubeconfig: str, count: int, cold: bool,
            settle: float) -> tuple[float, float]:
    """(acquisition → first reconcile, acquisition → Nth reconcile), in seconds."""
    started: list[Replica] = []
    try:
        first = Replica(ns, kubeconfig, "first", cold)
        started.append(first)
        eventually(60, lambda: holder(ns) == "first")
        eventually(30 + count / 50, lambda: len(first.reconciled()) >= count,
                   message=f"the first leader reconciled the {count} Widgets")
        second = Replica(ns, kubeconfig, "second", cold)
        started.append(second)
        eventually(30, lambda: second.first("waiting to lead") is not None)
        if not cold:  # its caches listed while following
            eventually(60 + count / 100, lambda: second.first("widgets") is not None)
        time.sleep(settle)
        first.process.send_signal(signal.SIGKILL)
        eventually(LEASE * 4 + 30, lambda: second.first("acquired lease") is not None)
        acquired = second.first("acquired lease")
        assert acquired is not None
        eventually(60 + count / 50, lambda: len(second.reconciled(acquired)) >= count,
                   interval=0.05, message=f"the new leader reconciled the {count} Widgets")
        done = second.reconciled(acquired)
        return done[0] - acquired, done[count - 1] - acquired
    finally:
        for replica in started:
            replica.kill()
        lease = ns.get("coordination.k8s.io/v1", "Lease", "replica-test")
        if lease:  # the next run's first replica takes it at once
            ns.api.request("DELETE", f"/apis/coordination.k8s.io/v1/namespaces/{ns.name}"
                           "/leases/replica-test")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[3000])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--settle", type=float, default=3.0,
                        help="seconds between the follower settling and the SIGKILL")
    parser.add_argument("--kubeconfig")
    args = parser.parse_args()
    plane: LocalCluster | None = None
    kubeconfig = args.kubeconfig
    if kubeconfig is None:
        plane = LocalCluster(Path(tempfile.mkdtemp()) / "plane")
        kubeconfig = str(plane.up())
    summary: list[str] = []
    try:
        cluster = TestCluster(kubeconfig)
        cluster.install_crd(Widget)
        for count in args.counts:
            ns = cluster.namespace("warm-bench")
            try:
                began = time.monotonic()
                create_widgets(ns, count)
                print(f"N={count}: created in {time.monotonic() - began:.1f}s", flush=True)
                first: dict[str, list[float]] = {"cold": [], "warm": []}
                last: dict[str, list[float]] = {"cold": [], "warm": []}
                for round_ in range(args.rounds):
                    order = ("cold", "warm") if round_ % 2 == 0 else ("warm", "cold")
                    for name in order:
                        to_first, to_last = one_run(ns, kubeconfig, count, name == "cold",
                                                    args.settle)
                        first[name].append(to_first)
                        last[name].append(to_last)
                        print(f"  round {round_ + 1} {name}: acquisition -> first reconcile "
                              f"{to_first:.3f}s, -> all {count} {to_last:.2f}s", flush=True)
                cold_s, warm_s = (statistics.median(first[n]) for n in ("cold", "warm"))
                cold_all, warm_all = (statistics.median(last[n]) for n in ("cold", "warm"))
                summary.append(
                    f"N={count}, {args.rounds} rounds (medians): first reconcile cold "
                    f"{cold_s:.3f}s warm {warm_s:.3f}s ({cold_s / warm_s:.1f}x); all "
                    f"{count} cold {cold_all:.2f}s warm {warm_all:.2f}s "
                    f"({cold_all / warm_all:.2f}x)")
                summary.append(f"warm-standby: objects={count} cold_s={cold_s:.3f} "
                               f"warm_s={warm_s:.3f} ratio={cold_s / warm_s:.1f}")
            finally:
                ns.delete()
        print("\n" + "\n".join(summary))
    finally:
        if plane is not None:
            plane.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
