"""Restart benchmark: how long a new object waits after a restart, FIFO vs priority queue.

Usage::

    python bench/restart_bench.py --kubeconfig K                 # N = 3000 and 20000
    python bench/restart_bench.py --kubeconfig K --counts 3000 --rounds 3
    python bench/restart_bench.py                                # on a plane of its own

Method
------
Unless ``--kubeconfig`` is given, the script starts its own local control plane in a
temporary folder and stops it at the end. It installs a small custom resource,
``RestartItem`` (group ``bench.operator-kit.test``), and for each N in ``--counts``
creates N of them in a fresh namespace (``--create-threads`` threads POSTing at once).
Then, for each round, each contender in turn (the order alternates from round to round)
*restarts*: an `Operator` with one controller over that namespace starts in this process,
lists the N objects (its initial list queues all N) and reconciles them with
``--workers`` workers, each reconcile a ``--reconcile-ms`` sleep (a reconcile's calls
to the API server, without the load of making them). Once it has reconciled
``--warm`` objects, the script creates ``--probes`` new objects, one every
``--probe-interval`` seconds, and measures for each the time from just before its POST
to the start of its reconcile, and how many backlog objects were reconciled in between.
When every probe has been reconciled the operator stops (the backlog is not waited
for), the probes are deleted, and the next contender restarts on the same N objects.

The contenders differ only in the order of the work queue:

``priority``
    operator_kit as it is: what the initial list brought is queued at low priority,
    a live watch event (the probe's creation) at normal priority.
``fifo``
    the same controller with ``Controller.priority`` returning one priority for every
    event: the queue is then first in, first out -- the order it had before the
    priority queue.

Figures: per run, the probes' median wait and the backlog reconciled ahead of them; per
N, the median over all probes of all rounds for each contender and the ratio
fifo / priority. The last line per N: ``restart: objects=<N> fifo_s=<s> priority_s=<s>
ratio=<x>``. Everything shares one machine (the API server, etcd, this process), so the
absolute times move with its load; compare the contenders within one run.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's operator_kit, not an installed one

GROUP = "bench.operator-kit.test"
VERSION = "v1"
KIND = "RestartItem"
PLURAL = "restartitems"
CONTENDERS = ("fifo", "priority")


def restart_kind() -> type[Any]:
    """The RestartItem kind as an operator_kit CustomResource."""
    from dataclasses import dataclass as plain_dataclass

    from operator_kit import CustomResource

    @plain_dataclass
    class RestartSpec:
        index: int = 0

    class RestartItem(CustomResource):
        group = GROUP
        version = VERSION
        kind = KIND
        plural = PLURAL
        spec: RestartSpec

    return RestartItem


@dataclass
class Run:
    """One contender's restart: each probe's wait, and the backlog reconciled ahead of it."""

    count: int
    contender: str
    round: int
    sync_s: float
    waits: list[float] = field(default_factory=list)
    ahead: list[int] = field(default_factory=list)


class Reconciles:
    """The order of reconciles and when each began, thread-safely."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.order: list[tuple[str, float]] = []
        self.probes: dict[str, tuple[float, int]] = {}  # name -> (began, position)

    def record(self, name: str) -> None:
        now = time.monotonic()
        with self._lock:
            if name.startswith("probe-") and name not in self.probes:
                self.probes[name] = (now, len(self.order))
            self.order.append((name, now))

    def count(self) -> int:
        with self._lock:
            return len(self.order)

    def backlog_between(self, start: int, end: int) -> int:
        """Reconciles of backlog objects (not probes) from position `start` to `end`."""
        with self._lock:
            return sum(1 for name, _ in self.order[start:end] if not name.startswith("probe-"))

    def probe(self, name: str) -> tuple[float, int] | None:
        with self._lock:
            return self.probes.get(name)


