"""Initial sync benchmark: what filling an informer's cache costs the API server, LIST
against a streaming list (``sendInitialEvents=true``), side by side in one run.

Usage::

    python bench/initial_sync_bench.py                        # 20,000 ConfigMaps, 3 rounds
    python bench/initial_sync_bench.py --objects 2000 --rounds 1   # a quick smoke run
    python bench/initial_sync_bench.py --plane DIR            # the local plane in DIR

Method
------
The script uses the local control plane in ``--plane`` (started there if none runs;
default: a temporary folder, stopped at the end): it must read the API server's and
etcd's ``/proc`` entries, so it needs a plane of its own, not any cluster. It fills the
namespace ``initial-sync-bench`` with ``--objects`` ConfigMaps of ``--bytes`` of data each
(a later run with the same count reuses them, with ``--keep``). Then, each round,
each contender fills one `Informer` of ConfigMaps in that namespace from scratch, in this
process, and stops it once synced:

``list``
    ``streaming=False``: a LIST in pages of 500 (``limit``/``continue``), then a watch
    from its resourceVersion — what the informer did before streaming lists;
``streaming``
    the default: one watch with ``sendInitialEvents=true``,
    ``resourceVersionMatch=NotOlderThan``, ``allowWatchBookmarks=true``, synced at the
    bookmark annotated ``k8s.io/initial-events-end``;
``list-unpaged``
    for reference: the informer with ``page_size=0``, one LIST of everything at once —
    the response the API server must build in memory whole, as for a client that does
    not page (client-go's first list, ``resourceVersion=0`` from the watch cache, is
    one such).

Per contender and round it records, for kube-apiserver and etcd: the CPU seconds
(utime + stime from ``/proc/<pid>/stat``) from the informer's start until it synced, and
the peak resident memory while it synced — the kernel's high-water mark (``VmHWM``),
reset just before the start by writing ``5`` to ``/proc/<pid>/clear_refs`` — as the peak
over the RSS at the start (``peak +MB``) and in absolute terms; and, on the client side,
the seconds until synced and this process's CPU seconds. Contenders alternate their order
between rounds, with ``--settle`` seconds of rest before each (Go returns freed memory to
the kernel lazily, so a contender's peak may be lower right after the other's). The
summary gives each figure's median over rounds and the streaming/list ratio of the
medians (and, for reference, streaming over the unpaged LIST). The machine is shared:
compare the contenders within one run.

The last line: ``initial_sync: objects=<n> apiserver_cpu_ratio=<x.xx>
apiserver_peak_ratio=<x.xx> etcd_cpu_ratio=<x.xx> sync_s_ratio=<x.xx>`` (streaming/list,
of medians; below 1 means streaming costs less).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from operator_kit.client.transport import Api, Resource, api_client
from operator_kit.localcluster import LocalCluster
from operator_kit.runtime.watching import Informers

NAMESPACE = "initial-sync-bench"
CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap", True)
CONTENDERS = ("list", "streaming", "list-unpaged")
PROCESSES = ("kube-apiserver", "etcd")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise LookupError(f"/proc/{pid}/status has no {field}")


def reset_peak(pid: int) -> None:
    """Reset the process's peak RSS (VmHWM) to its current RSS (Linux 4.0+)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


@dataclass
class Trial:
    contender: str
    sync_s: float
    client_cpu_s: float
    cpu_s: dict[str, float]
    rss_start_mb: dict[str, float]
    peak_mb: dict[str, float]

    def peak_growth_mb(self, process: str) -> float:
        return self.peak_mb[process] - self.rss_start_mb[process]


def fill(api: Api, count: int, size: int) -> None:
    """`count` ConfigMaps of `size` bytes of data in NAMESPACE (reusing what is there)."""
    if api.get_or_none(f"/api/v1/namespaces/{NAMESPACE}") is None:
        api.request("POST", "/api/v1/namespaces", body={"metadata": {"name": NAMESPACE}})
    page = api.request("GET", CONFIG_MAPS.path(NAMESPACE), query={"limit": 1})
    have = len(page.get("items") or ()) + int(page["metadata"].get("remainingItemCount") or 0)
    if have == count:
        print(f"reusing {count} ConfigMaps in {NAMESPACE}", file=sys.stderr)
        return
    if have:
        api.request("DELETE", CONFIG_MAPS.path(NAMESPACE))  # deletecollection
        while api.request("GET", CONFIG_MAPS.path(NAMESPACE), query={"limit": 1})["items"]:
            time.sleep(1)
    payload = "x" * size
    started = time.monotonic()

    def create(i: int) -> None:
        api.request("POST", CONFIG_MAPS.path(NAMESPACE),
                    body={"metadata": {"name": f"cm-{i:06d}", "labels": {"bench": "sync"}},
                          "data": {"payload": payload}}, decode=False)

    with ThreadPoolExecutor(8) as pool:
        for done, _ in enumerate(pool.map(create, range(count)), 1):
            if done % 5000 == 0:
                print(f"  created {done}/{count}", file=sys.stderr)
    print(f"created {count} ConfigMaps in {time.monotonic() - started:.0f}s", file=sys.stderr)


