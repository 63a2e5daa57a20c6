"""Controller benchmark: operator_kit against a plain `kubernetes`-client loop, same run.

Usage::

    python bench/controller_bench.py                  # N = 1000 and 5000, T = 8 threads
    python bench/controller_bench.py --counts 200 --rounds 1   # a quick smoke run
    python bench/controller_bench.py --kubeconfig K   # use this cluster, start no plane
    python bench/controller_bench.py --counts 1000 --instructions \
        --contenders baseline+owns,operator_kit+owns+skip  # instructions, not CPU seconds
    python bench/controller_bench.py --profile DIR    # each worker's yappi profile

Method
------
Unless ``--kubeconfig`` is given, the script starts its own local control plane
(`operator_kit.localcluster.LocalCluster`) in a temporary folder and stops it at the end.
It installs a small custom resource, ``BenchItem`` (group ``bench.operator-kit.test``,
with a status subresource), and then, for each N in ``--counts`` and each contender, in a
fresh namespace:

1. starts the **contender** in its own process (this script, hidden ``--worker`` mode),
   so its memory and CPU are measured alone, and waits until it has listed and watches;
2. starts a **watch** (in this process) on the namespace's BenchItems that records when
   each object's ``status.observed`` first appears;
3. starts the **creator** process, which POSTs the N objects at once from a pool of
   ``--create-threads`` threads, as fast as the API server takes them, and reports the
   monotonic time (system-wide on Linux, so comparable across processes) just before
   each POST;
4. waits until every object has its status, then measures the contender's CPU for
   ``--idle-seconds`` more (the idle cost), reads its peak RSS (``VmHWM``), stops it,
   deletes the namespace and waits until it is gone.

Each contender reconciles an object the same way: a server-side apply of one ConfigMap
with a controller ownerReference to the object, then a merge patch of the status
subresource, ``{"status": {"observed": <generation>}}``, with ``--threads`` workers:

``operator_kit``
    a `Controller` with ``max_concurrent_reconciles = T`` run by an `Operator`, using
    ``ctx.apply_owned`` and ``ctx.patch_status``.
``baseline``
    no operator_kit at all: list, then ``kubernetes.watch.Watch`` on
    ``CustomObjectsApi.list_namespaced_custom_object``, a de-duplicating `queue.Queue`
    and T threads calling ``CoreV1Api.patch_namespaced_config_map`` (server-side apply)
    and ``CustomObjectsApi.patch_namespaced_custom_object_status``. It skips objects whose
    status already shows their generation, so its own status patch does not loop.
``operator_kit@before`` (added by ``--before DIR``)
    as operator_kit, but its worker imports operator_kit from DIR (``PYTHONPATH``), e.g.
    ``git archive main operator_kit | tar -x -C DIR``: before and after a change, side
    by side with the baseline in one run. The worker reports where its operator_kit came
    from, and the run fails if it was not DIR.
``operator_kit+owns`` (only when named in ``--contenders``)
    as operator_kit, but the controller also declares ``owns = ("v1/ConfigMap",)``, as
    a real operator would: it then watches ConfigMaps too, and each child's creation
    reconciles its owner once more.
``operator_kit+owns+skip`` (only when named in ``--contenders``)
    as operator_kit+owns, with ``skip_own_echoes = True``: the echo of its own apply does
    not reconcile the owner again, so it makes the baseline's two requests per object
    (the child is read from the cache) and one reconcile.
``baseline+owns`` (only when named in ``--contenders``)
    the baseline written as operator_kit+owns+skip works: it also lists and watches the
    namespace's ConfigMaps into a dict (``kubernetes.watch.Watch``, as dicts) and, before
    each apply, leaves alone a child that another owner controls. Its ConfigMap events
    queue nothing. operator_kit+owns+skip against it is the framework's own cost, like for
    like; against the plain baseline it includes the child watch, which a real operator
    pays and the plain baseline does not.

Before the measured runs each contender reconciles ``--warmup`` objects unreported (a
fresh API server is markedly slower at first). The order of the contenders alternates
from one N (and round) to the next, so neither always runs on the warmer server. Every
run is repeated ``--rounds`` times (default 2) and the throughput ratio uses the medians:
on a small shared machine one run of either contender can be 20-30 % off the next.

Figures per run:

- **conv/s**: N / (last status observed - first create sent);
- **p50/p99**: milliseconds from an object's create to its status being observed (with
  all N created at once this is mostly time spent waiting in the contender's queue);
- **RSS MB**: the contender process's peak resident memory (``VmHWM``);
- **CPU s**: the contender's CPU seconds from the first create to convergence;
- **sys %**: the share of those CPU seconds spent in the kernel (system calls,
  context switches), which ``--instructions`` does not count;
- **CPU s/1k**: the same per 1,000 objects; the summary gives each contender's median
  over the rounds and operator_kit's ratio to the baseline (the goal: at most 1.00x) and
  to ``operator_kit@before``;
- **server CPU s**: the same for our plane's etcd + kube-apiserver (only when the
  script started the plane): where the rest of the machine went;
- **idle CPU %**: the contender's CPU seconds / wall seconds over the idle window, as a
  percentage of one core;
- **create/s**: how fast the creator got the objects in (an upper bound on conv/s);
- **reconciles**: reconcile calls the contender made (N when nothing is repeated);
- **Minstr/1k** (only with ``--instructions``): millions of instructions the contender
  executed from the first create to convergence, per 1,000 objects.

CPU seconds on a small shared machine scatter by tens of percent from run to run, more
than the difference being measured. ``--instructions`` runs each contender under
valgrind's callgrind with instrumentation off, switches it on (``callgrind_control -i
on``) just before the creator starts and off at convergence, and reads the instructions
counted in between: the same work counts the same whatever else the machine does (two
runs of one Python program differ by under 1 %). The contenders then run about 60 times
slower, so the API server is idle by comparison and events arrive in larger batches than
they would; both contenders get the same treatment, and the instruction ratio is the
like-for-like figure. It does not count time spent waiting, nor what the kernel does.

The baseline uses the client as a plain script would: the ConfigMap apply returns a
deserialised ``V1ConfigMap``, the status patch a dict. Everything shares the machine (the
API server, etcd, the creator, this process's watch), so absolute figures move with it
and from run to run; compare the two contenders within one run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import selectors
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kubernetes import client as k8s

    from operator_kit.api.resources import CustomResource
    from operator_kit.client.transport import Api

GROUP = "bench.operator-kit.test"
VERSION = "v1"
KIND = "BenchItem"
PLURAL = "benchitems"
OWNS = "operator_kit+owns"
OWNS_SKIP = "operator_kit+owns+skip"
BASELINE_OWNS = "baseline+owns"
BEFORE = "operator_kit@before"
CONTENDERS = ("operator_kit", "baseline", OWNS, OWNS_SKIP, BASELINE_OWNS, BEFORE)
TREE_PREFIX = "operator_kit@"  # a contender run with another tree's operator_kit
FIELD_MANAGER = "controller-bench"
TARGET_RATIO = 0.8
TARGET_RSS_MB = 150.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PROFILE_ENV = "CONTROLLER_BENCH_PROFILE"  # set for a worker: where its yappi stats go


# -- what each contender does per object --------------------------------------------------


def config_map_for(
    name: str, namespace: str, index: int, owner: dict[str, Any] | None
) -> dict[str, Any]:
    """The ConfigMap every contender applies for object `name` (owner: its ownerReference)."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
            "data": {"index": str(index), "owner": name}}


