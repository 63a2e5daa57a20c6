"""Admission beside sockets that send nothing: operator_kit's worker against gunicorn's gthread.

Run: ``python bench/idle_socket_bench.py`` (options: ``--help``; ~3 minutes).

Anyone who can reach a webhook's port (its NetworkPolicy admits all sources, as the API
server's address is not known in advance) can open TCP connections and send nothing, or
part of a TLS ClientHello. Two servers run side by side, each ``gunicorn -c
python:operator_kit.gunicorn_conf`` (1 worker x 8 threads, TLS) serving this directory's
validating webhook (`webhook_bench.webhooks`) on 127.0.0.1:

- *operator_kit*: `operator_kit.webhooks.gunicorn_worker.ThreadWorker` (what the
  configuration selects): handshakes in the poller;
- *gthread*: gunicorn's own gthread worker, where each new connection holds a thread for
  up to 5 s while it waits for its first byte.

Each is measured in turns (``--rounds``, alternating the order) in two phases of
``--seconds`` each:

- *quiet*: nothing but the reviews;
- *hostile*: ``--idle`` raw sockets that never send a byte (re-opened as the server
  closes them, so that many are always open), ``--slow`` peers that send the first bytes
  of a ClientHello and then one byte a second, and ``--churn`` new silent sockets a
  second.

The reviews, as the API server sends them: an open loop at ``--rate`` per second over 16
kept-alive connections (latency from each request's scheduled time), and one review a
second on a new connection each (the API server dials one when its idle ones are busy).
A review not answered within 10 s (the generated webhooks' ``timeoutSeconds``) is a
refused write. Printed: per server and phase, answered/refused and p50/p99 of each kind;
the worker's RSS per hostile socket; then, for operator_kit only, the same new-connection
reviews beside ``--beyond-cap`` silent sockets, more than gunicorn's ``worker_connections``
(1000): the longest-idle connection is closed to make room for each new one.
"""

from __future__ import annotations

import argparse
import http.client
import os
import select
import socket
import ssl
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from webhook_bench import Connections, Result, Server, admission_review, paced

from operator_kit.webhooks.certificates import WebhookCertificate

WEBHOOK_TIMEOUT = 10.0  # the generated webhooks' timeoutSeconds
CLIENT_HELLO_START = b"\x16\x03\x01\x02\x00"  # a TLS record header announcing 512 bytes


class Hostile:
    """Silent, slow-handshake and churning peers of one server, kept up by one thread."""

    def __init__(self, port: int, idle: int, slow: int, churn: float) -> None:
        self.port, self.idle_count, self.slow_count, self.churn = port, idle, slow, churn
        self.idle: list[socket.socket] = []
        self.slow: list[socket.socket] = []
        self.churned: list[tuple[float, socket.socket]] = []
        self.opened = 0
        self.closed_by_server = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-hostile")

    def __enter__(self) -> Hostile:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        for sock in [*self.idle, *self.slow, *(s for _, s in self.churned)]:
            sock.close()

    def _open(self) -> socket.socket | None:
        try:
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=0.5)
        except OSError:  # the backlog is full: the server is not accepting
            return None
        self.opened += 1
        return sock

    def _reap(self, socks: list[socket.socket]) -> list[socket.socket]:
        """The sockets of `socks` the server has not closed (the closed ones are closed)."""
        if not socks:
            return socks
        poller = select.poll()  # not select(): there may be more than 1024 descriptors
        by_fd = {sock.fileno(): sock for sock in socks}
        for fd in by_fd:
            poller.register(fd, select.POLLIN)
        gone = set()
        for fd, _ in poller.poll(0):
            sock = by_fd[fd]
            try:
                data = sock.recv(4096)
            except OSError:
                data = b""
            if not data:
                gone.add(sock)
                sock.close()
        self.closed_by_server += len(gone)
        return [s for s in socks if s not in gone]

    def _run(self) -> None:
        next_churn = next_byte = time.monotonic()
        while not self._stop.wait(0.05):
            self.idle = self._reap(self.idle)
            self.slow = self._reap(self.slow)
            while len(self.idle) < self.idle_count and (sock := self._open()) is not None:
                self.idle.append(sock)
            while len(self.slow) < self.slow_count and (sock := self._open()) is not None:
                sock.sendall(CLIENT_HELLO_START)
                self.slow.append(sock)
            now = time.monotonic()
            if now >= next_byte:  # the slow peers trickle on: one more byte each
                next_byte = now + 1.0
                for sock in self.slow:
                    try:
                        sock.send(b"\x01")
                    except OSError:
                        pass
            while self.churn and now >= next_churn:
                next_churn += 1.0 / self.churn
                if (sock := self._open()) is not None:
                    self.churned.append((now, sock))
            keep = [(t, s) for t, s in self.churned if now - t < 30]
            for t, sock in self.churned:
                if now - t >= 30:
                    sock.close()
            self.churned = keep


