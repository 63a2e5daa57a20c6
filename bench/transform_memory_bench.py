"""Cache transform benchmark: the memory an informer's cache takes, with and without a
transform that drops the fields an operator never reads, side by side in one run.

Usage::

    python bench/transform_memory_bench.py                     # 5,000 ConfigMaps of 4 KiB
    python bench/transform_memory_bench.py --objects 500 --rounds 1   # a quick smoke run
    python bench/transform_memory_bench.py --kubeconfig K      # use this cluster

Method
------
Unless ``--kubeconfig`` is given, the script starts its own local control plane in a
temporary folder. It server-side applies ``--objects`` ConfigMaps into the namespace
``transform-bench``, each with ``--bytes`` of ``data`` and three labels (so each also
carries the ``managedFields`` entry the apply leaves). Then each contender, in a process
of its own (this script's hidden ``--worker`` mode, so its memory is its own), fills one
`Informer` of those ConfigMaps, stops its watch once synced (the cache stays), collects
garbage, and reports what the cache costs:

``whole``
    ``default_transform=None``: objects cached as the API server sends them;
``default``
    the default transform, ``drop_managed_fields`` (what every informer does unless told
    otherwise);
``drop-data``
    the default, then ``drop_fields("data", "binaryData")`` as the kind's transform
    (``Owns("v1/ConfigMap", transform=...)`` caches this way) — for an operator that
    only needs to know which ConfigMaps exist and their labels.

Figures: the Python heap the cache holds (``tracemalloc``: memory allocated between the
informer's start and the end, with the watch stopped and garbage collected — what the
cached objects and the store's indexes hold) and the process's resident memory growth
(``VmRSS`` after minus before; coarser: the allocator keeps freed pages), per object and
in total; medians over ``--rounds`` (contenders alternate order), and each contender's
ratio to ``default``.

Last line: ``transform_memory: objects=<n> bytes=<b> default_mb=<x> drop_data_mb=<x>
ratio=<drop-data/default> whole_mb=<x>`` (tracemalloc medians).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

NAMESPACE = "transform-bench"
CONTENDERS = ("whole", "default", "drop-data")


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise LookupError("no VmRSS")


def worker(kubeconfig: str, contender: str, count: int) -> dict[str, Any]:
    """One contender: fill an informer, measure what its cache holds."""
    from operator_kit.client.transport import Api, Resource, api_client
    from operator_kit.runtime.transforms import drop_fields
    from operator_kit.runtime.watching import Informers

    api = Api(api_client(kubeconfig))
    resource = Resource("", "v1", "configmaps", "ConfigMap", True)
    api.request("GET", resource.path(NAMESPACE), query={"limit": 1})  # connect, warm up
    stop = threading.Event()
    options: dict[str, Any] = {"default_transform": None} if contender == "whole" else {}
    informers = Informers(api, stop, **options)
    transform = drop_fields("data", "binaryData") if contender == "drop-data" else None
    gc.collect()
    rss_before = rss_kib()
    tracemalloc.start()
    informer = informers.informer(resource, namespace=NAMESPACE, transform=transform)
    informer.start()
    if not informer.synced.wait(600):
        raise RuntimeError("not synced within 600s")
    stop.set()
    informer.interrupt()
    informer.join(10)
    gc.collect()
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    cached = len(informer)
    sample = informer.objects()[0]
    result = {"contender": contender, "objects": cached, "heap_mb": held / 2**20,
              "rss_mb": (rss_kib() - rss_before) / 1024,
              "sample_bytes": len(json.dumps(sample)),
              "has_data": "data" in sample,
              "has_managed_fields": "managedFields" in sample["metadata"]}
    del informer, informers
    return result


def fill(kubeconfig: str, count: int, size: int) -> None:
    from operator_kit.client.transport import Api, api_client

    api = Api(api_client(kubeconfig))
    if api.get_or_none(f"/api/v1/namespaces/{NAMESPACE}") is None:
        api.request("POST", "/api/v1/namespaces", body={"metadata": {"name": NAMESPACE}})
    payload = "x" * size
    started = time.monotonic()

    def apply(i: int) -> None:
        api.apply({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": f"cm-{i:06d}", "namespace": NAMESPACE,
                                "labels": {"app": "bench", "tier": "cache",
                                           "index": str(i)}},
                   "data": {"payload": payload}}, field_manager="transform-bench")

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(apply, range(count)))
    print(f"applied {count} ConfigMaps in {time.monotonic() - started:.0f}s", file=sys.stderr)


@contextlib.contextmanager
def cluster(kubeconfig: str | None) -> Iterator[str]:
    if kubeconfig:
        yield kubeconfig
        return
    from operator_kit.localcluster import LocalCluster

    with tempfile.TemporaryDirectory(prefix="transform-bench-") as folder:
        plane = LocalCluster(Path(folder) / "plane")
        try:
            yield str(plane.up())
        finally:
            plane.down()


def run_worker(kubeconfig: str, contender: str, count: int) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--worker", contender, "--kubeconfig",
                          kubeconfig, "--objects", str(count)], capture_output=True,
                         text=True, check=True)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=5000)
    parser.add_argument("--bytes", type=int, default=4096, help="data per ConfigMap")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kubeconfig", help="use this cluster instead of a local plane")
    parser.add_argument("--worker", choices=CONTENDERS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.kubeconfig, args.worker, args.objects)))
        return
    with cluster(args.kubeconfig) as kubeconfig:
        fill(kubeconfig, args.objects, args.bytes)
        results: list[dict[str, Any]] = []
        for round_ in range(args.rounds):
            order = CONTENDERS if round_ % 2 == 0 else tuple(reversed(CONTENDERS))
            for contender in order:
                result = run_worker(kubeconfig, contender, args.objects)
                if result["objects"] != args.objects:
                    raise RuntimeError(f"{contender} cached {result['objects']} objects")
                print(f"round {round_ + 1} {contender}: {result['heap_mb']:.1f} MB heap",
                      file=sys.stderr)
                results.append(result)
        from operator_kit.client.transport import Api, api_client

        Api(api_client(kubeconfig)).request("DELETE", f"/api/v1/namespaces/{NAMESPACE}")
    print(f"\n{args.objects} ConfigMaps, {args.bytes} B of data each, applied (managedFields "
          f"present); {args.rounds} round(s), medians")
    print(f"{'contender':<10} {'heap MB':>8} {'KiB/object':>10} {'RSS +MB':>8} "
          f"{'object JSON B':>13} {'data':>5} {'managedFields':>13} {'heap / default':>14}")
    medians: dict[str, float] = {}
    for contender in CONTENDERS:
        mine = [r for r in results if r["contender"] == contender]
        medians[contender] = statistics.median(r["heap_mb"] for r in mine)
    for contender in CONTENDERS:
        mine = [r for r in results if r["contender"] == contender]
        heap, rss = medians[contender], statistics.median(r["rss_mb"] for r in mine)
        print(f"{contender:<10} {heap:>8.1f} {heap * 1024 / args.objects:>10.2f} {rss:>8.1f} "
              f"{mine[0]['sample_bytes']:>13} {mine[0]['has_data']!s:>5} "
              f"{mine[0]['has_managed_fields']!s:>13} "
              f"{heap / medians['default']:>13.2f}x")
    print(f"transform_memory: objects={args.objects} bytes={args.bytes} "
          f"default_mb={medians['default']:.1f} drop_data_mb={medians['drop-data']:.1f} "
          f"ratio={medians['drop-data'] / medians['default']:.2f} "
          f"whole_mb={medians['whole']:.1f}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    main()
