"""One replica of a sharded fleet operator: ``python -m tests.cluster.fleet_replica``.

It runs a fleet controller of Crates on the member clusters whose kubeconfig files are in
a folder, with `Sharding` over its replicas (the hub holds the Leases). Each reconcile
appends ``S <identity> <cluster> <namespace>/<name> <monotonic time>`` when it starts and
``E ...`` when it ends to a log shared by every replica (one ``os.write`` on an
``O_APPEND`` file per line, so lines from processes never interleave; CLOCK_MONOTONIC is
one clock for every process of the machine). Every 0.2 s it rewrites ``<status>``: a JSON
object with its identity, the clusters whose Lease it holds and those it runs, synced.
Used by tests/cluster/test_fleet_sharding.py and bench/fleet_bench.py.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from operator_kit import (
    Action,
    Context,
    Controller,
    CustomResource,
    LeaderElection,
    Operator,
    Sharding,
)
from operator_kit.fleet import Fleet, KubeconfigDirectory

OPERATOR = "fleet-shard"


@dataclass
class CrateSpec:
    note: str = ""


class Crate(CustomResource):
    group = "fleet-shard.operator-kit.test"
    version = "v1"
    kind = "Crate"
    plural = "crates"
    spec: CrateSpec


class CrateSync(Controller[Crate]):
    """Waits `work` seconds (I/O: a cloud API), then applies a ConfigMap naming the
    replica on the Crate's own cluster; logs its start and end."""

    resource = Crate
    owns = ["v1/ConfigMap"]
    fleet = True
    identity = ""
    log_fd = -1
    work = 0.0

    def _note(self, what: str, cluster: str | None, obj: Crate) -> None:
        os.write(self.log_fd, f"{what} {self.identity} {cluster} {obj.namespace}/{obj.name} "
                              f"{time.monotonic():.6f}\n".encode())

    def reconcile(self, obj: Crate, ctx: Context) -> Action | None:
        self._note("S", ctx.cluster, obj)
        try:
            if self.work:
                time.sleep(self.work)
            self._note("w", ctx.cluster, obj)  # about to write
            ctx.apply_owned(obj, {"apiVersion": "v1", "kind": "ConfigMap",
                                  "metadata": {"name": f"crate-{obj.name}"},
                                  "data": {"cluster": str(ctx.cluster), "by": self.identity}})
            self._note("W", ctx.cluster, obj)  # the write landed
        finally:
            self._note("E", ctx.cluster, obj)
        return None


Run = tuple[str, float, float]  # identity, start, end


def runs(lines: Iterable[str], killed: dict[str, float] | None = None
         ) -> dict[tuple[str, str], list[Run]]:
    """Every reconcile in a shared log, by (cluster, namespace/name). A start without its
    end ends at its replica's time in `killed` (SIGKILLed), else it is still running."""
    started: dict[tuple[str, str, str], float] = {}
    found: dict[tuple[str, str], list[Run]] = defaultdict(list)
    for line in lines:
        parts = line.split()
        if len(parts) != 5:
            continue
        what, identity, cluster, key, at = parts
        if what == "S":
            started[(identity, cluster, key)] = float(at)
        elif what == "E" and (identity, cluster, key) in started:
            found[(cluster, key)].append(
                (identity, started.pop((identity, cluster, key)), float(at)))
    for (identity, cluster, key), at in started.items():
        end = (killed or {}).get(identity, float("inf"))
        found[(cluster, key)].append((identity, at, end))
    return found


def writes_begun_after(lines: Iterable[str], identity: str, moment: float) -> list[str]:
    """The writes by `identity` that landed (``W``) although they began (``w``) after
    `moment`."""
    begun: dict[tuple[str, str], float] = {}
    landed = []
    for line in lines:
        parts = line.split()
        if len(parts) != 5 or parts[1] != identity:
            continue
        what, _, cluster, key, at = parts
        if what == "w":
            begun[(cluster, key)] = float(at)
        elif what == "W" and begun.get((cluster, key), 0.0) > moment:
            landed.append(f"{cluster} {key} at {at}")
    return landed


def overlaps(found: dict[tuple[str, str], list[Run]]) -> list[str]:
    """Each pair of reconciles of one (cluster, object) that ran at the same time."""
    problems = []
    for (cluster, key), those in found.items():
        ordered = sorted(those, key=lambda run: run[1])
        latest: Run | None = None
        for run in ordered:
            if latest is not None and run[1] < latest[2]:
                problems.append(f"{cluster} {key}: {latest[0]} {latest[1]:.3f}-{latest[2]:.3f}"
                                f" and {run[0]} {run[1]:.3f}-{run[2]:.3f}")
            if latest is None or run[2] > latest[2]:
                latest = run
    return problems


def report(fleet: Fleet, identity: str, status: Path) -> None:
    while not fleet.stopping.wait(0.2):
        members = fleet.members()
        held = fleet.shards.held() if fleet.shards is not None else []
        text = json.dumps({"identity": identity, "held": held,
                           "running": {n: m.synced() for n, m in members.items()},
                           "at": time.monotonic()})
        staged = status.with_suffix(".tmp")
        staged.write_text(text)
        staged.rename(status)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("hub", help="the hub's kubeconfig (the Leases live there)")
    parser.add_argument("namespace", help="the operator's namespace on the hub")
    parser.add_argument("identity")
    parser.add_argument("clusters", help="the folder of member kubeconfigs")
    parser.add_argument("log")
    parser.add_argument("status")
    parser.add_argument("--lease-duration", type=float, default=4.0)
    parser.add_argument("--renew-deadline", type=float, default=3.0)
    parser.add_argument("--retry-period", type=float, default=0.5)
    parser.add_argument("--work", type=float, default=0.0, help="seconds each reconcile waits")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--shutdown-timeout", type=float, default=10.0)
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format="%(asctime)s %(threadName)s %(name)s %(message)s")
    logging.getLogger("operator_kit.controller").setLevel(logging.WARNING)
    controller = CrateSync()
    controller.identity = args.identity
    controller.log_fd = os.open(args.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    controller.work = args.work
    controller.max_concurrent_reconciles = args.workers
    timings = {"lease_duration": args.lease_duration, "renew_deadline": args.renew_deadline,
               "retry_period": args.retry_period}
    operator = Operator(
        OPERATOR, [controller], namespace=args.namespace, kubeconfig=args.hub,
        shutdown_timeout=args.shutdown_timeout,
        leader_election=LeaderElection(lease_name=OPERATOR, identity=args.identity, **timings),
        sharding=Sharding(identity=args.identity, **timings))
    fleet = Fleet.of(operator, KubeconfigDirectory(args.clusters), poll_interval=0.5)
    threading.Thread(target=report, args=(fleet, args.identity, Path(args.status)),
                     name="report-status", daemon=True).start()
    return fleet.run_with(operator)


if __name__ == "__main__":
    sys.exit(main())