def bench_kind() -> type[CustomResource]:
    """The BenchItem kind as an operator_kit CustomResource (imports operator_kit)."""
    from dataclasses import dataclass as plain_dataclass

    from operator_kit import CustomResource

    @plain_dataclass
    class BenchSpec:
        index: int = 0

    @plain_dataclass
    class BenchStatus:
        observed: int | None = None

    class BenchItem(CustomResource):
        group = GROUP
        version = VERSION
        kind = KIND
        plural = PLURAL
        spec: BenchSpec
        status: BenchStatus

    return BenchItem


def _kube_client(kubeconfig: str, pool: int) -> k8s.ApiClient:
    """A plain kubernetes ApiClient with at least `pool` connections (no operator_kit)."""
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize, pool)
    return client.ApiClient(configuration)


def _serve_until_stdin_closes() -> None:
    """Tell the parent we are ready, then wait until it closes our stdin; with
    ``--profile``, every thread is profiled (yappi, CPU clock) meanwhile."""
    profile = os.environ.get(PROFILE_ENV)
    if profile:
        import yappi  # type: ignore[import-not-found,unused-ignore]

        yappi.set_clock_type("cpu")
        yappi.start()
    print("ready", flush=True)
    for _ in sys.stdin:
        pass
    if profile:
        yappi.stop()
        yappi.get_func_stats().save(profile, type="pstat")


def _report(reconciles: int, errors: int, module: str = "") -> None:
    """The worker's last line on stdout: what the parent cannot see from outside (and,
    for operator_kit, which source tree it ran)."""
    print(json.dumps({"reconciles": reconciles, "errors": errors, "module": module}),
          flush=True)


