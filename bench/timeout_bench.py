"""Reconcile timeouts: the other keys' throughput while one key's reconcile hangs.

One controller with one worker (``max_concurrent_reconciles = 1``) reconciles Widgets:
for each, a server-side apply of an owned ConfigMap and a status patch. The reconcile
of one Widget, ``hangs``, instead waits ``--hang`` seconds every time it runs (a call to
a cloud API that is down, with a long timeout of its own) and then fails. Each phase, in
a fresh namespace: ``hangs`` is created and its reconcile starts hanging, then
``--objects`` other Widgets are created at once; the phase ends when every one of them
has been reconciled. Two contenders, side by side in each round (their order alternates):

- **no timeout**: ``reconcile_timeout = None`` (the default) — the hang holds the only
  worker, and the others wait for it;
- **timeout**: ``reconcile_timeout = --timeout`` — after it the hung reconcile is
  abandoned (its key retried with backoff, where it hangs again) and a new worker takes
  the others;
- **no hang** (the reference): no ``hangs`` Widget, no timeout — what the others'
  figures are when nothing hangs (creating them takes part of that time).

Per phase: the others' throughput (objects / seconds from their creation to the last
one reconciled) and the median wait of one object (creation to its reconcile's end).
Then the medians over ``--rounds``, the ratio timeout / no timeout, and timeout / no
hang.

    python bench/timeout_bench.py [--objects 100] [--hang 20] [--timeout 1] [--rounds 3]
                                  [--kubeconfig PATH]

Without --kubeconfig a local control plane is started in a temporary folder. The last
line is ``timeout: objects=<n> hang_s=<s> timeout_s=<s> without=<x>/s with=<y>/s
no_hang=<z>/s ratio=<r.rr>``.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from operator_kit import Action, Context, Controller, Operator  # noqa: E402
from operator_kit.localcluster import LocalCluster  # noqa: E402
from operator_kit.testing import Namespace, TestCluster, eventually  # noqa: E402
from tests.cluster.conftest import Widget, create_widget  # noqa: E402


class Hanging(Controller[Widget]):
    """The bench's controller: one worker; ``hangs`` hangs, the others do real work."""

    resource = Widget
    owns = ("v1/ConfigMap",)
    max_concurrent_reconciles = 1

    def __init__(self, namespace: str, hang: float, timeout: float | None,
                 release: threading.Event) -> None:
        self.reconcile_timeout = timeout
        super().__init__()
        self.namespace = namespace
        self.hang = hang
        self.release = release  # set at the end of the phase: abandoned hangs return
        self.hanging = threading.Event()
        self.done: dict[str, float] = {}  # name -> monotonic end of its reconcile
        self._lock = threading.Lock()

    def reconcile(self, obj: Widget, ctx: Context) -> Action:
        if obj.name == "hangs":
            self.hanging.set()
            self.release.wait(self.hang)
            raise TimeoutError(f"the cloud API did not answer in {self.hang:g}s")
        ctx.apply_owned(obj, {"apiVersion": "v1", "kind": "ConfigMap",
                              "metadata": {"name": obj.name},
                              "data": {"size": str(obj.spec.size)}})
        ctx.patch_status(obj, {"observed_size": obj.spec.size})
        with self._lock:
            self.done.setdefault(obj.name, time.monotonic())
        return Action.await_change()

    def finished(self) -> dict[str, float]:
        """When each other Widget's reconcile ended (monotonic), by name."""
        with self._lock:
            return dict(self.done)


def phase(cluster: TestCluster, label: str, objects: int, hang: float | None,
          timeout: float | None) -> tuple[float, float]:
    """One phase; (objects per second, median wait in seconds)."""
    ns: Namespace = cluster.namespace(f"timeout-bench-{label}")
    release = threading.Event()
    controller = Hanging(ns.name, hang or 0.0, timeout, release)
    operator = Operator("timeout-bench", [controller])
    operator.use(cluster.client)
    operator.start()
    try:
        assert operator.wait_synced(60), "caches did not sync"
        if hang is not None:
            create_widget(ns, "hangs")
            assert controller.hanging.wait(30), "the hanging reconcile did not start"
        created: dict[str, float] = {}
        start = time.monotonic()
        for i in range(objects):
            name = f"w-{i}"
            create_widget(ns, name, size=i)
            created[name] = time.monotonic()
        eventually((hang or 0.0) * 4 + objects + 60, lambda: len(controller.finished()) == objects,
                   interval=0.05)
        done = controller.finished()
        took = max(done.values()) - start
        wait = statistics.median(done[n] - created[n] for n in created)
        print(f"  {label:>10}: {objects} others reconciled in {took:5.1f}s "
              f"({objects / took:6.1f}/s), median wait {wait:5.2f}s", flush=True)
        return objects / took, wait
    finally:
        release.set()
        operator.stop(timeout=10)
        ns.delete()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=100)
    parser.add_argument("--hang", type=float, default=20.0,
                        help="seconds the hanging reconcile waits each time (default 20)")
    parser.add_argument("--timeout", type=float, default=1.0,
                        help="reconcile_timeout of the 'timeout' contender (default 1)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kubeconfig")
    parser.add_argument("--verbose", action="store_true",
                        help="show the controller's log (the hang's failures and timeouts)")
    args = parser.parse_args()
    if not args.verbose:
        logging.getLogger("operator_kit.controller").setLevel(logging.CRITICAL)
    plane: LocalCluster | None = None
    kubeconfig = args.kubeconfig
    if kubeconfig is None:
        plane = LocalCluster(Path(tempfile.mkdtemp()) / "plane")
        kubeconfig = str(plane.up())
    try:
        cluster = TestCluster(kubeconfig)
        cluster.install_crd(Widget)
        contenders: list[tuple[str, float | None, float | None]] = [
            ("no timeout", args.hang, None), ("timeout", args.hang, args.timeout),
            ("no hang", None, None)]
        results: dict[str, list[tuple[float, float]]] = {c[0]: [] for c in contenders}
        print(f"one worker; 'hangs' hangs {args.hang:g}s each time; {args.objects} others; "
              f"reconcile_timeout {args.timeout:g}s vs none", flush=True)
        for round_ in range(args.rounds):
            print(f"round {round_ + 1}", flush=True)
            for label, hang, timeout in (contenders if round_ % 2 == 0
                                         else contenders[::-1]):
                results[label].append(phase(cluster, label.replace(" ", "-"), args.objects,
                                            hang, timeout))
        rate = {k: statistics.median(r for r, _ in v) for k, v in results.items()}
        wait = {k: statistics.median(w for _, w in v) for k, v in results.items()}
        for label in results:
            print(f"median {label:>10}: {rate[label]:6.1f}/s, median wait {wait[label]:.2f}s")
        ratio = rate["timeout"] / rate["no timeout"]
        print(f"throughput ratio timeout / no timeout: {ratio:.2f}x; median wait "
              f"{wait['no timeout']:.2f}s -> {wait['timeout']:.2f}s")
        print(f"throughput ratio timeout / no hang: {rate['timeout'] / rate['no hang']:.2f}x; "
              f"median wait {wait['no hang']:.2f}s with no hang")
        print(f"timeout: objects={args.objects} hang_s={args.hang:g} "
              f"timeout_s={args.timeout:g} without={rate['no timeout']:.1f}/s "
              f"with={rate['timeout']:.1f}/s no_hang={rate['no hang']:.1f}/s "
              f"ratio={ratio:.2f}")
        return 0
    finally:
        if plane is not None:
            plane.down()


if __name__ == "__main__":
    sys.exit(main())
