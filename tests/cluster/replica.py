"""One operator replica for leader-election tests: ``python -m tests.cluster.replica``.

Each reconcile stamps the replica's identity into the Widget's ConfigMap, so a test can
prove from the objects which replica reconciled, and when.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

from operator_kit import Action, Context, LeaderElection, Operator
from tests.cluster.conftest import Widget, WidgetController


class StampingController(WidgetController):
    identity = ""
    slow = 0.0
    noop = False  # only print: bench/failover_bench.py's thousands of objects
    # Each apply stamps the time, so it changes the ConfigMap every time: its echo must
    # not reconcile again, or the replica would reconcile in a loop.
    skip_own_echoes = True

    def reconcile(self, obj: Widget, ctx: Context) -> Action:
        if self.noop:
            print(f"reconciled {obj.name} size={obj.spec.size}", flush=True)
            return Action.await_change()
        if self.slow:  # half the work, a pause (a SIGKILL may land here), the rest
            ctx.patch_status(obj, {"observed_size": None})
            print(f"reconciling {obj.name} size={obj.spec.size}", flush=True)
            time.sleep(self.slow)
        ctx.apply_owned(obj, {
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": obj.name},
            "data": {"size": str(obj.spec.size), "reconciled_by": self.identity,
                     "at": repr(time.time())},
        })
        ctx.patch_status(obj, {"observed_size": obj.spec.size})
        print(f"reconciled {obj.name} size={obj.spec.size}", flush=True)
        return Action.await_change()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("namespace")
    parser.add_argument("kubeconfig")
    parser.add_argument("identity")
    parser.add_argument("--lease-duration", type=float, default=15.0)
    parser.add_argument("--renew-deadline", type=float, default=10.0)
    parser.add_argument("--retry-period", type=float, default=2.0)
    parser.add_argument("--slow", type=float, default=0.0,
                        help="seconds to pause in the middle of each reconcile")
    parser.add_argument("--cold", action="store_true",
                        help="no warm standby: list the caches only after acquiring the Lease")
    parser.add_argument("--noop", action="store_true",
                        help="reconcile by printing a line only, writing nothing")
    parser.add_argument("--log-lists", action="store_true",
                        help="log each informer's (re)list (operator_kit.watching at DEBUG)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format="%(asctime)s %(threadName)s %(name)s %(message)s")
    controller = StampingController(args.namespace)
    controller.identity = args.identity
    controller.slow = args.slow
    controller.noop = args.noop
    if args.log_lists:
        logging.getLogger("operator_kit.watching").setLevel(logging.DEBUG)
    operator = Operator(
        "replica-test", [controller], namespace=args.namespace, kubeconfig=args.kubeconfig,
        leader_election=LeaderElection(
            lease_name="replica-test", identity=args.identity,
            lease_duration=args.lease_duration, renew_deadline=args.renew_deadline,
            retry_period=args.retry_period, warm_standby=not args.cold))
    return operator.run()


if __name__ == "__main__":
    sys.exit(main())