def _thread_report() -> None:
    """Where this worker's CPU went, on stderr (its log): each live thread's CPU seconds
    and voluntary context switches (times it blocked), from /proc, threads of one name
    (digits dropped) summed, busiest first. Read while the threads still run."""
    totals: dict[str, list[float]] = {}
    for thread in threading.enumerate():
        task = Path(f"/proc/self/task/{thread.native_id}")
        try:
            fields = (task / "stat").read_text().rpartition(")")[2].split()
            status = (task / "status").read_text()
        except OSError:
            continue
        switches = next(int(line.split()[1]) for line in status.splitlines()
                        if line.startswith("voluntary_ctxt_switches"))
        name = "".join(c for c in thread.name if not c.isdigit()).rstrip("-_ ")
        row = totals.setdefault(name, [0, 0.0, 0])
        row[0] += 1
        row[1] += (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
        row[2] += switches
    print("threads: name, count, CPU s, voluntary switches", file=sys.stderr)
    for name, (count, cpu, switches) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
        print(f"  {name:<40} {count:>3} {cpu:>8.2f} {switches:>9}", file=sys.stderr)


def worker_operator_kit(kubeconfig: str, namespace: str, threads: int, owns: bool,
                        skip_echoes: bool) -> None:
    """The operator_kit contender: one Controller in an Operator, until stdin closes."""
    import logging

    from prometheus_client import REGISTRY

    from operator_kit import Action, Context, Controller, Operator

    logging.basicConfig(level=logging.WARNING, format="%(threadName)s %(name)s: %(message)s")
    kind = bench_kind()
    calls = _Counter()

    class BenchController(Controller[Any]):
        resource = kind
        max_concurrent_reconciles = threads

        def reconcile(self, obj: Any, ctx: Context) -> Action:
            calls.add()
            ctx.apply_owned(obj, config_map_for(obj.name, obj.namespace, obj.spec.index, None))
            ctx.patch_status(obj, {"observed": obj.generation})
            return Action.await_change()

    controller = BenchController()
    controller.namespace = namespace
    if owns:
        controller.owns = ("v1/ConfigMap",)
        controller.skip_own_echoes = skip_echoes
    operator = Operator(FIELD_MANAGER, [controller], kubeconfig=kubeconfig)
    operator.start()
    if not operator.wait_synced(120):
        raise SystemExit("operator_kit worker: caches did not sync within 120 s")
    try:
        _serve_until_stdin_closes()
        _thread_report()
    finally:
        operator.stop(10)
    errors = sum(s.value for m in REGISTRY.collect()  # with or without a cluster label
                 for s in m.samples if s.name == "operator_kit_controller_reconcile_errors_total"
                 and s.labels.get("controller") == controller.name)
    import operator_kit

    _report(calls.value, int(errors or 0), str(Path(operator_kit.__file__).resolve().parent))


def worker_baseline(kubeconfig: str, namespace: str, threads: int, owns: bool) -> None:
    """The baseline contender: the kubernetes client alone, the same calls, T threads.
    With `owns`, it also watches the namespace's ConfigMaps into a dict and, before each
    apply, leaves alone a child another owner controls (read there, not from the server):
    what operator_kit+owns+skip does, written by hand."""
    from kubernetes import client, watch
    from kubernetes.client.exceptions import ApiException

    api = _kube_client(kubeconfig, threads + 2)
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    calls, errors = _Counter(), _Counter()
    work: queue.Queue[str] = queue.Queue()
    latest: dict[str, dict[str, Any]] = {}
    children: dict[str, dict[str, Any]] = {}  # with `owns`: the ConfigMaps, by name
    lock = threading.Lock()

    def offer(obj: dict[str, Any]) -> None:
        """Queue an object unless its status already shows its generation."""
        meta = obj["metadata"]
        if (obj.get("status") or {}).get("observed") == meta.get("generation"):
            return
        with lock:
            fresh = meta["name"] not in latest
            latest[meta["name"]] = obj
        if fresh:
            work.put(meta["name"])

    def reconcile(obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        owner = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "name": meta["name"],
                 "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}
        body = config_map_for(meta["name"], namespace, obj["spec"].get("index", 0), owner)
        child = children.get(meta["name"]) if owns else None
        if child is not None and any(
                ref.get("controller") and ref.get("uid") != meta["uid"]
                for ref in child["metadata"].get("ownerReferences") or ()):
            errors.add()  # another owner's child: not taken over
            return
        core.patch_namespaced_config_map(
            meta["name"], namespace, body, field_manager=FIELD_MANAGER, force=True,
            _content_type="application/apply-patch+yaml")
        custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, PLURAL, meta["name"],
            {"status": {"observed": meta["generation"]}})

    def work_loop() -> None:
        while True:
            name = work.get()
            with lock:
                obj = latest.pop(name)
            calls.add()
            try:
                reconcile(obj)
            except ApiException as err:
                errors.add()
                print(f"baseline: reconcile {name} failed: {err.status} {err.reason}",
                      file=sys.stderr)
                time.sleep(1.0)
                offer(obj)

    def watch_loop(resource_version: str) -> None:
        while True:
            stream = watch.Watch().stream(
                custom.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL,
                resource_version=resource_version, allow_watch_bookmarks=True)
            try:
                for event in stream:
                    obj = event["object"]
                    resource_version = obj["metadata"]["resourceVersion"]
                    if event["type"] in ("ADDED", "MODIFIED"):
                        offer(obj)
            except ApiException as err:  # 410 Gone: relist
                print(f"baseline: watch ended ({err.status}); relisting", file=sys.stderr)
                resource_version = list_all()
            except Exception as err:  # noqa: BLE001 - a dropped connection: resume
                print(f"baseline: watch broke ({err!r}); resuming", file=sys.stderr)
                time.sleep(1.0)

    def list_all() -> str:
        listing = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
        for obj in listing["items"]:
            offer(obj)
        return str(listing["metadata"]["resourceVersion"])

    def list_children() -> str:
        listing = api.sanitize_for_serialization(core.list_namespaced_config_map(namespace))
        children.clear()
        children.update((o["metadata"]["name"], o) for o in listing["items"])
        return str(listing["metadata"]["resourceVersion"])

    def keep_children(resource_version: str) -> None:
        """The namespace's ConfigMaps as dicts, by name: watch (relist on 410). Their
        events queue nothing: their owners' own status shows what is done."""
        while True:
            try:
                if not resource_version:
                    resource_version = list_children()
                stream = watch.Watch(return_type="object").stream(
                    core.list_namespaced_config_map, namespace,
                    resource_version=resource_version, allow_watch_bookmarks=True)
                for event in stream:
                    obj = event["raw_object"]
                    resource_version = obj["metadata"]["resourceVersion"]
                    if event["type"] in ("ADDED", "MODIFIED"):
                        children[obj["metadata"]["name"]] = obj
                    elif event["type"] == "DELETED":
                        children.pop(obj["metadata"]["name"], None)
            except ApiException as err:  # 410 Gone: relist
                print(f"baseline: child watch ended ({err.status}); relisting",
                      file=sys.stderr)
                resource_version = ""
            except Exception as err:  # noqa: BLE001 - a dropped connection: resume
                print(f"baseline: child watch broke ({err!r}); resuming", file=sys.stderr)
                time.sleep(1.0)

    for i in range(threads):
        threading.Thread(target=work_loop, name=f"reconcile-{i}", daemon=True).start()
    if owns:
        threading.Thread(target=keep_children, args=(list_children(),), name="watch-children",
                         daemon=True).start()
    threading.Thread(target=watch_loop, args=(list_all(),), name="watch", daemon=True).start()
    _serve_until_stdin_closes()
    _thread_report()
    if any(name.startswith("operator_kit") for name in sys.modules):
        raise SystemExit("baseline worker imported operator_kit")
    if owns:
        print(f"baseline: {len(children)} children in its dict", file=sys.stderr)
    _report(calls.value, errors.value)


def worker_create(kubeconfig: str, namespace: str, count: int, threads: int) -> None:
    """The creator: POST `count` BenchItems from `threads` threads; print when each began."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    api = _kube_client(kubeconfig, threads)
    custom = client.CustomObjectsApi(api)

    def create(index: int) -> tuple[str, float, float]:
        name = f"item-{index:05d}"
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND,
                "metadata": {"name": name}, "spec": {"index": index}}
        sent = time.monotonic()
        for attempt in range(5):
            try:
                response = custom.create_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, body, _preload_content=False)
                response.read()  # all of it, before the connection goes back to the pool
                response.release_conn()
                break
            except ApiException as err:
                if err.status not in (429, 500, 503, 504) or attempt == 4:
                    raise
                time.sleep(0.2 * 2 ** attempt)
        return name, sent, time.monotonic()

    with ThreadPoolExecutor(threads, thread_name_prefix="create") as pool:
        results = list(pool.map(create, range(count)))
    print(json.dumps({"sent": {name: sent for name, sent, _ in results},
                      "last_done": max(done for _, _, done in results)}), flush=True)


class _Counter:
    """A thread-safe count."""

    def __init__(self) -> None:
        self.value = 0
        self._lock = threading.Lock()

    def add(self) -> None:
        with self._lock:
            self.value += 1


# -- the parent: one run per (N, contender) -------------------------------------------------


@dataclass
class RunResult:
    contender: str
    count: int
    round: int = 1
    converged: int = 0
    seconds: float = float("nan")
    p50_ms: float = float("nan")
    p99_ms: float = float("nan")
    peak_rss_mb: float = float("nan")
    busy_cpu_s: float = float("nan")
    busy_kernel_s: float = float("nan")  # of which in the kernel (system time)
    module: str = ""
    server_cpu_s: float = float("nan")
    idle_cpu_pct: float = float("nan")
    create_per_s: float = float("nan")
    reconciles: int = 0
    errors: int = 0
    instructions: float = float("nan")  # with --instructions: counted while busy
    notes: list[str] = field(default_factory=list)

    @property
    def cpu_per_1k(self) -> float:
        """The contender's CPU seconds per 1,000 objects converged."""
        return 1000 * self.busy_cpu_s / self.count

    @property
    def minstr_per_1k(self) -> float:
        """Millions of instructions per 1,000 objects converged (--instructions)."""
        return self.instructions / self.count / 1000

    @property
    def per_second(self) -> float:
        return self.count / self.seconds if self.converged == self.count else float("nan")


class StatusWatch:
    """Watches one namespace's BenchItems; records when each first shows a status."""

    def __init__(self, api: Api, namespace: str, expected: int) -> None:
        self.api = api
        self.path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"
        self.expected = expected
        self.seen: dict[str, float] = {}
        self.all_seen = threading.Event()
        self._stop = threading.Event()
        self._response: Any = None
        self._version = str(api.get(self.path, limit=1)["metadata"]["resourceVersion"])
        self._thread = threading.Thread(target=self._run, name="status-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop watching. Shutting the socket down unblocks a read in progress (closing
        the response would wait for that read, up to the next bookmark, a minute away)."""
        self._stop.set()
        connection = getattr(self._response, "connection", None)
        sock = getattr(connection, "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._watch()
            except Exception as err:  # noqa: BLE001 - a broken stream: resume from the last RV
                if not self._stop.is_set():
                    print(f"  status watch broke ({err!r}); resuming", file=sys.stderr)
                    time.sleep(0.2)

    def _watch(self) -> None:
        self._response = self.api.request(
            "GET", self.path, stream=True, timeout=(10.0, 600.0),
            query={"watch": True, "resourceVersion": self._version,
                   "allowWatchBookmarks": True, "timeoutSeconds": 1800})
        try:
            for line in _lines(self._response):
                now = time.monotonic()
                event = json.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    raise RuntimeError(f"watch error: {obj.get('message')}")
                meta = obj.get("metadata", {})
                self._version = meta.get("resourceVersion", self._version)
                if (obj.get("status") or {}).get("observed") is not None:
                    self.seen.setdefault(meta["name"], now)
                    if len(self.seen) >= self.expected:
                        self.all_seen.set()
        finally:
            self._response.release_conn()


def _lines(response: Any) -> Iterator[bytes]:
    pending = b""
    for chunk in response.stream(amt=None, decode_content=True):
        pending += chunk
        *complete, pending = pending.split(b"\n")
        yield from (line for line in complete if line.strip())


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc/<pid>/stat."""
    return sum(_cpu_split(pid))


def _cpu_split(pid: int) -> tuple[float, float]:
    """A process's CPU seconds in user space and in the kernel, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return int(fields[11]) / CLOCK_TICKS, int(fields[12]) / CLOCK_TICKS


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _callgrind(pid: int, instrument: bool) -> None:
    """Switch callgrind's instrumentation of process `pid` on or off."""
    subprocess.run(["callgrind_control", "-i", "on" if instrument else "off", str(pid)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   timeout=60)


def _callgrind_total(out_file: Path) -> float:
    """The instructions a callgrind output file counted (its `totals:` line)."""
    for line in out_file.read_text().splitlines():
        if line.startswith("totals:"):
            return float(line.split()[1])
    raise RuntimeError(f"{out_file}: no totals line")


def _read_line(stream: IO[str], timeout: float) -> str | None:
    with selectors.DefaultSelector() as selector:
        selector.register(stream, selectors.EVENT_READ)
        if not selector.select(timeout):
            return None
    return stream.readline()


def _percentile(values: Sequence[float], q: int) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


class Bench:
    """Runs the contenders on one cluster and collects `RunResult`s."""

    def __init__(self, kubeconfig: str, server_pids: list[int], options: argparse.Namespace,
                 logs: Path) -> None:
        from operator_kit.testing import TestCluster

        self.kubeconfig = kubeconfig
        self.server_pids = server_pids
        self.options = options
        self.logs = logs
        self.cluster = TestCluster(kubeconfig)
        self.runs = 0  # numbers each run's callgrind and profile files

    def install(self) -> None:
        self.cluster.install_crd(bench_kind())

    def _spawn(self, *args: str, log_name: str, source: str | None = None,
               callgrind_out: Path | None = None, profile: Path | None = None
               ) -> subprocess.Popen[str]:
        """This script in worker mode; with `source`, importing operator_kit from there;
        with `callgrind_out`, under callgrind with its instrumentation off; with
        `profile`, saving its yappi profile there."""
        env = dict(os.environ)
        if profile is not None:
            env[PROFILE_ENV] = str(profile)
        command = [sys.executable, os.path.abspath(__file__), "--kubeconfig", self.kubeconfig,
                   *args]
        if callgrind_out is not None:
            command = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "-q",
                       f"--cache-sim={'yes' if self.options.cache_sim else 'no'}",
                       f"--callgrind-out-file={callgrind_out}", *command]
        if source:
            env["PYTHONPATH"] = os.pathsep.join(
                [source, *filter(None, [env.get("PYTHONPATH")])])
        with open(self.logs / log_name, "w") as log:  # the child keeps its own copy
            return subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                env=env)

    def run(self, contender: str, count: int, idle_seconds: float) -> RunResult:
        """One contender reconciling `count` new objects in a namespace of its own."""
        options = self.options
        result = RunResult(contender, count)
        slug = contender.replace("_", "").replace("+", "-").replace("@", "-")
        namespace = self.cluster.namespace(f"bench-{slug}-{count}")
        tag = f"{contender} N={count}"
        mode = "baseline" if contender.startswith("baseline") else "operator_kit"
        args = ["--worker", mode, "--namespace", namespace.name,
                "--threads", str(options.threads)]
        if contender in (OWNS, OWNS_SKIP, BASELINE_OWNS):
            args.append("--owns")
        if contender == OWNS_SKIP:
            args.append("--skip-echoes")
        worker: subprocess.Popen[str] | None = None
        creator: subprocess.Popen[str] | None = None
        watcher: StatusWatch | None = None
        self.runs += 1
        counted = (self.logs / f"callgrind-{slug}-{count}-{self.runs}.out"
                   if options.instructions else None)
        profile = (Path(options.profile) / f"{slug}-{count}-{self.runs}.pstat"
                   if options.profile else None)
        try:
            source = options.trees.get(contender)
            worker = self._spawn(*args, log_name=f"{contender}-{count}.log", source=source,
                                 callgrind_out=counted, profile=profile)
            assert worker.stdin is not None and worker.stdout is not None
            if _read_line(worker.stdout, 600 if counted else 120) != "ready\n":
                raise RuntimeError(f"{tag}: the worker did not start; see its log "
                                   f"{self.logs / f'{contender}-{count}.log'}")
            watcher = StatusWatch(self.cluster.api, namespace.name, count)
            cpu_before = _cpu_split(worker.pid)
            server_before = self._server_cpu()
            if counted:
                _callgrind(worker.pid, instrument=True)
            creator = self._spawn("--worker", "create", "--namespace", namespace.name,
                                  "--count", str(count),
                                  "--create-threads", str(options.create_threads),
                                  log_name=f"create-{contender}-{count}.log")
            deadline = options.timeout_base + count * options.timeout_per_object * (
                100 if counted else 1)
            converged = self._wait(watcher, worker, creator, deadline, tag)
            done_at = time.monotonic()
            cpu_converged = _cpu_split(worker.pid)
            if counted:
                _callgrind(worker.pid, instrument=False)
            result.server_cpu_s = self._server_cpu() - server_before
            created_out, _ = creator.communicate(timeout=120)
            if creator.returncode != 0:
                raise RuntimeError(f"{tag}: the creator failed; see its log in {self.logs}")
            created = json.loads(created_out)
            sent: dict[str, float] = created["sent"]
            first = min(sent.values())
            result.create_per_s = count / (created["last_done"] - first)
            seen = dict(watcher.seen)
            result.converged = len(seen)
            result.seconds = (max(seen.values()) if converged else done_at) - first
            latencies = sorted((seen[name] - sent[name]) * 1000 for name in seen)
            result.p50_ms = _percentile(latencies, 50)
            result.p99_ms = _percentile(latencies, 99)
            result.busy_cpu_s = sum(cpu_converged) - sum(cpu_before)
            result.busy_kernel_s = cpu_converged[1] - cpu_before[1]
            if not converged:
                result.notes.append(f"{tag}: only {len(seen)}/{count} converged "
                                    f"within {deadline:.0f}s")
            idle_start, idle_cpu = time.monotonic(), _cpu_seconds(worker.pid)
            time.sleep(idle_seconds)
            idle_wall = time.monotonic() - idle_start
            result.idle_cpu_pct = 100 * (_cpu_seconds(worker.pid) - idle_cpu) / idle_wall
            result.peak_rss_mb = _peak_rss_mb(worker.pid)
            stopping = time.monotonic()
            out, _ = worker.communicate(timeout=600 if counted else 60)  # it stops
            print(f"  {tag}: worker stopped in {time.monotonic() - stopping:.1f}s",
                  file=sys.stderr)
            counts = json.loads(out.strip().splitlines()[-1])
            result.reconciles, result.errors = counts["reconciles"], counts["errors"]
            result.module = counts.get("module", "")
            if counted:
                result.instructions = _callgrind_total(counted)
            if source and not Path(result.module).is_relative_to(Path(source).resolve()):
                raise RuntimeError(f"{tag}: the worker ran operator_kit from {result.module}, "
                                   f"not from --before {source}")
            children = len(namespace.list("v1", "ConfigMap"))
            if children < count:
                result.notes.append(f"{tag}: only {children}/{count} ConfigMaps exist")
            return result
        finally:
            for process in (worker, creator):
                if process is not None and process.poll() is None:
                    process.kill()
                    process.wait()
            if watcher is not None:
                watcher.stop()
            started = time.monotonic()
            namespace.delete(wait=True, timeout=options.delete_timeout)
            print(f"  {tag}: namespace deleted in {time.monotonic() - started:.0f}s",
                  file=sys.stderr)


    def _server_cpu(self) -> float:
        """CPU seconds of our plane's etcd and API server (NaN for a cluster not ours)."""
        if not self.server_pids:
            return float("nan")
        return sum(_cpu_seconds(pid) for pid in self.server_pids)

    def _wait(self, watcher: StatusWatch, worker: subprocess.Popen[str],
              creator: subprocess.Popen[str], timeout: float, tag: str) -> bool:
        """Wait until every object shows its status; fail early if a process died."""
        deadline = time.monotonic() + timeout
        while not watcher.all_seen.wait(0.5):
            if worker.poll() is not None:
                raise RuntimeError(f"{tag}: the worker exited ({worker.returncode}); "
                                   f"see its log in {self.logs}")
            if creator.poll() not in (None, 0):
                raise RuntimeError(f"{tag}: the creator failed; see its log in {self.logs}")
            if time.monotonic() > deadline:
                return False
        return True


