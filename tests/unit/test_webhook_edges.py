"""The webhook server's edges (issue 38, R2 and R5), attacked through a real gunicorn.

``gunicorn -c python:operator_kit.gunicorn_conf`` (TLS, 127.0.0.1 only, the worker's 8
threads) serves the webhook app of test_webhook_abuse.py with a conversion webhook added:

- clients that ask for a large answer and never read it are cut off once the answer has
  taken ``OPERATOR_KIT_WRITE_TIMEOUT`` (here 2 s), so admission keeps working;
- a body over its endpoint's limit is refused with 413 before it is read, naming the
  limit and the setting;
- the largest conversions the limits allow, 8 at once, keep the worker's memory within
  what the generated Deployment's memory limit was derived from.

Through the real API server: tests/cluster/test_webhook_edges_cluster.py.
"""

from __future__ import annotations

import json
import re
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from operator_kit.webhooks.limits import (
    BYTES_PER_BODY_BYTE,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_CONVERSION_BODY_BYTES,
    DEFAULT_THREADS,
    SMALL_BODY_BYTES,
    memory_limit_mib,
)

from .test_webhook_abuse import (
    APP_MODULE,
    Server,
    ValidClient,
    http_request,
    rss_kib,
    serving,
    worker_pid,
)

MIB = 1024 * 1024
WRITE_TIMEOUT = 2.0
NON_READERS = 8  # as many as the worker has threads
ANSWER_BYTES = 6 * MIB  # more than the server's socket send buffer (4 MiB at most)
BLOAT = 66_000  # bytes the converter adds to each object: 100 objects, over 6 MiB

CONVERTING = f"""
@app.convert("/convert")
def convert(obj, desired_api_version):
    if obj.get("spec", {{}}).get("bloat"):
        obj = {{**obj, "data": "x" * {BLOAT}}}
    return obj
"""


def app_module(constructor: str) -> str:
    module = APP_MODULE.replace("app = Webhooks(max_body_bytes=65536)", f"app = {constructor}")
    assert f"app = {constructor}" in module
    return module + CONVERTING


def conversion_review(count: int, *, bloat: bool = False, pad: int = 0) -> bytes:
    objects = [{"apiVersion": "abuse.example.com/v1", "kind": "Gadget",
                "metadata": {"name": f"g{i}", "namespace": "team-a"},
                "spec": {"size": i, "bloat": bloat, "pad": "p" * pad}} for i in range(count)]
    return json.dumps({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                       "request": {"uid": "c-1", "desiredAPIVersion": "abuse.example.com/v2",
                                   "objects": objects}}).encode()


