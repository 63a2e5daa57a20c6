"""Memory soak: an operator under steady create/update/delete churn; is its RSS flat?

Usage::

    python bench/soak.py                     # 30 minutes on its own local plane
    python bench/soak.py --minutes 3         # a quick run
    python bench/soak.py --kubeconfig K      # on a cluster you can throw away

Method
------
Unless ``--kubeconfig`` is given, the script starts its own local control plane
(`operator_kit.localcluster.LocalCluster`) in a temporary folder and stops it at the end.
It installs the test suite's ``Widget`` kind and, in a fresh namespace, runs the
``WidgetController`` (a ConfigMap per Widget, its size in status; ``owns`` ConfigMaps)
in an `Operator` in a **subprocess** (this script, hidden ``--worker`` mode), so its
resident memory can be read from ``/proc/<pid>/status`` alone. The worker writes its
figures (objects in its caches, reconciles run) to a small JSON file every second.

The churner then runs, for ``--minutes``, ``--rate`` operations per second over a
bounded set of ``--widgets`` names: for a random name, create it when absent, otherwise
update its size (``--update-share`` of the time) or delete it. Every ``--every`` seconds
it prints the elapsed time, the operator's RSS, its cache size and its reconciles.

At the end it prints the RSS slope over the second half of the run (least squares, in
MB per hour; the first half includes warm-up: imports, caches filling, allocator
arenas growing) and the delta from the first sample to the last. Next to RSS it follows
Python's own view of its heap: the objects the garbage collector tracks and the memory
blocks allocated (``sys.getallocatedblocks``). A leak of Python objects grows those; RSS
growing while they stay flat is the allocator (fragmentation, arenas), not a leak.

Then it stops the worker, deletes the namespace and (when it started one) the plane,
also when it is interrupted (Ctrl-C, SIGTERM). Everything stays on loopback and is
bounded by ``--widgets``, ``--rate`` and ``--minutes``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kubernetes.client.exceptions import ApiException  # noqa: E402

from operator_kit.localcluster import LocalCluster  # noqa: E402
from operator_kit.testing import Namespace, TestCluster, stop_process  # noqa: E402


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def slope_per_hour(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MB) samples, in MB per hour."""
    if len(samples) < 2:
        return 0.0
    n = len(samples)
    mean_t = sum(t for t, _ in samples) / n
    mean_m = sum(m for _, m in samples) / n
    var = sum((t - mean_t) ** 2 for t, _ in samples)
    if var == 0:
        return 0.0
    cov = sum((t - mean_t) * (m - mean_m) for t, m in samples)
    return cov / var * 3600


# -- the operator, in its own process ----------------------------------------------------

def worker(kubeconfig: str, namespace: str, stats_file: str, threads: int) -> int:
    import gc

    from prometheus_client import REGISTRY

    from operator_kit import Operator
    from tests.cluster.conftest import Recorder, WidgetController

    class Forgetful(Recorder):
        """The tests' Recorder keeps every call: a growing list that is not the operator's."""

        def record(self, name: str, at: float) -> None:
            pass

    def controller_sample(name: str, controller: str) -> float:
        """A controller's series, with or without a cluster label (a baseline's)."""
        return float(sum(s.value for m in REGISTRY.collect() for s in m.samples
                         if s.name == name and s.labels.get("controller") == controller))

    controller = WidgetController(namespace, recorder=Forgetful())
    controller.max_concurrent_reconciles = threads
    operator = Operator("soak-operator", [controller], kubeconfig=kubeconfig)
    out = Path(stats_file)

    def report() -> None:
        while not operator.stopping.wait(1.0):
            cache = sum(s.value for m in REGISTRY.collect()
                        if m.name == "operator_kit_cache_objects" for s in m.samples)
            stats = {
                "cache": cache,
                "reconciles": controller_sample(
                    "operator_kit_controller_reconciles_total", controller.name),
                "errors": controller_sample(
                    "operator_kit_controller_reconcile_errors_total", controller.name),
                "synced": operator.wait_synced(0),
                # Python's own view of its heap: a leak of objects grows these; RSS growing
                # while they stay flat is the allocator (fragmentation, arenas), not a leak.
                "objects": len(gc.get_objects()),
                "blocks": sys.getallocatedblocks(),
            }
            tmp = out.with_suffix(".tmp")
            tmp.write_text(json.dumps(stats))
            tmp.rename(out)

    threading.Thread(target=report, name="soak-stats", daemon=True).start()
    return operator.run()