def _format(results: list[RunResult]) -> str:
    counted = any(r.instructions == r.instructions for r in results)  # not all NaN
    header = (f"{'N':>6} {'round':>5}  {'contender':<22} {'conv/s':>7} {'p50 ms':>7} "
              f"{'p99 ms':>7} {'RSS MB':>7} {'CPU s':>6} {'sys %':>5} {'CPU s/1k':>8} "
              f"{'server CPU s':>12} "
              f"{'idle CPU %':>10} {'create/s':>8} {'reconciles':>10} {'errors':>6}"
              + (f" {'Minstr/1k':>10}" if counted else ""))
    rows = [header, "-" * len(header)]
    for r in results:
        rows.append(f"{r.count:>6} {r.round:>5}  {r.contender:<22} {r.per_second:>7.1f} "
                    f"{r.p50_ms:>7.0f} {r.p99_ms:>7.0f} {r.peak_rss_mb:>7.1f} "
                    f"{r.busy_cpu_s:>6.1f} {100 * r.busy_kernel_s / r.busy_cpu_s:>5.0f} "
                    f"{r.cpu_per_1k:>8.2f} {r.server_cpu_s:>12.1f} "
                    f"{r.idle_cpu_pct:>10.2f} "
                    f"{r.create_per_s:>8.1f} {r.reconciles:>10} {r.errors:>6}"
                    + (f" {r.minstr_per_1k:>10.0f}" if counted else ""))
    rows.append("")
    for count in sorted({r.count for r in results}):
        def median(contender: str, count: int = count) -> float:
            runs = [r.per_second for r in results if (r.count, r.contender) == (count, contender)]
            return statistics.median(runs) if runs else float("nan")

        kit, base = median("operator_kit"), median("baseline")
        if kit == kit and base == base:  # both ran (not NaN)
            ratio = kit / base
            verdict = "meets" if ratio >= TARGET_RATIO else "MISSES"
            rows.append(f"N={count}: operator_kit/baseline throughput = {ratio:.2f}x "
                        f"({kit:.1f} / {base:.1f} objects/s, median of rounds; {verdict} "
                        f"the >= {TARGET_RATIO}x target)")
        rows.extend(_cpu_lines(results, count))
        rss = [r.peak_rss_mb for r in results
               if (r.count, r.contender) == (count, "operator_kit")]
        if rss and count >= 5000:
            verdict = "meets" if max(rss) <= TARGET_RSS_MB else "MISSES"
            rows.append(f"N={count}: operator_kit peak RSS = {max(rss):.0f} MB "
                        f"({verdict} the <= {TARGET_RSS_MB:.0f} MB target)")
    for r in results:
        rows.extend(f"note: {note}" for note in r.notes)
    return "\n".join(rows)