def post(server: Server, path: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
    """One request on a connection of its own: the status, headers and body answered."""
    with server.connect(timeout=60) as sock:
        try:
            sock.sendall(http_request(body, path=path))
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass  # answered (413, 503) and closed before the whole body was sent
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except (ConnectionResetError, ssl.SSLError):
            pass  # closed after its answer, with the rest of the body unread
    head, _, content = answer.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, content


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


# ---------------------------------------------------------------------- R2: non-readers


@pytest.fixture(scope="module")
def generous(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A body budget large enough for every non-reader at once: only the write deadline
    stands between them and the worker's threads."""
    module = app_module("Webhooks(max_body_bytes=65536, body_budget_bytes=256 * 1024 * 1024)")
    with serving(tmp_path_factory.mktemp("generous"), module,
                 OPERATOR_KIT_WRITE_TIMEOUT=str(WRITE_TIMEOUT)) as running:
        yield running


def non_reader(server: Server, body: bytes) -> ssl.SSLSocket:
    """Connect with a tiny receive buffer, send a request whose answer is large, and never
    read: the server's send blocks once its socket buffer is full."""
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.settimeout(30)
    raw.connect(("127.0.0.1", server.port))
    sock = server.context.wrap_socket(raw, server_hostname="localhost")
    sock.sendall(http_request(body, path="/convert"))
    return sock


def closed_after(sock: ssl.SSLSocket, seconds: float) -> bool:
    """Read `sock` to its end within `seconds`: True if the server closed it before the
    whole answer came (cut off), False if the answer was complete or it stayed open."""
    sock.settimeout(seconds)
    received = b""
    try:
        while chunk := sock.recv(1 << 20):
            received += chunk
    except (ssl.SSLError, ConnectionResetError):
        pass
    except TimeoutError:
        return False
    return len(received) < ANSWER_BYTES


def test_clients_that_never_read_a_large_answer_are_cut_off_and_admission_keeps_working(
    generous: Server,
) -> None:
    body = conversion_review(100, bloat=True)
    status, _, answer = post(generous, "/convert", body)  # what each non-reader asks for
    assert status == 200 and len(answer) > ANSWER_BYTES
    log_before = generous.log.read_text(errors="replace").count("its answer was not taken")

    held = [non_reader(generous, body) for _ in range(NON_READERS)]
    opened = time.monotonic()
    try:
        time.sleep(0.5)  # every thread is now blocked sending an answer nobody reads
        latencies = []
        client = ValidClient(generous)
        for n in range(16):
            started = time.perf_counter()
            status, review = client.ask(3, f"beside-non-readers-{n}")
            latencies.append(time.perf_counter() - started)
            assert (status, review["response"]["uid"]) == (200, f"beside-non-readers-{n}")
        client.close()
        print(f"\n{NON_READERS} non-readers: 16 reviews, max {max(latencies) * 1000:.0f} ms, "
              f"all answered {time.monotonic() - opened:.1f} s after they connected")
        # The first review waits for a thread to be freed: at most one write deadline.
        assert max(latencies) < WRITE_TIMEOUT + 1.5
        # The non-readers' connections were shut down, their answers unsent.
        assert all(closed_after(sock, 5) for sock in held)
    finally:
        for sock in held:
            sock.close()
    log = generous.log.read_text(errors="replace")
    warned = log.count("its answer was not taken") - log_before
    assert warned <= 1  # once per address per minute, not once per connection
    assert "OPERATOR_KIT_WRITE_TIMEOUT" in log
    assert "Traceback" not in log


# ---------------------------------------------------------------------- R5: body limits


@pytest.fixture(scope="module")
def defaults(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The default limits: admission 7 MiB, conversion 8 MiB, budget 8 MiB."""
    with serving(tmp_path_factory.mktemp("defaults"), app_module("Webhooks()")) as running:
        yield running


@pytest.mark.parametrize(("path", "limit", "setting", "review"), [
    ("/convert", DEFAULT_MAX_CONVERSION_BODY_BYTES, "max_conversion_body_bytes",
     "a conversion review"),
    ("/validate", DEFAULT_MAX_BODY_BYTES, "max_body_bytes", "an admission review"),
])
def test_a_body_over_its_endpoints_limit_gets_413_naming_the_limit_before_it_is_sent(
    defaults: Server, path: str, limit: int, setting: str, review: str,
) -> None:
    announced = 30 * MIB  # the 30 MiB ConversionReview that took 454 MiB and 28 s
    worker = worker_pid(defaults.process.pid)
    before = rss_kib(worker)
    started = time.perf_counter()
    with defaults.connect(timeout=10) as sock:
        sock.sendall(http_request(b"", path=path, length=announced))  # the headers only
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    seconds = time.perf_counter() - started
    status = int(answer.split()[1])
    error = json.loads(answer.partition(b"\r\n\r\n")[2])["message"]
    assert status == 413
    assert error == (f"body of {announced} bytes over the {limit}-byte ({limit // MIB} MiB) "
                     f"limit of {review}; Webhooks.{setting} sets it")
    assert seconds < 2  # answered at once: nothing of the body was waited for
    assert rss_kib(worker) - before < 2048


def test_the_largest_conversions_eight_at_once_stay_within_the_memory_they_were_given(
    defaults: Server,
) -> None:
    one = len(conversion_review(2, pad=1000)) - len(conversion_review(1, pad=1000))
    count = DEFAULT_MAX_CONVERSION_BODY_BYTES // one
    body = conversion_review(count, pad=1000)
    while len(body) > DEFAULT_MAX_CONVERSION_BODY_BYTES:  # as many objects as the limit takes
        count -= (len(body) - DEFAULT_MAX_CONVERSION_BODY_BYTES) // one + 1
        body = conversion_review(count, pad=1000)
    assert DEFAULT_MAX_CONVERSION_BODY_BYTES - 64 * 1024 < len(body)
    assert len(body) <= DEFAULT_MAX_CONVERSION_BODY_BYTES
    master = defaults.process.pid
    worker = worker_pid(master)
    base = rss_kib(worker)
    results: list[tuple[int, dict[str, str], bytes]] = []
    lock = threading.Lock()

    def convert() -> None:
        result = post(defaults, "/convert", body)
        with lock:
            results.append(result)

    clients = [threading.Thread(target=convert, name=f"largest-{i}") for i in range(8)]
    for thread in clients:
        thread.start()
    for thread in clients:
        thread.join(timeout=120)
    peak = status_kib(worker, "VmHWM")
    statuses = sorted(status for status, _, _ in results)
    print(f"\n8 conversions of {len(body) / MIB:.1f} MiB at once: {statuses}; worker RSS "
          f"{base / 1024:.0f} MiB, peak {peak / 1024:.0f} MiB; master "
          f"{rss_kib(master) / 1024:.0f} MiB")

    assert len(results) == 8 and set(statuses) <= {200, 503} and 200 in statuses
    for status, headers, content in results:
        if status == 503:  # the budget was full for 2 s: retry, nothing half done
            assert headers.get("Retry-After") == "1"
            assert "body budget (Webhooks.body_budget_bytes)" in json.loads(content)["message"]
        else:
            converted = json.loads(content)["response"]["convertedObjects"]
            assert len(converted) == len(json.loads(body)["request"]["objects"])
    budget = max(DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_CONVERSION_BODY_BYTES)
    allowed_growth = BYTES_PER_BODY_BYTE * (budget + DEFAULT_THREADS * SMALL_BODY_BYTES)
    assert (peak - base) * 1024 < allowed_growth
    limit = memory_limit_mib(budget, DEFAULT_THREADS)
    assert (peak + rss_kib(master)) / 1024 < limit  # the container's, with room to spare


def test_an_oversized_request_fully_sent_is_refused_without_a_traceback(defaults: Server) -> None:
    body = b"{" + b" " * (DEFAULT_MAX_CONVERSION_BODY_BYTES + 10) + b"}"
    status = None
    with defaults.connect(timeout=30) as sock:
        try:
            sock.sendall(http_request(body, path="/convert"))
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass  # answered (413) and closed before the whole body was sent
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except (ConnectionResetError, ssl.SSLError):
            pass
        match = re.match(rb"HTTP/1\.[01] (\d{3})", answer)
        status = int(match.group(1)) if match else None
    assert status in (413, None)
    assert "Traceback" not in defaults.log.read_text(errors="replace")
