"""Admission webhook throughput and latency over TLS under gunicorn, against a bare Flask endpoint.

Run: ``python bench/webhook_bench.py`` (options: ``--help``).

Four servers run with the same settings — ``gunicorn -c
python:operator_kit.gunicorn_conf`` (1 gthread worker, 8 threads, TLS) on 127.0.0.1:

- *framework*: ``operator_kit.webhooks:app`` serving this module's `webhooks`, a
  validating webhook for a typed kind: the full path (content-type and size checks, JSON
  parse, review checks, ``Kind.from_dict``, the handler, the answer, metrics);
- *bare*: `bare_app`, a Flask endpoint that parses the JSON and answers ``allowed: true``
  with the request's uid — no framework;
- *mutate*: the framework's mutating webhook (adds a label: a JSON patch is computed), for
  reference;
- *bare, gthread*: the bare endpoint on gunicorn's own gthread worker instead of
  `operator_kit.webhooks.gunicorn_worker.ThreadWorker`, to show what its read deadline costs.

A thread pool of keep-alive HTTPS clients (``http.client``) sends the same
AdmissionReview (a ~1.4 KB object with managedFields, as the API server sends) as fast as
answers come back: the saturating throughput. Then an open-loop phase sends at half the
framework's saturating rate on a fixed schedule; latency there is measured from each
request's scheduled time, so a stalled server is not hidden by clients waiting on it.

All servers stay up for the whole run and are measured in short interleaved turns
(``--slice``), so load from other programs on a shared machine falls on every endpoint
alike; the 1-minute load average is printed with the figures.

Targets: framework throughput >= 0.7x bare; p99 < 20 ms at half saturation.
Bounded by ``--duration`` per endpoint and phase and ``--max-requests`` per turn.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import flask

from operator_kit.api.resources import CustomResource
from operator_kit.testing import stop_process
from operator_kit.webhooks.certificates import WebhookCertificate
from operator_kit.webhooks.server import AdmissionRequest, Denied, Webhooks

# ---------------------------------------------------------------------- the two apps


@dataclass
class BackupSpec:
    schedule: str
    database: str
    retain: int = 7


@dataclass
class BackupStatus:
    last_run: str | None = None


class Backup(CustomResource):
    group = "example.com"
    version = "v1"
    kind = "Backup"
    spec: BackupSpec
    status: BackupStatus


webhooks = Webhooks()


@webhooks.validate(Backup, "/validate")
def validate(request: AdmissionRequest[Backup]) -> None:
    if request.object is not None and not request.object.spec.schedule:
        raise Denied("spec.schedule is required")


@webhooks.mutate(Backup, "/mutate")
def mutate(obj: Backup, request: AdmissionRequest[Backup]) -> Backup:
    obj.labels["example.com/managed"] = "true"
    return obj


bare_app = flask.Flask("bare")


@bare_app.post("/validate")
def bare_validate() -> flask.Response:
    review = flask.request.get_json()
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": review["request"]["uid"], "allowed": True},
    }
    return flask.Response(json.dumps(body), mimetype="application/json")


def admission_review() -> bytes:
    obj = Backup(
        "nightly",
        BackupSpec(schedule="0 3 * * *", database="orders"),
        namespace="production",
        labels={"app.kubernetes.io/name": "orders-db", "team": "payments"},
        annotations={"example.com/owner": "payments@example.com"},
    ).to_dict()
    obj["metadata"]["managedFields"] = [
        {
            "manager": "kubectl-client-side-apply",
            "operation": "Update",
            "apiVersion": "example.com/v1",
            "time": "2024-05-01T10:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {"f:labels": {".": {}, "f:team": {}}},
                "f:spec": {".": {}, "f:schedule": {}, "f:database": {}, "f:retain": {}},
            },
        }
    ]
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "example.com", "version": "v1", "kind": "Backup"},
            "resource": {"group": "example.com", "version": "v1", "resource": "backups"},
            "requestKind": {"group": "example.com", "version": "v1", "kind": "Backup"},
            "requestResource": {"group": "example.com", "version": "v1", "resource": "backups"},
            "name": "nightly",
            "namespace": "production",
            "operation": "CREATE",
            "userInfo": {
                "username": "system:serviceaccount:ci:deployer",
                "uid": "014fbff9a07c",
                "groups": ["system:serviceaccounts", "system:serviceaccounts:ci"],
            },
            "object": obj,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }
    return json.dumps(review).encode()


# ---------------------------------------------------------------------- the server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """gunicorn with operator_kit.gunicorn_conf serving `app_uri` over TLS on 127.0.0.1."""

    def __init__(self, app_uri: str, tls_dir: Path, log: Path,
                 worker_class: str | None = None) -> None:
        self.port = free_port()
        here = str(Path(__file__).resolve().parent)
        env = {
            **os.environ,
            "OPERATOR_KIT_APP": f"{Path(__file__).stem}:webhooks",
            "OPERATOR_KIT_TLS_DIR": str(tls_dir),
            "OPERATOR_KIT_BIND": f"127.0.0.1:{self.port}",
            "OPERATOR_KIT_LOG_LEVEL": "warning",
            "PYTHONPATH": os.pathsep.join([here, *sys.path]),
        }
        for name in ("OPERATOR_KIT_TLS_CERT", "OPERATOR_KIT_TLS_KEY"):
            env.pop(name, None)
        self._log = log.open("wb")
        override = ["--worker-class", worker_class] if worker_class else []
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", "python:operator_kit.gunicorn_conf",
             *override, app_uri],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.log = log

    def wait_ready(self, context: ssl.SSLContext, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"gunicorn exited:\n{self.log.read_text()}")
            try:
                connection = http.client.HTTPSConnection(
                    "127.0.0.1", self.port, context=context, timeout=5
                )
                connection.request("GET", "/validate")
                connection.getresponse().read()
                connection.close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def stop(self) -> None:
        stop_process(self.process)
        self._log.close()


# ---------------------------------------------------------------------- the clients


@dataclass
class Result:
    requests: int
    errors: int
    seconds: float
    latencies: list[float]  # seconds

    @property
    def throughput(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def percentile(self, p: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] * 1000


class Connections:
    """Keep-alive HTTPS connections to one server, made once and reused by every turn.

    Connecting (a TLS handshake each) inside a measured turn would put handshakes, not
    the webhook, into the figures.
    """

    def __init__(self, port: int, context: ssl.SSLContext, count: int) -> None:
        self.port, self.context = port, context
        self.pool = [self._new() for _ in range(count)]

    def _new(self) -> http.client.HTTPSConnection:
        connection = http.client.HTTPSConnection(
            "127.0.0.1", self.port, context=self.context, timeout=10
        )
        # A first request at once: gunicorn's gthread worker holds a thread for a new
        # connection until its first request arrives, and has only 8.
        connection.request("GET", "/validate")
        connection.getresponse().read()
        return connection

    def send(self, i: int, path: str, body: bytes) -> bool:
        """POST `body` on connection `i`; whether the answer was ``allowed: true``."""
        headers = {"Content-Type": "application/json"}
        try:
            self.pool[i].request("POST", path, body=body, headers=headers)
            response = self.pool[i].getresponse()
            return response.status == 200 and b'"allowed": true' in response.read()
        except (OSError, http.client.HTTPException):
            self.pool[i].close()
            self.pool[i] = self._new()
            return False

    def close(self) -> None:
        for connection in self.pool:
            connection.close()


def _run_threads(concurrency: int, work: Callable[[int], None]) -> float:
    threads = [
        threading.Thread(target=work, args=(i,), name=f"bench-client-{i}")
        for i in range(concurrency)
    ]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def saturate(
    connections: Connections,
    path: str,
    body: bytes,
    *,
    concurrency: int,
    duration: float,
    max_requests: int,
) -> Result:
    """Closed loop: each client sends the next request as soon as it has an answer."""
    lock = threading.Lock()
    latencies: list[float] = []
    errors = [0]
    deadline = time.perf_counter() + duration

    def work(i: int) -> None:
        mine: list[float] = []
        failed = 0
        while time.perf_counter() < deadline:
            with lock:
                if len(latencies) + len(mine) >= max_requests:  # approximate bound
                    break
            sent = time.perf_counter()
            if connections.send(i, path, body):
                mine.append(time.perf_counter() - sent)
            else:
                failed += 1
        with lock:
            latencies.extend(mine)
            errors[0] += failed

    seconds = _run_threads(concurrency, work)
    return Result(len(latencies), errors[0], seconds, latencies)


def paced(
    connections: Connections,
    path: str,
    body: bytes,
    *,
    rate: float,
    concurrency: int,
    duration: float,
) -> Result:
    """Open loop at `rate` requests/s; latency counts from each request's scheduled time."""
    lock = threading.Lock()
    latencies: list[float] = []
    errors = [0]
    total = max(1, int(rate * duration))
    next_index = [0]
    start = time.perf_counter() + 0.01

    def work(i: int) -> None:
        while True:
            with lock:
                index = next_index[0]
                next_index[0] += 1
            if index >= total:
                break
            scheduled = start + index / rate
            delay = scheduled - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            ok = connections.send(i, path, body)
            with lock:
                if ok:
                    latencies.append(time.perf_counter() - scheduled)
                else:
                    errors[0] += 1

    seconds = _run_threads(concurrency, work)
    return Result(len(latencies), errors[0], seconds, latencies)


