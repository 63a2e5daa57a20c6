"""One sharding member for the sharding tests: ``python -m tests.cluster.shard_member``.

Each reconcile appends ``S <member> <key> <time>`` when it starts, ``w ...`` and
``W ...`` just before and after its write of the child ConfigMap (with ``--children``)
and ``E ...`` when it ends, to a log file shared by every member (one ``os.write`` on an
``O_APPEND`` file per line, so lines from processes never interleave): the test reads
who reconciled what, and when, and checks that no two reconciles of a key ever
overlapped. Every second the member prints ``cache <objects> <foreign>``: how many
Widgets its cache holds, and how many of them are not labelled with its identity; and
``readyz <line>`` whenever the sharding line of its ``/readyz`` changes.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time

from operator_kit import Action, Context, LeaderElection, Operator, Sharding
from tests.cluster.conftest import Widget, WidgetController

OPERATOR = "shard-test"
LABEL = "shard.operator-kit.io/" + OPERATOR


class RecordingController(WidgetController):
    identity = ""
    log_fd = -1
    work = 0.0
    children = False

    def _note(self, what: str, obj: Widget) -> None:
        os.write(self.log_fd, f"{what} {self.identity} {obj.namespace}/{obj.name} "
                              f"{time.time():.6f}\n".encode())

    def reconcile(self, obj: Widget, ctx: Context) -> Action:
        self._note("S", obj)
        try:
            if self.work:
                time.sleep(self.work)  # I/O-bound work: a database, a cloud API
            if self.children:
                self._note("w", obj)  # about to write
                ctx.apply_owned(obj, {"apiVersion": "v1", "kind": "ConfigMap",
                                      "metadata": {"name": obj.name},
                                      "data": {"size": str(obj.spec.size),
                                               "by": self.identity}})
                self._note("W", obj)  # the write landed
        finally:
            self._note("E", obj)
        return Action.await_change()


def report_cache(operator: Operator, identity: str) -> None:
    said = ""
    while not operator.stopping.wait(1.0):
        if operator.ready_detail() != said:  # what /readyz says after "ok"
            said = operator.ready_detail()
            print(f"readyz {said.strip()}", flush=True)
        if operator.sharding_mode == "server":  # no labels: its caches hold its share
            ranges = operator.ranges
            held = len(ranges.held) if ranges is not None else 0
            print(f"cache {ranges.cached() if ranges else 0} 0 slots {held}", flush=True)
            continue
        for informer in operator.informers.values():
            if informer.resource.plural == "widgets" and not informer.metadata_only:
                objects = informer.objects()
                foreign = sum(1 for o in objects
                              if (o["metadata"].get("labels") or {}).get(LABEL) != identity)
                print(f"cache {len(objects)} {foreign}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("namespace")
    parser.add_argument("kubeconfig")
    parser.add_argument("identity")
    parser.add_argument("log")
    parser.add_argument("--lease-duration", type=float, default=4.0)
    parser.add_argument("--renew-deadline", type=float, default=3.0)
    parser.add_argument("--retry-period", type=float, default=0.5)
    parser.add_argument("--work", type=float, default=0.0, help="seconds each reconcile waits")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--children", action="store_true", help="apply a ConfigMap each")
    parser.add_argument("--mode", default="labels", help="Sharding.mode")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format="%(asctime)s %(threadName)s %(name)s %(message)s")
    logging.getLogger("operator_kit.controller").setLevel(logging.WARNING)
    controller = RecordingController(args.namespace)
    controller.identity = args.identity
    controller.log_fd = os.open(args.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    controller.work = args.work
    controller.children = args.children
    controller.max_concurrent_reconciles = args.workers
    if not args.children:
        controller.owns = ()
    timings = {"lease_duration": args.lease_duration, "renew_deadline": args.renew_deadline,
               "retry_period": args.retry_period}
    operator = Operator(
        OPERATOR, [controller], namespace=args.namespace, kubeconfig=args.kubeconfig,
        leader_election=LeaderElection(lease_name=OPERATOR, identity=args.identity, **timings),
        sharding=Sharding(identity=args.identity, mode=args.mode, **timings))
    threading.Thread(target=report_cache, args=(operator, args.identity), daemon=True,
                     name="report-cache").start()
    return operator.run()


if __name__ == "__main__":
    sys.exit(main())
