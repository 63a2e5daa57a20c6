"""Fairness benchmark: how long quiet tenants' changes wait while a noisy tenant floods the
work queue, with fairness between namespaces on and off.

Usage::

    python bench/fairness_bench.py --kubeconfig K              # N = 5000, K = 10, 3 rounds
    python bench/fairness_bench.py --kubeconfig K --noisy 2000 --rounds 2
    python bench/fairness_bench.py                             # on a plane of its own

Method
------
Unless ``--kubeconfig`` is given, the script starts its own local control plane in a
temporary folder and stops it at the end. It installs a small custom resource,
``FairItem`` (group ``bench.operator-kit.test``), makes one *noisy* namespace and ``K``
*quiet* ones (``--quiet-flows``), each quiet one holding one FairItem. Then, for each
round, each mode in turn (the order alternates from round to round) runs once:

1. an `Operator` with one controller over FairItems in every namespace (one watch, as a
   platform operator has) starts in this process and reconciles the quiet objects; each
   reconcile records when it began and the ``spec.index`` it saw, then sleeps
   ``--reconcile-ms`` (a reconcile's calls to the API server, without their load) on
   ``--workers`` workers;
2. the noisy tenant creates ``N`` objects (``--noisy``) in its namespace and updates each
   once, as fast as ``--noisy-threads`` threads can; meanwhile each quiet flow changes
   its object (``spec.index`` += 1) once a second;
3. a quiet change's *wait* is the time from just before its PATCH to the start of the
   first reconcile that saw it (level-based: a reconcile that saw a later index saw it
   too); the noisy tenant's *time* runs from its first POST to the start of the last
   reconcile that saw the last of its updates;
4. once every noisy update has been reconciled the quiet writers stop; the operator stops
   when their last changes are reconciled, and the noisy objects are deleted before the
   next run.

The modes differ only in ``Controller.fairness``:

``fair``
    the default, ``Fairness()``: each namespace a flow, flows served in turn.
``fifo``
    ``fairness = None``: one first-in, first-out queue per priority, the order before.

A flood forms only when the noisy tenant writes faster than the workers reconcile, and
the quiet flows alone take ``K`` reconciles a second: choose ``--workers`` and
``--reconcile-ms`` so that ``workers / reconcile`` is well above ``K`` a second and below
the noisy write rate the first line of each run reports (on a loaded machine, with few
writes a second, a longer reconcile).

Figures: per run, the quiet waits' p50 and p99 and the noisy time, and what the workers
did while the flood lasted (from its first POST to the reconcile that saw its last
update): the reconciles that began (of quiet objects), their rate -- the throughput --
and the share of the workers' time spent in reconciles; per mode, the p50 and p99 of
every quiet wait of every round, the median noisy time and the medians of the rest.
The quiet waits also from the PATCH's answer, leaving out the API server's write (the
queue and the watch's delivery; negative when the reconcile began before the answer
reached the writer). Then where the noisy tenant's extra time went: the throughput
ratio fair/fifo, the noisy time less the fair mode's extra quiet reconciles (at its
throughput), and the ratio the quiet flows' demand alone predicts,
``1 / (1 - K / throughput)`` (fairness reconciles each quiet change as it comes, where
FIFO folds many into one behind the flood: the flood gets what the quiet flows leave).
The last line:
``fairness: noisy=<N> quiet_flows=<K> quiet_p99_ms=<x> fifo_quiet_p99_ms=<y>
noisy_s=<s> fifo_noisy_s=<s>``. Everything shares one machine (the API server, etcd,
this process), so absolute times move with its load; compare the modes within one run.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's operator_kit, not an installed one

GROUP = "bench.operator-kit.test"
VERSION = "v1"
KIND = "FairItem"
PLURAL = "fairitems"
MODES = ("fair", "fifo")
MERGE = "application/merge-patch+json"


def fair_kind() -> type[Any]:
    """The FairItem kind as an operator_kit CustomResource."""
    from dataclasses import dataclass as plain_dataclass

    from operator_kit import CustomResource

    @plain_dataclass
    class FairSpec:
        index: int = 0

    class FairItem(CustomResource):
        group = GROUP
        version = VERSION
        kind = KIND
        plural = PLURAL
        spec: FairSpec

    return FairItem


def path(namespace: str, name: str = "") -> str:
    base = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"
    return f"{base}/{name}" if name else base


class Seen:
    """Every reconcile's start and the index it saw, by (namespace, name), thread-safely."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self.by_key: dict[tuple[str, str], list[tuple[float, int]]] = defaultdict(list)
        self.updated: dict[str, float] = {}  # noisy name -> first reconcile seeing index 1
        self.reconciles = 0
        self.spans: list[tuple[float, float, bool]] = []  # (start, end, quiet) of each one

    def record(self, namespace: str, name: str, index: int, noisy: str) -> float:
        """Record a reconcile's start; returns it, for `finish`."""
        now = time.monotonic()
        with self._lock:
            self.reconciles += 1
            if namespace == noisy:
                if index >= 1 and name not in self.updated:
                    self.updated[name] = now
            else:
                self.by_key[namespace, name].append((now, index))
            self._changed.notify_all()
        return now

    def finish(self, began: float, quiet: bool) -> None:
        """Record the end of the reconcile that began at `began`."""
        with self._lock:
            self.spans.append((began, time.monotonic(), quiet))

    def window(self, start: float, end: float) -> tuple[int, int, float]:
        """Of the reconciles that began between `start` and `end`: how many, how many of
        quiet objects, and the seconds they took (summed over the workers)."""
        with self._lock:
            inside = [(b, e, q) for b, e, q in self.spans if start <= b <= end]
        return (len(inside), sum(q for _, _, q in inside),
                sum(min(e, end) - b for b, e, _ in inside))

    def noisy_done(self) -> tuple[int, float]:
        """How many noisy objects were reconciled at their update, and the last start."""
        with self._lock:
            return len(self.updated), max(self.updated.values(), default=0.0)

    def quiet_reconciles(self) -> int:
        with self._lock:
            return sum(len(seen) for seen in self.by_key.values())

    def first_seeing(self, key: tuple[str, str], index: int) -> float | None:
        with self._lock:
            return next((at for at, seen in self.by_key.get(key, ()) if seen >= index), None)