# -- the churner -------------------------------------------------------------------------

class Churn:
    """Create/update/delete over a bounded set of Widget names at a steady rate."""

    def __init__(self, cluster: TestCluster, namespace: str, widgets: int,
                 update_share: float, seed: int) -> None:
        from tests.cluster.conftest import Widget

        self.api = cluster.api
        self.namespace = namespace
        self.kind = Widget
        self.path = f"/apis/{Widget.api_version()}/namespaces/{namespace}/widgets"
        self.names = [f"soak-{i:04d}" for i in range(widgets)]
        self.present: set[str] = set()
        self.update_share = update_share
        self.random = random.Random(seed)
        self.counts = {"create": 0, "update": 0, "delete": 0, "error": 0}

    def step(self) -> None:
        from tests.cluster.conftest import WidgetSpec

        name = self.random.choice(self.names)
        size = self.random.randint(1, 1000)
        try:
            if name not in self.present:
                body = self.kind(name, WidgetSpec(size=size, message="x" * size),
                                 namespace=self.namespace).to_dict()
                self._tolerate(lambda: self.api.request("POST", self.path, body=body), 409)
                self.present.add(name)
                self.counts["create"] += 1
            elif self.random.random() < self.update_share:
                patch = {"spec": {"size": size, "message": "y" * size}}
                found = self._tolerate(lambda: self.api.request(
                    "PATCH", f"{self.path}/{name}", body=patch,
                    content_type="application/merge-patch+json"), 404)
                if found is None:
                    self.present.discard(name)
                self.counts["update"] += 1
            else:
                self._tolerate(lambda: self.api.request("DELETE", f"{self.path}/{name}"), 404)
                self.present.discard(name)
                self.counts["delete"] += 1
        except ApiException:
            self.counts["error"] += 1

    @staticmethod
    def _tolerate(call: Any, status: int) -> Any:
        try:
            return call()
        except ApiException as err:
            if err.status == status:
                return None
            raise


def read_stats(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text()))
    except (FileNotFoundError, ValueError):
        return {}