def _cpu_lines(results: list[RunResult], count: int) -> list[str]:
    """The contenders' CPU per 1,000 objects at `count` (medians of rounds), operator_kit
    against the baseline (the goal: no more) and against each --before tree (CPU and
    throughput); for each like-for-like pair, the ratio round by round as well."""
    cpu: dict[str, float] = {}
    rate: dict[str, float] = {}
    for contender in dict.fromkeys(r.contender for r in results):
        runs = [r for r in results if (r.count, r.contender) == (count, contender)
                and r.converged == r.count]
        if runs:
            cpu[contender] = statistics.median(r.cpu_per_1k for r in runs)
            rate[contender] = statistics.median(r.per_second for r in runs)
    if not cpu:
        return []
    rows = [f"N={count}: CPU s per 1,000 objects (median of rounds): " + ", ".join(
        f"{name} {value:.2f}" for name, value in cpu.items())]
    for name in (n for n in (OWNS, OWNS_SKIP) if n in cpu and "baseline" in cpu):
        rows.append(f"N={count}: {name}/baseline CPU = {cpu[name] / cpu['baseline']:.2f}x, "
                    f"throughput = {rate[name] / rate['baseline']:.2f}x")
    if OWNS_SKIP in cpu and BASELINE_OWNS in cpu:  # like for like: both watch the children
        rows.append(f"N={count}: {OWNS_SKIP}/{BASELINE_OWNS} CPU = "
                    f"{cpu[OWNS_SKIP] / cpu[BASELINE_OWNS]:.2f}x, throughput = "
                    f"{rate[OWNS_SKIP] / rate[BASELINE_OWNS]:.2f}x")
    if "operator_kit" in cpu and "baseline" in cpu:
        kit = cpu["operator_kit"]
        verdict = "meets" if kit <= cpu["baseline"] else "MISSES"
        rows.append(f"N={count}: operator_kit/baseline CPU = {kit / cpu['baseline']:.2f}x "
                    f"({verdict} the <= 1.00x goal)")
    for tree in (name for name in cpu if name.startswith(TREE_PREFIX)):
        if "operator_kit" in cpu:
            rows.append(f"N={count}: operator_kit/{tree} CPU = "
                        f"{cpu['operator_kit'] / cpu[tree]:.2f}x, throughput = "
                        f"{rate['operator_kit'] / rate[tree]:.2f}x "
                        f"({rate['operator_kit']:.1f} / {rate[tree]:.1f} objects/s; "
                        f"after / before this tree's changes)")
    pairs = [(OWNS_SKIP, BASELINE_OWNS), ("operator_kit", "baseline"),
             *(("operator_kit", tree) for tree in cpu if tree.startswith(TREE_PREFIX))]
    for kit_name, base_name in pairs:
        rows.extend(_paired_line(results, count, kit_name, base_name, "CPU", 2))
        rows.extend(_paired_line(results, count, kit_name, base_name, "instructions", 1))
    return rows