@dataclass
class Phase:
    kept: Result = field(default_factory=lambda: Result(0, 0, 0.0, []))
    fresh: list[float] = field(default_factory=list)  # seconds; inf: refused
    rss_kib: list[int] = field(default_factory=list)  # the worker's, after each turn

    def add(self, kept: Result, fresh: list[float], rss_kib: int) -> None:
        self.kept = Result(self.kept.requests + kept.requests, self.kept.errors + kept.errors,
                           self.kept.seconds + kept.seconds, self.kept.latencies + kept.latencies)
        self.fresh += fresh
        self.rss_kib.append(rss_kib)


def review_on_a_new_connection(port: int, context: ssl.SSLContext, body: bytes) -> float:
    """Seconds to an ``allowed: true`` answer on a connection of its own; inf if refused."""
    started = time.perf_counter()
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context,
                                             timeout=WEBHOOK_TIMEOUT)
    try:
        connection.request("POST", "/validate", body=body,
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        ok = response.status == 200 and b'"allowed": true' in response.read()
    except (OSError, http.client.HTTPException):
        ok = False
    finally:
        connection.close()
    elapsed = time.perf_counter() - started
    return elapsed if ok and elapsed <= WEBHOOK_TIMEOUT else float("inf")


def new_connection_reviews(port: int, context: ssl.SSLContext, body: bytes,
                           seconds: float, per_second: float = 1.0) -> list[float]:
    """One review a second, each on a new connection, for `seconds`, in parallel threads
    (a refused one takes up to 10 s and must not hold back the next)."""
    results: list[float] = []
    lock = threading.Lock()

    def one() -> None:
        latency = review_on_a_new_connection(port, context, body)
        with lock:
            results.append(latency)

    threads = []
    for i in range(max(1, int(seconds * per_second))):
        thread = threading.Thread(target=one, name=f"bench-new-connection-{i}")
        thread.start()
        threads.append(thread)
        time.sleep(1.0 / per_second)
    for thread in threads:
        thread.join()
    return results


def worker_rss_kib(master: int) -> int:
    children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    for line in Path(f"/proc/{children[0]}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--idle", type=int, default=300, help="silent sockets held open")
    parser.add_argument("--slow", type=int, default=50, help="slow-handshake peers")
    parser.add_argument("--churn", type=float, default=2.0, help="new silent sockets a second")
    parser.add_argument("--rate", type=float, default=40.0, help="reviews a second, kept alive")
    parser.add_argument("--seconds", type=float, default=12.0, help="per server and phase")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--beyond-cap", type=int, default=1500,
                        help="silent sockets in the last phase (0: skip it)")
    args = parser.parse_args(argv)

    body = admission_review()
    cert = WebhookCertificate.generate_for("localhost", ["localhost"],
                                           ip_addresses=["127.0.0.1"], days=1)
    names = ("operator_kit", "gthread")
    phases = {(name, phase): Phase() for name in names for phase in ("quiet", "hostile")}
    beyond: list[float] = []
    beyond_opened = beyond_closed = 0
    with tempfile.TemporaryDirectory(prefix="idle-socket-bench-") as tmp:
        tls = cert.install(Path(tmp) / "tls")
        context = ssl.create_default_context(cafile=str(tls.ca))
        servers = {
            name: Server("operator_kit.webhooks:app", Path(tmp) / "tls",
                         Path(tmp) / f"{name}.log", None if name == "operator_kit" else "gthread")
            for name in names
        }
        pools: dict[str, Connections] = {}
        try:
            for name, server in servers.items():
                server.wait_ready(context)
                pools[name] = Connections(server.port, context, 16)

            def measure(name: str) -> tuple[Result, list[float], int]:
                server = servers[name]
                fresh: list[float] = []
                thread = threading.Thread(
                    target=lambda: fresh.extend(new_connection_reviews(
                        server.port, context, body, args.seconds)),
                    name="bench-new-connections")
                thread.start()
                kept = paced(pools[name], "/validate", body, rate=args.rate, concurrency=16,
                             duration=args.seconds)
                thread.join()
                # A client thread whose reconnect failed ends without counting the rest.
                kept.errors = int(args.rate * args.seconds) - kept.requests
                return kept, fresh, worker_rss_kib(server.process.pid)

            for round_ in range(args.rounds):
                for name in names if round_ % 2 == 0 else names[::-1]:
                    phases[name, "quiet"].add(*measure(name))
                    with Hostile(servers[name].port, args.idle, args.slow, args.churn):
                        time.sleep(1.0)  # let them all connect
                        phases[name, "hostile"].add(*measure(name))
                    time.sleep(6.0)  # the server closes what is left of them

            if args.beyond_cap:
                server = servers["operator_kit"]
                with Hostile(server.port, args.beyond_cap, 0, 0) as crowd:
                    time.sleep(3.0)
                    beyond = new_connection_reviews(server.port, context, body, args.seconds)
                    beyond_opened, beyond_closed = crowd.opened, crowd.closed_by_server
        finally:
            for pool in pools.values():
                pool.close()
            for server in servers.values():
                server.stop()

    print(f"AdmissionReview ({len(body)} bytes) over TLS; gunicorn -c "
          "operator_kit.gunicorn_conf (1 worker x 8 threads); "
          f"{os.cpu_count()} CPUs; {args.rounds} rounds of {args.seconds:g} s per server "
          "and phase")
    print(f"hostile: {args.idle} silent sockets held open, {args.slow} slow-handshake peers "
          f"(a byte a second), {args.churn:g} new silent sockets a second")
    print(f"reviews: {args.rate:g}/s on 16 kept-alive connections (from the scheduled time), "
          f"1/s on a new connection each; refused = no answer within {WEBHOOK_TIMEOUT:g} s")
    print()
    print(f"{'server':<14}{'phase':<9}{'kept-alive':>12}{'refused':>9}{'p50 ms':>9}"
          f"{'p99 ms':>9}{'new conn':>10}{'refused':>9}{'p50 ms':>9}{'p99 ms':>9}"
          f"{'RSS MiB':>9}")
    for (name, phase), r in phases.items():
        fresh_ok = [x for x in r.fresh if x != float("inf")]
        print(f"{name:<14}{phase:<9}{r.kept.requests:>12}{r.kept.errors:>9}"
              f"{r.kept.percentile(50):>9.1f}{r.kept.percentile(99):>9.1f}"
              f"{len(fresh_ok):>10}{len(r.fresh) - len(fresh_ok):>9}"
              f"{percentile(fresh_ok, 50):>9.1f}{percentile(fresh_ok, 99):>9.1f}"
              f"{max(r.rss_kib) / 1024:>9.1f}")
    quiet, hostile = phases["operator_kit", "quiet"], phases["operator_kit", "hostile"]
    ratio = hostile.kept.percentile(99) / quiet.kept.percentile(99)
    refused = hostile.kept.errors + sum(x == float("inf") for x in hostile.fresh)
    # The first round's: memory a worker took once, it keeps (later turns reuse it).
    per_socket = (hostile.rss_kib[0] - quiet.rss_kib[0]) / max(1, args.idle + args.slow)
    print(f"operator_kit kept-alive p99 hostile / quiet: {ratio:.2f}x; refused while hostile: "
          f"{refused}; worker RSS {per_socket:+.1f} KiB per hostile socket")
    g_refused = (phases["gthread", "hostile"].kept.errors
                 + sum(x == float("inf") for x in phases["gthread", "hostile"].fresh))
    print(f"gthread refused while hostile: {g_refused}")
    if args.beyond_cap:
        ok = [x for x in beyond if x != float("inf")]
        print(f"beyond the cap: {args.beyond_cap} silent sockets ({beyond_opened} opened, "
              f"{beyond_closed} closed by the server to make room): new-connection reviews "
              f"{len(ok)} answered, {len(beyond) - len(ok)} refused, "
              f"median {statistics.median(ok) * 1000 if ok else float('nan'):.1f} ms, "
              f"p99 {percentile(ok, 99):.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