# ---------------------------------------------------------------------- the run


@dataclass(frozen=True)
class Endpoint:
    name: str
    app_uri: str
    path: str
    worker_class: str | None = None  # None: the one operator_kit.gunicorn_conf selects


ENDPOINTS = (
    Endpoint("bare Flask", f"{Path(__file__).stem}:bare_app", "/validate"),
    Endpoint("operator_kit validate", "operator_kit.webhooks:app", "/validate"),
    Endpoint("operator_kit mutate", "operator_kit.webhooks:app", "/mutate"),
    # What the read deadline of operator_kit.gunicorn_worker costs: the same bare app on
    # gunicorn's own gthread worker.
    Endpoint("bare Flask, gthread", f"{Path(__file__).stem}:bare_app", "/validate", "gthread"),
)
FRAMEWORK, BARE, PLAIN_WORKER = "operator_kit validate", "bare Flask", "bare Flask, gthread"


def interleaved(
    slices: int, names: list[str], measure: Callable[[str], Result]
) -> dict[str, Result]:
    """`measure` each endpoint for one turn, in turn, `slices` times; the merged results.

    All servers stay up and take turns, so load from other programs on the machine falls
    on every endpoint alike instead of on whichever happened to run at the time.
    """
    merged = {name: Result(0, 0, 0.0, []) for name in names}
    for i in range(slices):
        for name in names if i % 2 == 0 else names[::-1]:
            r = measure(name)
            m = merged[name]
            merged[name] = Result(
                m.requests + r.requests,
                m.errors + r.errors,
                m.seconds + r.seconds,
                m.latencies + r.latencies,
            )
    return merged


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--duration", type=float, default=8.0, help="seconds per endpoint and phase"
    )
    parser.add_argument("--slice", type=float, default=1.0, help="seconds per turn")
    parser.add_argument(
        "--concurrency", type=int, default=8, help="keep-alive clients when saturating"
    )
    parser.add_argument(
        "--paced-connections",
        type=int,
        default=32,
        help="keep-alive clients in the open-loop phase (enough that a slow answer never "
        "holds back the schedule, as the API server opens more connections when needed)",
    )
    parser.add_argument("--max-requests", type=int, default=20_000, help="per endpoint and turn")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    slices = max(1, round(args.duration / args.slice))

    load_before = os.getloadavg()[0]
    body = admission_review()
    cert = WebhookCertificate.generate_for(
        "localhost", ["localhost"], ip_addresses=["127.0.0.1"], days=1
    )
    paths = {e.name: e.path for e in ENDPOINTS}
    with tempfile.TemporaryDirectory(prefix="webhook-bench-") as tmp:
        tls = cert.install(Path(tmp) / "tls")
        context = ssl.create_default_context(cafile=str(tls.ca))
        servers = {
            e.name: Server(e.app_uri, Path(tmp) / "tls", Path(tmp) / f"{e.path[1:]}-{i}.log",
                           e.worker_class)
            for i, e in enumerate(ENDPOINTS)
        }
        pools: dict[str, Connections] = {}
        try:
            for name, server in servers.items():
                server.wait_ready(context)
                count = max(args.concurrency, args.paced_connections)
                pools[name] = Connections(server.port, context, count)

            def closed_loop(name: str, seconds: float = args.slice) -> Result:
                return saturate(
                    pools[name],
                    paths[name],
                    body,
                    concurrency=args.concurrency,
                    duration=seconds,
                    max_requests=args.max_requests,
                )

            for name in servers:  # warm up: imports, caches, the first requests
                closed_loop(name, 0.5)
            saturated = interleaved(slices, list(servers), closed_loop)

            half_rate = saturated[FRAMEWORK].throughput / 2

            def open_loop(name: str) -> Result:
                return paced(
                    pools[name],
                    paths[name],
                    body,
                    rate=half_rate,
                    concurrency=args.paced_connections,
                    duration=args.slice,
                )

            half = interleaved(slices, [BARE, FRAMEWORK], open_loop)
        finally:
            for pool in pools.values():
                pool.close()
            for server in servers.values():
                server.stop()

    print(
        f"AdmissionReview ({len(body)} bytes) over TLS; gunicorn -c operator_kit.gunicorn_conf "
        f"(1 gthread worker x 8 threads); {os.cpu_count()} CPUs; {slices} interleaved "
        f"turns of {args.slice:g}s per endpoint"
    )
    print(
        f"1-minute load average before / after: {load_before:.2f} / {os.getloadavg()[0]:.2f} "
        "(other programs on the machine shift every figure; compare rows of one run)"
    )
    print()
    print(f"saturated, {args.concurrency} keep-alive clients:")
    print(f"{'endpoint':<24}{'requests':>10}{'errors':>8}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}")
    for name, r in saturated.items():
        print(
            f"{name:<24}{r.requests:>10}{r.errors:>8}{r.throughput:>10.0f}"
            f"{r.percentile(50):>9.2f}{r.percentile(99):>9.2f}"
        )
    ratio = saturated[FRAMEWORK].throughput / saturated[BARE].throughput
    print(f"throughput {FRAMEWORK} / {BARE}: {ratio:.2f}x (target >= 0.70x)")
    worker = saturated[BARE].throughput / saturated[PLAIN_WORKER].throughput
    print(f"throughput {BARE} / {PLAIN_WORKER}: {worker:.2f}x (the read-deadline worker's cost)")
    print()
    print(
        f"open loop at half the saturating rate: {half_rate:.0f} req/s over "
        f"{args.paced_connections} connections, latency from the scheduled send time:"
    )
    print(f"{'endpoint':<24}{'requests':>10}{'errors':>8}{'p50 ms':>9}{'p99 ms':>9}")
    for name, r in half.items():
        print(
            f"{name:<24}{r.requests:>10}{r.errors:>8}"
            f"{r.percentile(50):>9.2f}{r.percentile(99):>9.2f}"
        )
    p99 = half[FRAMEWORK].percentile(99)
    print(f"p99 {FRAMEWORK} at half saturation: {p99:.2f} ms (target < 20 ms)")
    errors = sum(r.errors for r in [*saturated.values(), *half.values()])
    met = ratio >= 0.7 and p99 < 20 and errors == 0
    print("targets met" if met else "TARGETS MISSED")
    return 0 if met or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