def soak(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="operator-kit-soak-") as tmp:
        folder = Path(tmp)
        plane: LocalCluster | None = None
        proc: subprocess.Popen[bytes] | None = None
        ns: Namespace | None = None
        try:
            kubeconfig = args.kubeconfig
            if not kubeconfig:
                plane = LocalCluster(folder / "plane")
                print("starting a local control plane ...", flush=True)
                kubeconfig = str(plane.up())
            cluster = TestCluster(kubeconfig)
            from tests.cluster.conftest import Widget

            cluster.install_crd(Widget)
            ns = cluster.namespace("soak")
            stats_file = folder / "stats.json"
            log = open(folder / "operator.log", "wb")
            proc = subprocess.Popen(
                [sys.executable, __file__, "--worker", "--kubeconfig", kubeconfig,
                 "--namespace", ns.name, "--stats-file", str(stats_file),
                 "--threads", str(args.threads)],
                stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
            log.close()
            deadline = time.monotonic() + 60
            while not read_stats(stats_file).get("synced"):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the operator did not start; its log:\n"
                                       + (folder / "operator.log").read_text()[-3000:])
                time.sleep(0.2)

            churn = Churn(cluster, ns.name, args.widgets, args.update_share, args.seed)
            samples: list[tuple[float, float]] = []
            objects: list[tuple[float, float]] = []
            blocks: list[tuple[float, float]] = []
            duration = args.minutes * 60
            period = 1.0 / args.rate
            print(f"operator pid {proc.pid}; churning {args.widgets} widgets at "
                  f"{args.rate:g} ops/s for {args.minutes:g} min in namespace {ns.name}",
                  flush=True)
            print(f"{'elapsed':>8} {'RSS MB':>8} {'cache':>6} {'reconciles':>10} "
                  f"{'errors':>6} {'ops':>7} {'objects':>8} {'blocks':>8}", flush=True)

            def sample(elapsed: float) -> None:
                rss = rss_mb(proc.pid)
                samples.append((elapsed, rss))
                stats = read_stats(stats_file)
                objects.append((elapsed, stats.get("objects", 0) / 1000))
                blocks.append((elapsed, stats.get("blocks", 0) / 1000))
                ops = sum(v for k, v in churn.counts.items() if k != "error")
                print(f"{elapsed:7.0f}s {rss:8.1f} {stats.get('cache', 0):6.0f} "
                      f"{stats.get('reconciles', 0):10.0f} {stats.get('errors', 0):6.0f} "
                      f"{ops:7d} {stats.get('objects', 0):8d} {stats.get('blocks', 0):8d}",
                      flush=True)

            start = time.monotonic()
            sample(0.0)
            next_op, next_sample = start, start + args.every
            while True:
                now = time.monotonic()
                if now - start >= duration:
                    break
                if proc.poll() is not None:
                    raise RuntimeError(f"the operator exited with {proc.returncode}")
                if now >= next_sample:
                    sample(now - start)
                    next_sample += args.every
                if now >= next_op:
                    churn.step()
                    next_op += period
                    continue
                time.sleep(max(0.0, min(next_op, next_sample) - time.monotonic()))
            sample(time.monotonic() - start)

            half = duration / 2

            def later(series: list[tuple[float, float]]) -> list[tuple[float, float]]:
                return [s for s in series if s[0] >= half]

            second, later_objects, later_blocks = later(samples), later(objects), later(blocks)
            print(f"\nops: {churn.counts}")
            print(f"RSS first {samples[0][1]:.1f} MB, last {samples[-1][1]:.1f} MB, "
                  f"delta {samples[-1][1] - samples[0][1]:+.1f} MB; "
                  f"peak {max(m for _, m in samples):.1f} MB")
            print(f"RSS slope over the second half ({len(second)} samples): "
                  f"{slope_per_hour(second):+.1f} MB/hour "
                  f"(whole run: {slope_per_hour(samples):+.1f} MB/hour)")
            print(f"Python heap over the second half: gc-tracked objects "
                  f"{slope_per_hour(later_objects):+.1f}k/hour "
                  f"({later_objects[0][1]:.1f}k to {later_objects[-1][1]:.1f}k), "
                  f"allocated blocks {slope_per_hour(later_blocks):+.1f}k/hour "
                  f"({later_blocks[0][1]:.1f}k to {later_blocks[-1][1]:.1f}k)",
                  flush=True)
            return 0
        finally:
            if proc is not None:
                stop_process(proc)
            if ns is not None and plane is None:  # on a cluster of the user's
                with contextlib.suppress(ApiException):
                    ns.delete()
            if plane is not None:
                plane.down()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--kubeconfig", help="use this cluster; start no local plane")
    parser.add_argument("--widgets", type=int, default=200, help="names churned over")
    parser.add_argument("--rate", type=float, default=20.0, help="operations per second")
    parser.add_argument("--update-share", type=float, default=0.6,
                        help="share of operations on a present widget that update it")
    parser.add_argument("--every", type=float, default=30.0, help="seconds between samples")
    parser.add_argument("--threads", type=int, default=4, help="reconcile workers")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--namespace", help=argparse.SUPPRESS)
    parser.add_argument("--stats-file", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args.kubeconfig, args.namespace, args.stats_file, args.threads)
    if not 0 < args.rate <= 200 or not 0 < args.widgets <= 5000 or args.minutes <= 0:
        parser.error("keep it bounded: 0 < --rate <= 200, 0 < --widgets <= 5000, --minutes > 0")

    def interrupted(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    # SIGTERM (kill, a CI timeout) unwinds like Ctrl-C: the operator, the namespace and
    # the local plane are still stopped and removed.
    signal.signal(signal.SIGTERM, interrupted)
    return soak(args)


if __name__ == "__main__":
    sys.exit(main())