def _paired_line(results: list[RunResult], count: int, kit: str, base: str, measure: str,
                 least: int) -> list[str]:
    """`kit`'s CPU (or instructions) per 1,000 objects over `base`'s, round by round: the
    two run back to back in each round (in alternating order), so a round's ratio is
    spared the drift between rounds (a plane growing slower, other work on the machine)
    that the medians carry. Printed with its spread, so a difference smaller than the
    noise reads as one; only with at least `least` rounds."""
    def by_round(contender: str) -> dict[int, float]:
        return {r.round: r.cpu_per_1k if measure == "CPU" else r.minstr_per_1k
                for r in results
                if (r.count, r.contender) == (count, contender) and r.converged == r.count}

    kits, bases = by_round(kit), by_round(base)
    ratios = [kits[n] / bases[n] for n in sorted(kits.keys() & bases.keys())
              if kits[n] == kits[n] and bases[n] == bases[n]]  # NaN: not measured
    if len(ratios) < least:
        return []
    return [f"N={count}: {kit}/{base} {measure} round by round: "
            + " ".join(f"{ratio:.2f}" for ratio in ratios)
            + f" (median {statistics.median(ratios):.2f}, range {min(ratios):.2f}-"
              f"{max(ratios):.2f})"]


@contextlib.contextmanager
def _cluster(kubeconfig: str | None, workdir: Path) -> Iterator[tuple[str, list[int]]]:
    """The given kubeconfig, or a local control plane of our own for the duration; with
    the process ids of its etcd and API server when it is ours."""
    if kubeconfig:
        yield kubeconfig, []
        return
    from operator_kit.localcluster import LocalCluster

    plane = LocalCluster(workdir / "plane")
    started = time.monotonic()
    try:
        path = plane.up()
        print(f"local control plane up in {time.monotonic() - started:.0f}s "
              f"({plane.dir})", file=sys.stderr)
        pids = plane.state.pids
        yield str(path), [pids["etcd"], pids["kube-apiserver"]]
    finally:
        plane.down()