def trial(api: Api, pids: dict[str, int], contender: str, count: int) -> Trial:
    stop = threading.Event()
    informer = Informers(api, stop, streaming=contender == "streaming").informer(
        CONFIG_MAPS, namespace=NAMESPACE)
    if contender == "list-unpaged":
        informer.page_size = 0  # limit=0: no limit
    rss_start = {}
    for name, pid in pids.items():
        reset_peak(pid)
        rss_start[name] = status_kib(pid, "VmRSS") / 1024
    cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    client_before = time.process_time()
    started = time.monotonic()
    informer.start()
    try:
        if not informer.synced.wait(600):
            raise RuntimeError(f"{contender}: not synced within 600s")
        sync_s = time.monotonic() - started
        client_cpu = time.process_time() - client_before
        cpu = {name: cpu_seconds(pid) - cpu_before[name] for name, pid in pids.items()}
        peak = {name: status_kib(pid, "VmHWM") / 1024 for name, pid in pids.items()}
    finally:
        stop.set()
        informer.interrupt()
        informer.join(10)
    if len(informer) != count or informer.initial_list != contender.split("-")[0]:
        raise RuntimeError(f"{contender}: cached {len(informer)} of {count} objects by "
                           f"{informer.initial_list}")
    return Trial(contender, sync_s, client_cpu, cpu, rss_start, peak)


@contextlib.contextmanager
def plane_in(folder: str | None) -> Iterator[LocalCluster]:
    with tempfile.TemporaryDirectory(prefix="initial-sync-bench-") as temporary:
        plane = LocalCluster(folder or Path(temporary) / "plane")
        started = time.monotonic()
        plane.up()
        print(f"local control plane up in {time.monotonic() - started:.0f}s ({plane.dir})",
              file=sys.stderr)
        try:
            yield plane
        finally:
            if folder is None:
                plane.down()


def ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def report(trials: list[Trial], count: int, size: int) -> None:
    print(f"\ninitial sync of {count} ConfigMaps ({size} B of data each), informer in "
          "this process; API server and etcd figures from /proc")
    header = (f"{'contender':<10} {'round':>5} {'sync s':>7} {'client CPU s':>12} "
              f"{'apiserver CPU s':>15} {'apiserver peak MB':>17} {'peak +MB':>8} "
              f"{'etcd CPU s':>10} {'etcd peak +MB':>13}")
    print(header)
    rounds: dict[str, int] = {}
    for t in trials:
        rounds[t.contender] = rounds.get(t.contender, 0) + 1
        print(f"{t.contender:<10} {rounds[t.contender]:>5} {t.sync_s:>7.2f} "
              f"{t.client_cpu_s:>12.2f} {t.cpu_s['kube-apiserver']:>15.2f} "
              f"{t.peak_mb['kube-apiserver']:>17.0f} "
              f"{t.peak_growth_mb('kube-apiserver'):>8.0f} {t.cpu_s['etcd']:>10.2f} "
              f"{t.peak_growth_mb('etcd'):>13.0f}")
    figures = {
        "sync_s": lambda t: t.sync_s,
        "client_cpu_s": lambda t: t.client_cpu_s,
        "apiserver_cpu_s": lambda t: t.cpu_s["kube-apiserver"],
        "apiserver_peak_mb": lambda t: t.peak_mb["kube-apiserver"],
        "apiserver_peak_growth_mb": lambda t: t.peak_growth_mb("kube-apiserver"),
        "etcd_cpu_s": lambda t: t.cpu_s["etcd"],
        "etcd_peak_growth_mb": lambda t: t.peak_growth_mb("etcd"),
    }
    medians = {c: {name: statistics.median(f(t) for t in trials if t.contender == c)
                   for name, f in figures.items()} for c in CONTENDERS}
    print(f"\nmedians over rounds {'':>14} {'list':>10} {'streaming':>10} "
          f"{'streaming/list':>15} {'list-unpaged':>13} {'streaming/unpaged':>18}")
    for name in figures:
        a, b, c = (medians[x][name] for x in ("list", "streaming", "list-unpaged"))
        print(f"{name:<34} {a:>10.2f} {b:>10.2f} {ratio(b, a):>14.2f}x {c:>13.2f} "
              f"{ratio(b, c):>17.2f}x")
    m = medians
    print(f"initial_sync: objects={count} "
          f"apiserver_cpu_ratio={ratio(m['streaming']['apiserver_cpu_s'], m['list']['apiserver_cpu_s']):.2f} "  # noqa: E501
          f"apiserver_peak_ratio={ratio(m['streaming']['apiserver_peak_growth_mb'], m['list']['apiserver_peak_growth_mb']):.2f} "  # noqa: E501
          f"etcd_cpu_ratio={ratio(m['streaming']['etcd_cpu_s'], m['list']['etcd_cpu_s']):.2f} "
          f"sync_s_ratio={ratio(m['streaming']['sync_s'], m['list']['sync_s']):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=20_000)
    parser.add_argument("--bytes", type=int, default=1024, help="data per ConfigMap")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--settle", type=float, default=5.0,
                        help="seconds of rest before each trial")
    parser.add_argument("--plane", help="the local plane's folder (default: a temporary one)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the ConfigMaps (default: delete the namespace at the end)")
    args = parser.parse_args()
    with plane_in(args.plane) as plane:
        api = Api(api_client(str(plane.kubeconfig)))
        fill(api, args.objects, args.bytes)
        pids = {name: plane.state.pids[name] for name in PROCESSES}
        trials = []
        for round_ in range(args.rounds):
            order = CONTENDERS if round_ % 2 == 0 else tuple(reversed(CONTENDERS))
            for contender in order:
                time.sleep(args.settle)
                result = trial(api, pids, contender, args.objects)
                print(f"round {round_ + 1} {contender}: synced in {result.sync_s:.1f}s, "
                      f"apiserver {result.cpu_s['kube-apiserver']:.2f} CPU s, peak "
                      f"+{result.peak_growth_mb('kube-apiserver'):.0f} MB", file=sys.stderr)
                trials.append(result)
        if not args.keep:
            api.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}")
    report(trials, args.objects, args.bytes)


if __name__ == "__main__":
    main()