@dataclass
class Run:
    """One mode's run: each quiet change's wait, and the noisy tenant's time."""

    mode: str
    round: int
    waits: list[float] = field(default_factory=list)
    answered: list[float] = field(default_factory=list)  # each wait, from the PATCH's answer
    noisy_s: float = 0.0
    reconciles: int = 0
    quiet_reconciles: int = 0
    busy_s: float = 0.0  # from the first noisy POST to the last quiet change's reconcile
    written_s: float = 0.0  # the noisy tenant's writes, from the first POST to the last PATCH
    # While the flood lasted (its first POST to its last update's reconcile):
    flood_reconciles: int = 0  # reconciles begun
    flood_quiet: int = 0  # of which of the quiet objects
    flood_worked_s: float = 0.0  # the workers' seconds in reconciles, summed

    @property
    def flood_rate(self) -> float:
        """Reconciles a second while the flood lasted: the throughput."""
        return self.flood_reconciles / self.noisy_s

    def busy_share(self, workers: int) -> float:
        """How much of the workers' time went into reconciles while the flood lasted."""
        return self.flood_worked_s / (workers * self.noisy_s)


def make_controller(kind: type[Any], mode: str, workers: int, seconds: float, seen: Seen,
                    noisy: str) -> Any:
    from operator_kit import Action, Context, Controller, Fairness

    class Tenants(Controller[Any]):
        resource = kind
        max_concurrent_reconciles = workers
        name = f"fairness-{mode}"
        fairness = Fairness() if mode == "fair" else None

        def reconcile(self, obj: Any, ctx: Context) -> Action:
            began = seen.record(obj.namespace, obj.name, obj.spec.index, noisy)
            time.sleep(seconds)
            seen.finish(began, obj.namespace != noisy)
            return Action.await_change()

    return Tenants()


def request(api: Any, method: str, url: str, **options: Any) -> Any:
    """One request, retried after a throttle or a 5xx; a 409 on create is success."""
    from kubernetes.client.exceptions import ApiException

    for attempt in range(8):
        try:
            return api.request(method, url, **options)
        except ApiException as err:
            if err.status == 409 and method == "POST":
                return None  # created by an attempt whose answer was lost
            if err.status not in (429, 500, 503, 504) or attempt == 7:
                raise
            time.sleep(0.1 * 2 ** attempt)
    return None