def make_controller(kind: type[Any], namespace: str, contender: str, workers: int,
                    seconds: float, seen: Reconciles) -> Any:
    from operator_kit import Action, Context, Controller
    from operator_kit.runtime.changes import WatchEvent
    from operator_kit.runtime.queueing import NORMAL_PRIORITY

    class Restarted(Controller[Any]):
        resource = kind
        max_concurrent_reconciles = workers
        name = f"restart-{contender}"

        def reconcile(self, obj: Any, ctx: Context) -> Action:
            seen.record(obj.name)
            time.sleep(seconds)
            return Action.await_change()

    class RestartedFifo(Restarted):
        def priority(self, event: WatchEvent) -> int:
            return NORMAL_PRIORITY  # one priority: first in, first out

    controller = (RestartedFifo if contender == "fifo" else Restarted)()
    controller.namespace = namespace
    return controller


def create_items(api: Any, namespace: str, names: Sequence[str], threads: int) -> float:
    """POST a RestartItem per name from `threads` threads; the seconds it took."""
    from kubernetes.client.exceptions import ApiException

    path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"

    def create(name: str) -> None:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND,
                "metadata": {"name": name}, "spec": {"index": 0}}
        for attempt in range(6):
            try:
                api.request("POST", path, body=body)
                return
            except ApiException as err:
                if err.status == 409:
                    return  # created by an attempt whose answer was lost
                if err.status not in (429, 500, 503, 504) or attempt == 5:
                    raise
                time.sleep(0.2 * 2 ** attempt)

    started = time.monotonic()
    with ThreadPoolExecutor(threads, thread_name_prefix="create") as pool:
        list(pool.map(create, names))
    return time.monotonic() - started


def restart(cluster: Any, kind: type[Any], namespace: str, count: int, contender: str,
            round_: int, options: argparse.Namespace) -> Run:
    """One restart of one contender over `count` existing objects."""
    from operator_kit import Operator

    seen = Reconciles()
    controller = make_controller(kind, namespace, contender, options.workers,
                                 options.reconcile_ms / 1000, seen)
    operator = Operator(f"restart-bench-{contender}", [controller])
    operator.use(cluster.client)
    probes: list[tuple[str, float, int]] = []  # (name, when its POST began, position)
    started = time.monotonic()
    operator.start()
    try:
        if not operator.wait_synced(600):
            raise SystemExit(f"{contender}: the cache did not sync within 600 s")
        run = Run(count, contender, round_, time.monotonic() - started)
        deadline = time.monotonic() + 300
        while seen.count() < options.warm:
            if time.monotonic() > deadline:
                raise SystemExit(f"{contender}: fewer than {options.warm} reconciles in 300 s")
            time.sleep(0.01)
        for i in range(options.probes):
            name = f"probe-{contender}-{round_}-{i}"
            sent, position = time.monotonic(), seen.count()
            create_items(cluster.api, namespace, [name], 1)
            probes.append((name, sent, position))
            time.sleep(options.probe_interval)
        # FIFO: the probes wait for the whole backlog, N x reconcile / workers, or more.
        deadline = time.monotonic() + 120 + 3 * count * options.reconcile_ms / 1000
        for name, sent, position in probes:
            while (got := seen.probe(name)) is None:
                if time.monotonic() > deadline:
                    raise SystemExit(f"{contender}: probe {name} was never reconciled")
                time.sleep(0.01)
            began, at = got
            run.waits.append(began - sent)
            run.ahead.append(seen.backlog_between(position, at))
        return run
    finally:
        operator.stop(10)
        for name, _, _ in probes:
            with contextlib.suppress(Exception):
                cluster.api.request(
                    "DELETE", f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}")


@contextlib.contextmanager
def plane(kubeconfig: str | None) -> Iterator[str]:
    """The given kubeconfig, or a local control plane of our own for the duration."""
    if kubeconfig:
        yield kubeconfig
        return
    import tempfile

    from operator_kit.localcluster import LocalCluster

    with tempfile.TemporaryDirectory(prefix="restart-bench-") as tmp:
        local = LocalCluster(Path(tmp) / "plane")
        try:
            yield str(local.up())
        finally:
            local.down()