def bench(options: argparse.Namespace) -> int:
    contenders: list[str] = options.contenders
    results: list[RunResult] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="controller-bench-") as tmp:
        workdir = Path(tmp)
        logs = Path(options.logs) if options.logs else workdir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with _cluster(options.kubeconfig, workdir) as (kubeconfig, server_pids):
            runner = Bench(kubeconfig, server_pids, options, logs)
            runner.install()
            if options.warmup:
                print(f"warming up: each contender with N={options.warmup}, not reported",
                      file=sys.stderr)
                for contender in contenders:
                    runner.run(contender, options.warmup, idle_seconds=0.0)
            for round_ in range(1, options.rounds + 1):
                for i, count in enumerate(options.counts):
                    order = contenders if (i + round_) % 2 else contenders[::-1]
                    for contender in order:
                        print(f"round {round_}: {contender} with N={count} ...",
                              file=sys.stderr)
                        result = runner.run(contender, count, options.idle_seconds)
                        result.round = round_
                        results.append(result)
                        print(f"  {contender} N={count}: {result.per_second:.1f} objects/s",
                              file=sys.stderr)
    print(f"\nthreads={options.threads} create-threads={options.create_threads} "
          f"idle window={options.idle_seconds:.0f}s cpus={os.cpu_count()} "
          f"total {time.monotonic() - started:.0f}s\n")
    print(_format(results))
    return 0 if all(r.converged == r.count for r in results) else 1


