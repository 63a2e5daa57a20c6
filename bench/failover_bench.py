"""Leader failover with client-go's default timings: SIGTERM handover vs SIGKILL takeover.

Two operator replicas (tests/cluster/replica.py) run against a real API server; the
first leads. The leader is then stopped — SIGTERM (it drains and releases its Lease) or
SIGKILL (the Lease must expire) — and a spec change is made at once. The figure is the
time from the signal until the follower's reconcile of that change is visible in the
object it writes. Medians of several runs, next to the configured timings.

    python bench/failover_bench.py [--runs 5] [--kubeconfig PATH]

Without --kubeconfig a local control plane is started in a temporary folder.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from operator_kit.localcluster import LocalCluster  # noqa: E402
from operator_kit.testing import Namespace, TestCluster, eventually  # noqa: E402
from tests.cluster.conftest import Widget, WidgetSpec  # noqa: E402

LEASE, DEADLINE, RETRY = 15.0, 10.0, 2.0


def replica(ns: Namespace, kubeconfig: str, identity: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.cluster.replica", ns.name, kubeconfig, identity,
         "--lease-duration", str(LEASE), "--renew-deadline", str(DEADLINE),
         "--retry-period", str(RETRY)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)


def stamped_by(ns: Namespace, size: int) -> str | None:
    cm = ns.get("v1", "ConfigMap", "w")
    if cm and cm["data"]["size"] == str(size):
        return str(cm["data"]["reconciled_by"])
    return None


def holder(ns: Namespace) -> Any:
    lease = ns.get("coordination.k8s.io/v1", "Lease", "replica-test")
    return lease and lease["spec"].get("holderIdentity")


def one_run(cluster: TestCluster, how: signal.Signals) -> float:
    ns = cluster.namespace("failover")
    processes: list[subprocess.Popen[str]] = []
    try:
        processes.append(replica(ns, cluster.kubeconfig, "first"))
        eventually(60, lambda: holder(ns) == "first")
        processes.append(replica(ns, cluster.kubeconfig, "second"))
        body = Widget("w", WidgetSpec(size=1), namespace=ns.name).to_dict()
        path = f"/apis/{Widget.api_version()}/namespaces/{ns.name}/widgets"
        ns.api.request("POST", path, body=body)
        eventually(60, lambda: stamped_by(ns, 1) == "first")
        time.sleep(2 * RETRY)  # let the follower settle into its retry loop
        processes[0].send_signal(how)
        signalled = time.monotonic()
        ns.api.request("PATCH", f"{path}/w", body={"spec": {"size": 2}},
                       content_type="application/merge-patch+json")
        eventually(LEASE * 3, lambda: stamped_by(ns, 2) == "second", interval=0.05)
        return time.monotonic() - signalled
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait(10)
        ns.delete()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--kubeconfig")
    args = parser.parse_args()
    plane: LocalCluster | None = None
    kubeconfig = args.kubeconfig
    if kubeconfig is None:
        plane = LocalCluster(Path(tempfile.mkdtemp()) / "plane")
        kubeconfig = str(plane.up())
    try:
        cluster = TestCluster(kubeconfig)
        cluster.install_crd(Widget)
        results: dict[str, list[float]] = {"SIGTERM": [], "SIGKILL": []}
        for _ in range(args.runs):
            for how in (signal.SIGTERM, signal.SIGKILL):
                took = one_run(cluster, how)
                results[how.name].append(took)
                print(f"  {how.name}: follower reconciled after {took:.2f}s", flush=True)
        print(f"\nconfigured: lease duration {LEASE:g}s, renew deadline {DEADLINE:g}s, "
              f"retry period {RETRY:g}s; {args.runs} runs each")
        print(f"{'stop':<9}{'median':>9}{'min':>9}{'max':>9}   bound")
        bounds = {"SIGTERM": f"~retry period ({RETRY:g}s x1.2 jitter)",
                  "SIGKILL": f"lease duration + retry period ({LEASE + RETRY:g}s)"}
        for name, times in results.items():
            print(f"{name:<9}{statistics.median(times):>8.2f}s{min(times):>8.2f}s"
                  f"{max(times):>8.2f}s   {bounds[name]}")
    finally:
        if plane is not None:
            plane.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