def bench(options: argparse.Namespace) -> int:
    import logging

    import operator_kit
    from operator_kit.testing import TestCluster

    print(f"# operator_kit from {Path(operator_kit.__file__).parent}", flush=True)

    logging.basicConfig(level=logging.WARNING, format="%(threadName)s %(name)s: %(message)s")
    runs: list[Run] = []
    with plane(options.kubeconfig) as kubeconfig:
        cluster = TestCluster(kubeconfig)
        kind = restart_kind()
        cluster.install_crd(kind)
        print(f"{'N':>6} {'contender':>9} {'round':>5} {'sync s':>7} {'wait s (median)':>16} "
              f"{'backlog ahead (median)':>23}", flush=True)
        for count in options.counts:
            ns = cluster.namespace("restart-bench")
            try:
                took = create_items(cluster.api, ns.name, [f"item-{i:05d}" for i in range(count)],
                                    options.create_threads)
                print(f"# created {count} objects in {took:.0f}s ({count / took:.0f}/s)",
                      flush=True)
                for round_ in range(options.rounds):
                    order = CONTENDERS if round_ % 2 == 0 else CONTENDERS[::-1]
                    for contender in order:
                        run = restart(cluster, kind, ns.name, count, contender, round_, options)
                        runs.append(run)
                        print(f"{count:>6} {contender:>9} {round_:>5} {run.sync_s:>7.1f} "
                              f"{statistics.median(run.waits):>16.3f} "
                              f"{statistics.median(run.ahead):>23.0f}   waits "
                              + " ".join(f"{w:.2f}" for w in run.waits), flush=True)
            finally:
                ns.delete()
        print()
        for count in options.counts:
            medians = {c: statistics.median([w for r in runs if r.count == count
                                             and r.contender == c for w in r.waits])
                       for c in CONTENDERS}
            ahead = {c: statistics.median([a for r in runs if r.count == count
                                           and r.contender == c for a in r.ahead])
                     for c in CONTENDERS}
            ratio = medians["fifo"] / medians["priority"] if medians["priority"] else float("inf")
            print(f"N={count}: a new object waits (median of {options.rounds} rounds x "
                  f"{options.probes} probes) fifo {medians['fifo']:.2f}s "
                  f"({ahead['fifo']:.0f} backlog reconciles ahead), priority "
                  f"{medians['priority']:.3f}s ({ahead['priority']:.0f} ahead): "
                  f"{ratio:.0f}x sooner", flush=True)
        for count in options.counts:
            fifo = statistics.median([w for r in runs if r.count == count
                                      and r.contender == "fifo" for w in r.waits])
            prio = statistics.median([w for r in runs if r.count == count
                                      and r.contender == "priority" for w in r.waits])
            print(f"restart: objects={count} fifo_s={fifo:.2f} priority_s={prio:.3f} "
                  f"ratio={fifo / prio if prio else float('inf'):.0f}", flush=True)
    return 0


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--kubeconfig", help="use this cluster instead of a local plane")
    parser.add_argument("--counts", type=lambda s: [int(n) for n in s.split(",")],
                        default=[3000, 20000], help="objects before the restart (3000,20000)")
    parser.add_argument("--rounds", type=int, default=2, help="restarts per contender (2)")
    parser.add_argument("--workers", type=int, default=2, help="reconcile workers (2)")
    parser.add_argument("--reconcile-ms", type=float, default=20.0,
                        help="milliseconds each reconcile takes (20)")
    parser.add_argument("--warm", type=int, default=20,
                        help="backlog reconciles before the first probe (20)")
    parser.add_argument("--probes", type=int, default=5, help="new objects per restart (5)")
    parser.add_argument("--probe-interval", type=float, default=1.0,
                        help="seconds between the probes (1)")
    parser.add_argument("--create-threads", type=int, default=16,
                        help="threads creating the N objects (16)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    return bench(parse(argv))


if __name__ == "__main__":
    sys.exit(main())