def run_mode(cluster: Any, kind: type[Any], noisy: str, quiet: Sequence[str], mode: str,
             round_: int, options: argparse.Namespace) -> Run:
    """One run of one mode: the flood, the quiet changes, the operator reconciling them."""
    from operator_kit import Operator

    seen = Seen()
    controller = make_controller(kind, mode, options.workers, options.reconcile_ms / 1000,
                                 seen, noisy)
    operator = Operator(f"fairness-bench-{mode}", [controller])
    operator.use(cluster.client)
    run = Run(mode, round_)
    stop = threading.Event()
    writes: list[tuple[tuple[str, str], int, float, float]] = []  # key, index, sent, answer
    writes_lock = threading.Lock()
    operator.start()
    try:
        if not operator.wait_synced(300):
            raise SystemExit(f"{mode}: the cache did not sync within 300 s")
        current = {ns: (cluster.api.request("GET", path(ns, "quiet"))["spec"]["index"])
                   for ns in quiet}

        def write_quiet(ns: str, offset: float) -> None:
            if stop.wait(offset):
                return
            index = current[ns]
            while not stop.is_set():
                index += 1
                sent = time.monotonic()
                request(cluster.api, "PATCH", path(ns, "quiet"),
                        body={"spec": {"index": index}}, content_type=MERGE)
                answer = time.monotonic()
                with writes_lock:
                    writes.append(((ns, "quiet"), index, sent, answer))
                stop.wait(max(0.0, sent + 1.0 - time.monotonic()))

        def flood_one(i: int) -> None:
            name = f"noisy-{i:05d}"
            body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND,
                    "metadata": {"name": name}, "spec": {"index": 0}}
            request(cluster.api, "POST", path(noisy), body=body)
            request(cluster.api, "PATCH", path(noisy, name), body={"spec": {"index": 1}},
                    content_type=MERGE)

        quiet_threads = [threading.Thread(target=write_quiet, args=(ns, i / len(quiet)),
                                          name=f"quiet-{i}") for i, ns in enumerate(quiet)]
        for thread in quiet_threads:
            thread.start()
        started = time.monotonic()
        with ThreadPoolExecutor(options.noisy_threads, thread_name_prefix="noisy") as pool:
            list(pool.map(flood_one, range(options.noisy)))
        run.written_s = written = time.monotonic() - started
        deadline = time.monotonic() + 600 + 3 * options.noisy * options.reconcile_ms / 1000
        while (done := seen.noisy_done())[0] < options.noisy:
            if time.monotonic() > deadline:
                raise SystemExit(f"{mode}: the noisy updates were not all reconciled")
            time.sleep(0.01)
        run.noisy_s = done[1] - started
        run.flood_reconciles, run.flood_quiet, run.flood_worked_s = seen.window(started,
                                                                                 done[1])
        stop.set()
        for thread in quiet_threads:
            thread.join(30)
        deadline = time.monotonic() + 120
        for key, index, sent, answer in writes:
            while (began := seen.first_seeing(key, index)) is None:
                if time.monotonic() > deadline:
                    raise SystemExit(f"{mode}: quiet change {key} #{index} never reconciled")
                time.sleep(0.01)
            run.waits.append(began - sent)
            run.answered.append(began - answer)
        run.reconciles = seen.reconciles
        run.quiet_reconciles = seen.quiet_reconciles()
        run.busy_s = time.monotonic() - started
        print(f"#   {mode}: {options.noisy} noisy objects written in {written:.1f}s "
              f"({2 * options.noisy / written:.0f} writes/s); {len(writes)} quiet changes; "
              f"{run.reconciles} reconciles in all ({run.quiet_reconciles} of quiet "
              f"objects), {run.reconciles / run.busy_s:.1f} a second", flush=True)
        return run
    finally:
        stop.set()
        operator.stop(10)
        request(cluster.api, "DELETE", path(noisy))  # the collection
        deadline = time.monotonic() + 300
        while cluster.api.request("GET", path(noisy), query={"limit": 1})["items"]:
            if time.monotonic() > deadline:
                raise SystemExit("the noisy objects were not deleted within 300 s")
            time.sleep(0.5)


