"""Read-heavy controller benchmark: reads from the cache against the same reads from the API.

Usage::

    python bench/read_bench.py                      # N = 1000 and 5000 primaries
    python bench/read_bench.py --counts 200         # a quick smoke run
    python bench/read_bench.py --kubeconfig K       # use this cluster, start no plane

Method
------
Unless ``--kubeconfig`` is given, the script starts its own local control plane in a
temporary folder. It installs ``ReadItem`` (group ``readbench.operator-kit.test``, with a
status subresource) and, for each N in ``--counts``, fills a fresh namespace with 10
Secrets, N ReadItems (each naming one Secret in ``spec.secret``) and 5 ConfigMaps per
ReadItem (``--children``), each with a controller ownerReference to its ReadItem and
``--child-bytes`` of data. Then each contender runs, in its own process (this script's
hidden ``--worker`` mode, so its memory is its own), an `Operator` whose one controller
reconciles every ReadItem once the same way:

1. read its 5 owned ConfigMaps and the Secret it names;
2. server-side apply its first ConfigMap (unchanged: the same content every time);
3. merge-patch its status, ``{"observed": <generation>, "children": 5}``.

The contenders differ only in where step 1 reads from:

``cache``
    ``owns = ("v1/ConfigMap",)`` and ``watches = (Watch("v1/Secret", ...),)``:
    ``ctx.owned(item, "v1/ConfigMap")`` and ``ctx.get("v1/Secret", name)`` from the
    informers' caches.
``cache-metadata``
    as ``cache`` with ``Owns("v1/ConfigMap", metadata_only=True)``: the children are
    cached as metadata only (their data is never transferred or kept).
``api``
    no owns, no watches: the same reads from the API server, as code without a cache
    does it (a LIST of ConfigMaps by the label ``readbench/owner=<name>``, a GET of
    the Secret).

Each worker counts the requests its reconciles send (by method, from the reconcile
threads) and reports when every ReadItem has been reconciled once: the seconds from the
operator's start (cache sync included) to then, reconciles per second between the first
and the last reconcile (the throughput ratio uses this), requests per reconcile and its
peak RSS (``VmHWM``). The machine is shared by the API server, etcd and
the contender, so compare contenders within one run; ``--rounds`` repeats and the ratio
uses medians.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

GROUP = "readbench.operator-kit.test"
CONTENDERS = ("cache", "cache-metadata", "api")
SECRETS = 10
TARGET_RSS_MB = 200.0


def read_kind() -> Any:
    from dataclasses import dataclass

    from operator_kit import CustomResource

    @dataclass
    class ReadSpec:
        secret: str = ""

    @dataclass
    class ReadStatus:
        observed: int | None = None
        children: int | None = None

    class ReadItem(CustomResource):
        group = GROUP
        version = "v1"
        kind = "ReadItem"
        spec: ReadSpec
        status: ReadStatus

    return ReadItem


# -- the contender ---------------------------------------------------------------------------

def worker(kubeconfig: str, namespace: str, contender: str, count: int, threads: int) -> None:
    from operator_kit import Action, Context, Controller, Operator, Owns, Watch
    from operator_kit.client.transport import api_client
    from operator_kit.runtime.objects import Objects

    ReadItem = read_kind()
    done = threading.Event()
    seen: set[str] = set()
    lock = threading.Lock()
    requests: Counter[str] = Counter()
    reconciles = [0]
    times: list[float] = []
    children_each = int(os.environ["READBENCH_CHILDREN"])
    watched_namespace = namespace

    class Reader(Controller[Any]):
        resource = ReadItem
        namespace = watched_namespace
        max_concurrent_reconciles = threads
        if contender != "api":
            owns = (Owns("v1/ConfigMap", metadata_only=contender == "cache-metadata"),)
            watches = (Watch("v1/Secret", lambda secret, objects: []),)

        def reconcile(self, item: Any, ctx: Context) -> Action:
            if contender == "api":
                api_reads = Objects(ctx.api)
                children = api_reads.list("v1/ConfigMap", item.namespace,
                                          {"readbench/owner": item.name})
                secret = api_reads.get("v1/Secret", item.spec.secret, item.namespace)
            else:
                children = ctx.owned(item, "v1/ConfigMap")
                secret = ctx.get("v1/Secret", item.spec.secret)
            assert len(children) == children_each and secret is not None
            ctx.apply_owned(item, child(item.name, item.namespace, 0, None))
            ctx.patch_status(item, {"observed": item.generation, "children": len(children)})
            with lock:
                times.append(time.monotonic())
                reconciles[0] += 1
                seen.add(item.name)
                if len(seen) == count:
                    done.set()
            return Action.await_change()

    operator = Operator("read-bench", [Reader()], namespace=namespace)
    pool = threads + 8
    operator.use(api_client(kubeconfig, pool_size=pool))
    send = operator.api.request

    def counted(method: str, path: str, **options: Any) -> Any:
        if threading.current_thread().name.startswith("reconcile-"):
            with lock:
                requests[method] += 1
        return send(method, path, **options)

    operator.api.request = counted  # type: ignore[method-assign]
    started = time.monotonic()
    operator.start()
    finished = done.wait(1800)
    elapsed = time.monotonic() - started
    operator.stop(timeout=10)
    window = (times[-1] - times[0]) if len(times) > 1 else float("nan")
    print(json.dumps({"ok": finished, "seconds": elapsed, "window": window,
                      "reconciles": reconciles[0],
                      "requests": dict(requests), "rss_mb": _peak_rss_mb(os.getpid())}),
          flush=True)


def child(owner: str, namespace: str, index: int, owner_ref: dict[str, Any] | None
          ) -> dict[str, Any]:
    size = int(os.environ.get("READBENCH_CHILD_BYTES", "0"))
    meta: dict[str, Any] = {"name": f"{owner}-{index}", "namespace": namespace,
                            "labels": {"readbench/owner": owner}}
    if owner_ref is not None:
        meta["ownerReferences"] = [owner_ref]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
            "data": {"owner": owner, "payload": "x" * size}}


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# -- the run ---------------------------------------------------------------------------------

def fill(api: Any, namespace: str, count: int, children: int, threads: int) -> None:
    """Secrets, ReadItems and their children, as fast as the API server takes them."""
    ReadItem = read_kind()
    base = f"/apis/{GROUP}/v1/namespaces/{namespace}/readitems"
    for i in range(SECRETS):
        api.request("POST", f"/api/v1/namespaces/{namespace}/secrets", body={
            "metadata": {"name": f"secret-{i}"}, "stringData": {"key": str(i)}})

    def make(i: int) -> None:
        name = f"item-{i:05}"
        body = ReadItem(name, ReadItem.spec_type()(secret=f"secret-{i % SECRETS}"),
                        namespace=namespace).to_dict()
        created = api.request("POST", base, body=body)
        ref = {"apiVersion": f"{GROUP}/v1", "kind": "ReadItem", "name": name,
               "uid": created["metadata"]["uid"], "controller": True,
               "blockOwnerDeletion": True}
        for c in range(children):
            api.request("POST", f"/api/v1/namespaces/{namespace}/configmaps",
                        body=child(name, namespace, c, ref))

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(make, range(count)))


@contextlib.contextmanager
def cluster(kubeconfig: str | None, workdir: Path) -> Iterator[str]:
    if kubeconfig:
        yield kubeconfig
        return
    from operator_kit.localcluster import LocalCluster

    plane = LocalCluster(workdir / "plane")
    try:
        yield str(plane.up())
    finally:
        plane.down()


def run(options: argparse.Namespace) -> int:
    from operator_kit.client.transport import Api, api_client
    from operator_kit.testing import TestCluster

    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="read-bench-") as tmp, \
            cluster(options.kubeconfig, Path(tmp)) as kubeconfig:
        test_cluster = TestCluster(kubeconfig)
        test_cluster.install_crd(read_kind())
        api = Api(api_client(kubeconfig, pool_size=options.create_threads + 4))
        env = {**os.environ, "READBENCH_CHILDREN": str(options.children),
               "READBENCH_CHILD_BYTES": str(options.child_bytes)}
        os.environ.update({k: env[k] for k in ("READBENCH_CHILDREN", "READBENCH_CHILD_BYTES")})
        for count in options.counts:
            for round_ in range(options.rounds):
                namespace = test_cluster.namespace(f"read-bench-{count}")
                started = time.monotonic()
                fill(api, namespace.name, count, options.children, options.create_threads)
                print(f"# N={count} round {round_ + 1}: filled {count} items + "
                      f"{count * options.children} children in "
                      f"{time.monotonic() - started:.0f}s", flush=True)
                order = CONTENDERS if round_ % 2 == 0 else CONTENDERS[::-1]
                for contender in order:
                    if contender not in options.contenders:
                        continue
                    out = subprocess.run(
                        [sys.executable, __file__, "--worker", kubeconfig, namespace.name,
                         contender, str(count), str(options.threads)],
                        capture_output=True, text=True, env=env, check=False)
                    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
                    if out.returncode != 0 or not lines:
                        print(out.stderr[-3000:], file=sys.stderr)
                        return 1
                    result = json.loads(lines[-1])
                    result.update(contender=contender, count=count)
                    results.append(result)
                    _print(result)
                namespace.delete(wait=False)
    _summary(results, options)
    return 0


def _print(r: dict[str, Any]) -> None:
    per = r["reconciles"] or 1
    requests = r["requests"]
    reads = requests.get("GET", 0)
    writes = sum(v for k, v in requests.items() if k != "GET")
    print(f"{r['contender']:>15} N={r['count']:<5} {r['seconds']:7.1f}s from start, "
          f"{r['reconciles'] / r['window']:7.1f} rec/s  reads/rec {reads / per:5.2f}  "
          f"writes/rec {writes / per:5.2f}  RSS {r['rss_mb']:6.1f} MB"
          + ("" if r["ok"] else "  (DID NOT FINISH)"), flush=True)


def _summary(results: list[dict[str, Any]], options: argparse.Namespace) -> None:
    for count in options.counts:
        def median(contender: str, key: str, count: int = count) -> float:
            values = [r[key] if key != "rate" else r["reconciles"] / r["window"]
                      for r in results if r["contender"] == contender and r["count"] == count]
            return statistics.median(values) if values else float("nan")

        ratio = median("cache", "rate") / median("api", "rate")
        print(f"N={count}: cache/api throughput x{ratio:.2f}; peak RSS cache "
              f"{median('cache', 'rss_mb'):.0f} MB, cache-metadata "
              f"{median('cache-metadata', 'rss_mb'):.0f} MB, api "
              f"{median('api', 'rss_mb'):.0f} MB (target <= {TARGET_RSS_MB:.0f} MB at 5,000)")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "--worker":
        kubeconfig, namespace, contender, count, threads = args[1:6]
        worker(kubeconfig, namespace, contender, int(count), int(threads))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", help="a cluster to use (default: start a plane)")
    parser.add_argument("--counts", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--children", type=int, default=5)
    parser.add_argument("--child-bytes", type=int, default=512)
    parser.add_argument("--threads", type=int, default=4, help="reconcile workers")
    parser.add_argument("--create-threads", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    options = parser.parse_args(args)
    options.contenders = options.contenders.split(",")
    return run(options)


if __name__ == "__main__":
    sys.exit(main())