def _counts(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def _contenders(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = sorted(name for name in names
                     if name not in CONTENDERS and not name.startswith(TREE_PREFIX))
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown contender(s) {', '.join(unknown) or '(none given)'}; "
            f"choose from {', '.join(CONTENDERS)}")
    return names


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=_counts, default=[1000, 5000],
                        help="comma-separated object counts (default: 1000,5000)")
    parser.add_argument("--threads", type=int, default=8,
                        help="reconcile threads of each contender (default: 8)")
    parser.add_argument("--create-threads", type=int, default=16,
                        help="threads the creator POSTs from (default: 16)")
    parser.add_argument("--idle-seconds", type=float, default=10.0,
                        help="how long to measure idle CPU after convergence (default: 10)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="run every (N, contender) this many times; the throughput "
                             "ratio uses the median (default: 2)")
    parser.add_argument("--warmup", type=int, default=200,
                        help="objects each contender reconciles first, unreported, to warm "
                             "the API server up (default: 200; 0: none)")
    parser.add_argument("--kubeconfig", help="use this cluster instead of a local plane")
    parser.add_argument("--contenders", type=_contenders, default=list(CONTENDERS[:2]),
                        help="comma-separated, from " + ", ".join(CONTENDERS) +
                             " (default: operator_kit,baseline)")
    parser.add_argument("--before", metavar="[LABEL=]DIR", action="append", default=[],
                        help="a source tree holding another operator_kit package (e.g. "
                             "`git archive main operator_kit | tar -x -C DIR`, or a `git "
                             "worktree add --detach DIR COMMIT`): adds the contender "
                             f"{TREE_PREFIX}LABEL (default {BEFORE}), run with that tree's "
                             "operator_kit, to compare before and after a change in one "
                             "run; repeat it for several trees")
    parser.add_argument("--owns", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--skip-echoes", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--logs", help="keep the worker logs in this folder")
    parser.add_argument("--profile", metavar="DIR",
                        help="profile each contender's threads from its start to its stop "
                             "(yappi, CPU clock; pip install yappi) into DIR/<contender>-"
                             "<N>-<run>.pstat, for python -m pstats")
    parser.add_argument("--instructions", action="store_true",
                        help="also count each contender's instructions while busy, under "
                             "valgrind's callgrind (about 60x slower; see Method)")
    parser.add_argument("--cache-sim", action="store_true",
                        help="with --instructions: callgrind also simulates the CPU's caches "
                             "(twice as slow again); read the misses in each callgrind-*.out "
                             "kept by --logs with callgrind_annotate")
    parser.add_argument("--timeout-base", type=float, default=60.0, help=argparse.SUPPRESS)
    parser.add_argument("--timeout-per-object", type=float, default=0.1,
                        help=argparse.SUPPRESS)
    parser.add_argument("--delete-timeout", type=float, default=300.0, help=argparse.SUPPRESS)
    # The worker modes this script runs itself in.
    parser.add_argument("--worker", choices=("operator_kit", "baseline", "create"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--namespace", help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.cache_sim and not options.instructions:
        parser.error("--cache-sim needs --instructions")
    options.trees = {}
    for text in options.before:
        label, sep, folder = text.rpartition("=")
        contender = f"{TREE_PREFIX}{label}" if sep else BEFORE
        if contender in options.trees or contender in CONTENDERS[:-1] or not folder:
            parser.error(f"--before {text}: give each tree a label of its own, LABEL=DIR")
        options.trees[contender] = folder
    if options.worker is None:
        for contender, folder in options.trees.items():
            if not (Path(folder) / "operator_kit" / "__init__.py").exists():
                parser.error(f"--before {folder}: no operator_kit package in it")
            if contender not in options.contenders:
                options.contenders.append(contender)
        for contender in options.contenders:
            if contender.startswith(TREE_PREFIX) and contender not in options.trees:
                parser.error(f"the contender {contender} needs --before "
                             f"{contender.removeprefix(TREE_PREFIX)}=DIR (or --before DIR "
                             f"for {BEFORE})")
    return options


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_args(argv)
    if options.worker is None:
        return bench(options)
    if not options.kubeconfig or not options.namespace:
        raise SystemExit("--worker needs --kubeconfig and --namespace")
    if options.worker == "operator_kit":
        worker_operator_kit(options.kubeconfig, options.namespace, options.threads,
                            options.owns, options.skip_echoes)
    elif options.worker == "baseline":
        worker_baseline(options.kubeconfig, options.namespace, options.threads, options.owns)
    else:
        worker_create(options.kubeconfig, options.namespace, options.count,
                      options.create_threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