def percentile(values: Sequence[float], p: float) -> float:
    """The `p` percentile (0-100) of `values`, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))]


@contextlib.contextmanager
def plane(kubeconfig: str | None) -> Iterator[str]:
    """The given kubeconfig, or a local control plane of our own for the duration."""
    if kubeconfig:
        yield kubeconfig
        return
    import tempfile

    from operator_kit.localcluster import LocalCluster

    with tempfile.TemporaryDirectory(prefix="fairness-bench-") as tmp:
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
    print(f"# noisy={options.noisy} quiet_flows={options.quiet_flows} rounds={options.rounds} "
          f"workers={options.workers} reconcile_ms={options.reconcile_ms:g}", flush=True)
    logging.basicConfig(level=logging.WARNING, format="%(threadName)s %(name)s: %(message)s")
    # more writer threads than the client's pool keeps: the extra connections are closed
    # after their request, which urllib3 warns about on every one
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
    runs: list[Run] = []
    with plane(options.kubeconfig) as kubeconfig:
        cluster = TestCluster(kubeconfig)
        kind = fair_kind()
        cluster.install_crd(kind)
        namespaces = [cluster.namespace("fairness-noisy")]
        try:
            quiet = []
            for _ in range(options.quiet_flows):
                ns = cluster.namespace("fairness-quiet")
                namespaces.append(ns)
                quiet.append(ns.name)
                request(cluster.api, "POST", path(ns.name), body={
                    "apiVersion": f"{GROUP}/{VERSION}", "kind": KIND,
                    "metadata": {"name": "quiet"}, "spec": {"index": 0}})
            print(f"{'':>37} {'':>6} {'while the flood lasted:':^39}\n"
                  f"{'mode':>4} {'round':>5} {'quiet p50 ms':>12} {'quiet p99 ms':>12} "
                  f"{'noisy s':>8} {'reconciles (quiet)':>19} {'reconciles/s':>12} "
                  f"{'busy':>5}", flush=True)
            for round_ in range(options.rounds):
                for mode in (MODES if round_ % 2 == 0 else MODES[::-1]):
                    run = run_mode(cluster, kind, namespaces[0].name, quiet, mode, round_,
                                   options)
                    runs.append(run)
                    print(f"{mode:>4} {round_:>5} {percentile(run.waits, 50) * 1000:>12.0f} "
                          f"{percentile(run.waits, 99) * 1000:>12.0f} {run.noisy_s:>8.1f} "
                          f"{f'{run.flood_reconciles} ({run.flood_quiet})':>19} "
                          f"{run.flood_rate:>12.1f} "
                          f"{run.busy_share(options.workers):>5.0%}", flush=True)
        finally:
            for ns in namespaces:
                with contextlib.suppress(Exception):
                    ns.delete()
    summary(runs, options)
    return 0


def summary(runs: Sequence[Run], options: argparse.Namespace) -> None:
    """Per mode over every round: the quiet waits, the noisy time and what the workers did
    while the flood lasted; where the noisy tenant's extra time went; the last line."""
    waits = {m: [w for r in runs if r.mode == m for w in r.waits] for m in MODES}

    def median(mode: str, figure: Callable[[Run], float]) -> float:
        return statistics.median(figure(r) for r in runs if r.mode == mode)

    noisy = {m: median(m, lambda r: r.noisy_s) for m in MODES}
    rate = {m: median(m, lambda r: r.flood_rate) for m in MODES}
    quiet = {m: median(m, lambda r: r.flood_quiet) for m in MODES}
    own = {m: median(m, lambda r: r.flood_reconciles - r.flood_quiet) for m in MODES}
    print()
    for mode in MODES:
        print(f"{mode}: {len(waits[mode])} quiet changes over {options.rounds} rounds: p50 "
              f"{percentile(waits[mode], 50) * 1000:.0f} ms, p99 "
              f"{percentile(waits[mode], 99) * 1000:.0f} ms, max "
              f"{max(waits[mode]) * 1000:.0f} ms; noisy tenant (median) {noisy[mode]:.1f}s; "
              f"while the flood lasted (medians) {own[mode]:.0f} reconciles of its objects "
              f"and {quiet[mode]:.0f} of quiet ones, {rate[mode]:.1f} a second, the workers "
              f"busy {median(mode, lambda r: r.busy_share(options.workers)):.0%}",
              flush=True)
    for mode in MODES:
        after = [a for r in runs if r.mode == mode for a in r.answered]
        print(f"{mode}: the quiet waits from the PATCH's answer (the queue and the watch's "
              f"delivery, not the API server's write): p50 {percentile(after, 50) * 1000:.0f} "
              f"ms, p99 {percentile(after, 99) * 1000:.0f} ms, or "
              f"{percentile(after, 99) / (options.reconcile_ms / 1000):.1f} reconcile times",
              flush=True)
    print(f"throughput while the flood lasted fair/fifo {rate['fair'] / rate['fifo']:.3f}x "
          f"({rate['fair']:.1f} and {rate['fifo']:.1f} reconciles a second)", flush=True)
    more = quiet["fair"] - quiet["fifo"]
    extra = more / rate["fair"]  # the seconds those took, at the fair mode's throughput
    gap = noisy["fair"] - noisy["fifo"]
    own_s = {m: own[m] / rate[m] for m in MODES}
    print(f"noisy time fair/fifo {noisy['fair'] / noisy['fifo']:.3f}x (+{gap:.1f}s): fair "
          f"reconciled {more:.0f} more quiet changes while the flood lasted, {extra:.1f}s at "
          f"its throughput; without them {(noisy['fair'] - extra) / noisy['fifo']:.3f}x. The "
          f"flood's own reconciles at each mode's throughput: fair {own_s['fair']:.1f}s, "
          f"fifo {own_s['fifo']:.1f}s ({own_s['fair'] / own_s['fifo']:.3f}x)", flush=True)
    for mode in MODES:
        busy = median(mode, lambda r: r.busy_share(options.workers))
        if busy < 0.9:
            print(f"no flood formed in {mode} (the workers {busy:.0%} busy while the noisy "
                  f"tenant wrote): its writes, not the workers, were the limit; the "
                  f"prediction below assumes a flood. Use fewer --workers or a longer "
                  f"--reconcile-ms", flush=True)
    share = options.quiet_flows / rate["fifo"]
    print(f"the quiet flows' demand, {options.quiet_flows} reconciles a second, is "
          f"{share:.0%} of the workers' {rate['fifo']:.1f}: fairness serving it during the "
          f"flood predicts noisy fair/fifo 1/(1 - {share:.2f}) = {1 / (1 - share):.3f}x; "
          f"quiet p99 fifo/fair "
          f"{percentile(waits['fifo'], 99) / percentile(waits['fair'], 99):.0f}x", flush=True)
    print(f"fairness: noisy={options.noisy} quiet_flows={options.quiet_flows} "
          f"quiet_p99_ms={percentile(waits['fair'], 99) * 1000:.0f} "
          f"fifo_quiet_p99_ms={percentile(waits['fifo'], 99) * 1000:.0f} "
          f"noisy_s={noisy['fair']:.1f} fifo_noisy_s={noisy['fifo']:.1f}", flush=True)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--kubeconfig", help="use this cluster instead of a local plane")
    parser.add_argument("--noisy", type=int, default=5000,
                        help="objects the noisy tenant creates and updates (5000)")
    parser.add_argument("--quiet-flows", type=int, default=10,
                        help="quiet namespaces, each changing one object a second (10)")
    parser.add_argument("--rounds", type=int, default=3, help="runs per mode (3)")
    parser.add_argument("--workers", type=int, default=6,
                        help="reconcile workers (6: with 50 ms, about 117 reconciles a "
                        "second, the quiet flows' 10 under a tenth of it; 2 on a loaded "
                        "machine, where the flood's writes do not outrun 6)")
    parser.add_argument("--reconcile-ms", type=float, default=50.0,
                        help="milliseconds each reconcile takes (50: fewer reconciles a "
                        "second than the noisy writes, so its keys pile up)")
    parser.add_argument("--noisy-threads", type=int, default=32,
                        help="threads writing the noisy objects (32)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    return bench(parse(argv))


if __name__ == "__main__":
    sys.exit(main())
