"""`Api.request` sends a 429 (or a 5xx) with Retry-After again, as client-go does.

The API server here is a local HTTP server in a thread that answers from a script (say
429 with ``Retry-After: 0.1`` twice, then 200): the transport's own logic, with real
sockets and urllib3's pool. What the real API server does under throttling is
tests/cluster/test_client_retries.py.
"""

from __future__ import annotations

import datetime
import enum
import json
import logging
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from prometheus_client import REGISTRY

from operator_kit.client import transport
from operator_kit.client.transport import (
    MAX_RETRIES,
    MAX_RETRY_AFTER,
    RETRY_JITTER,
    Api,
    ApiError,
    retry_after,
    retry_delay,
    throttle_delay,
    urllib3_retries,
)

Answer = tuple[int, dict[str, str]]
OK: Answer = (200, {})


def throttled(seconds: str = "0.1", status: int = 429) -> Answer:
    return status, {"Retry-After": seconds}


class Scripted(ThreadingHTTPServer):
    """Answers each request with the next scripted (status, headers); the last one
    again once the script runs out. Records what it was sent."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.script: list[Answer] = []
        self.seen: list[tuple[str, str, bytes, float]] = []
        self.lock = threading.Lock()

    def answer(self, method: str, path: str, body: bytes) -> Answer:
        with self.lock:
            self.seen.append((method, path, body, time.monotonic()))
            return self.script.pop(0) if len(self.script) > 1 else self.script[0]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: a retry reuses the drained connection
    server: Scripted

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        status, headers = self.server.answer(self.command, self.path, body)
        if status == 200:
            payload = json.dumps({"kind": "ConfigMap", "attempt": len(self.server.seen)})
        else:
            payload = json.dumps({"kind": "Status", "code": status,
                                  "message": f"scripted {status}"})
        data = payload.encode()
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[Scripted]:
    scripted = Scripted()
    thread = threading.Thread(target=scripted.serve_forever, args=(0.05,),
                              name="scripted-api-server", daemon=True)
    thread.start()
    try:
        yield scripted
    finally:
        scripted.shutdown()
        scripted.server_close()
        thread.join(5)


@pytest.fixture
def api(server: Scripted) -> Iterator[Api]:
    configuration = client.Configuration()
    configuration.host = server.url
    with client.ApiClient(configuration) as api_client:
        yield Api(api_client)


def requests(server: Scripted, code: str, method: str = "GET") -> float:
    host = server.url.removeprefix("http://")
    return REGISTRY.get_sample_value("rest_client_requests_total",
                                     {"code": code, "method": method, "host": host}) or 0.0


def retries(server: Scripted, code: str, method: str = "GET") -> float:
    host = server.url.removeprefix("http://")
    return REGISTRY.get_sample_value("rest_client_request_retries_total",
                                     {"code": code, "verb": method, "host": host}) or 0.0


# -- what is retried ---------------------------------------------------------------------

def test_a_429_with_retry_after_twice_then_200_succeeds_on_the_third_attempt(
        server: Scripted, api: Api, caplog: pytest.LogCaptureFixture) -> None:
    server.script = [throttled("0.1"), throttled("0.1"), OK]
    caplog.set_level(logging.DEBUG, logger="operator_kit.client")
    started = time.monotonic()
    answer = api.get("/api/v1/namespaces/ns/configmaps/cm")
    took = time.monotonic() - started
    assert answer == {"kind": "ConfigMap", "attempt": 3}
    assert len(server.seen) == 3
    waits = [b[3] - a[3] for a, b in zip(server.seen, server.seen[1:], strict=False)]
    assert all(0.1 <= wait < 0.1 * (1 + RETRY_JITTER) + 0.1 for wait in waits), waits
    assert 0.2 <= took < 1.0
    # every attempt counted with its code, each attempt after the first as a retry
    assert (requests(server, "429"), requests(server, "200")) == (2, 1)
    assert (retries(server, "429"), retries(server, "200")) == (1, 1)
    logged = [r.getMessage() for r in caplog.records if r.name == "operator_kit.client"]
    assert len(logged) == 2, logged
    assert all("GET /api/v1/namespaces/ns/configmaps/cm: 429" in m for m in logged)
    assert "retry 1 of 10 in 0.1" in logged[0] and "retry 2 of 10 in 0.1" in logged[1]


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
def test_every_verb_is_retried_with_the_same_body(server: Scripted, api: Api,
                                                  method: str) -> None:
    """The server did not process a request it refused with Retry-After: client-go
    retries any verb whose body it can send again, and ours are always bytes."""
    server.script = [throttled("0"), OK]
    body = {"metadata": {"name": "cm"}, "data": {"k": "v"}}
    assert api.request(method, "/api/v1/namespaces/ns/configmaps", body=body)["attempt"] == 2
    assert [s[0] for s in server.seen] == [method, method]
    assert server.seen[0][2] == server.seen[1][2] == json.dumps(body).encode()


@pytest.mark.parametrize("status", [500, 503, 504])
def test_a_5xx_with_retry_after_is_retried(server: Scripted, api: Api, status: int) -> None:
    server.script = [throttled("0", status), OK]
    assert api.get("/api/v1/pods")["attempt"] == 2


@pytest.mark.parametrize("answer", [
    (429, {}),                                                   # no Retry-After
    (503, {}),
    (500, {"Retry-After": "Wed, 21 Oct 2026 07:28:00 GMT"}),     # a date, not seconds
    (429, {"Retry-After": "-1"}),
    (409, {"Retry-After": "0"}),                                 # not a 429 nor a 5xx
    (404, {"Retry-After": "0"}),
])
def test_other_refusals_are_raised_at_once(server: Scripted, api: Api,
                                           answer: Answer) -> None:
    server.script = [answer, OK]
    with pytest.raises(ApiError) as raised:
        api.get("/api/v1/pods")
    assert raised.value.status == answer[0]
    assert len(server.seen) == 1


def test_after_max_retries_the_last_429_is_raised(server: Scripted, api: Api) -> None:
    server.script = [throttled("0")]
    before = requests(server, "429")
    with pytest.raises(ApiError) as raised:
        api.get("/api/v1/pods")
    assert raised.value.status == 429 and "scripted 429" in str(raised.value)
    assert len(server.seen) == 1 + MAX_RETRIES == 11, "client-go's maxRetries: 10"
    assert requests(server, "429") - before == 11


def test_no_retry_would_end_past_the_requests_timeout(server: Scripted, api: Api) -> None:
    server.script = [throttled("1"), OK]
    started = time.monotonic()
    with pytest.raises(ApiError) as raised:
        api.request("GET", "/api/v1/pods", timeout=0.5)
    assert raised.value.status == 429
    assert time.monotonic() - started < 0.4, "gave up at once, instead of sleeping"
    assert len(server.seen) == 1


def test_the_retries_share_the_requests_timeout(server: Scripted, api: Api) -> None:
    """With Retry-After 0.2 and a 1 s timeout, the retries stop once the next wait would
    pass the deadline: about four attempts, never the eleven of an unbounded loop."""
    server.script = [throttled("0.2")]
    started = time.monotonic()
    with pytest.raises(ApiError):
        api.request("GET", "/api/v1/pods", timeout=1.0)
    assert time.monotonic() - started < 1.0
    assert 2 <= len(server.seen) <= 5, len(server.seen)


def test_a_stream_is_not_retried_its_caller_waits(server: Scripted, api: Api) -> None:
    """A watch's 429 goes back to the informer, which waits the Retry-After on its stop
    event (runtime/watching.py) instead of in a sleep nothing can interrupt."""
    server.script = [throttled("0"), OK]
    with pytest.raises(ApiError) as raised:
        api.request("GET", "/api/v1/pods", query={"watch": True}, stream=True)
    assert raised.value.status == 429 and raised.value.headers["Retry-After"] == "0"
    assert len(server.seen) == 1


def test_a_tuple_timeout_bounds_each_attempt_and_the_retries_still_happen(
        server: Scripted, api: Api) -> None:
    server.script = [throttled("0"), throttled("0"), OK]
    assert api.request("GET", "/api/v1/pods", timeout=(5.0, 5.0))["attempt"] == 3


# -- the delays, pure --------------------------------------------------------------------

def error(status: int, retry: str | None) -> ApiException:
    err = ApiException(status=status, reason="Refused")
    err.headers = {} if retry is None else {"Retry-After": retry}
    return err


def test_retry_after_is_a_number_of_seconds_or_none() -> None:
    assert retry_after(error(429, "1")) == 1.0
    assert retry_after(error(429, " 2 ")) == 2.0
    assert retry_after(error(429, "0.25")) == 0.25  # client-go wants an integer; we take both
    for bad in (None, "", "soon", "-3", "nan", "inf", "Wed, 21 Oct 2026 07:28:00 GMT"):
        assert retry_after(error(429, bad)) is None, bad


def test_retry_delay_is_capped_and_spread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transport.random, "random", lambda: 1.0)
    assert retry_delay(error(429, "3600")) == MAX_RETRY_AFTER * (1 + RETRY_JITTER)
    assert retry_delay(error(503, "2")) == 2 * (1 + RETRY_JITTER)
    monkeypatch.setattr(transport.random, "random", lambda: 0.0)
    assert retry_delay(error(429, "2")) == 2.0
    assert retry_delay(error(429, None)) is None
    assert retry_delay(error(400, "2")) is None
    assert retry_delay(error(0, "2")) is None  # a TLS failure: no answer at all


def test_throttle_delay_for_the_runners_requeue_is_unchanged() -> None:
    assert throttle_delay(error(429, "3")) == 3.0
    assert throttle_delay(error(429, None)) == 1.0
    assert throttle_delay(error(429, "junk")) == 1.0
    assert throttle_delay(error(429, "0")) == 0.1
    assert throttle_delay(error(429, "600")) == 10.0


def test_urllib3_keeps_its_connection_retries_but_not_its_answer_based_ones() -> None:
    """Left to itself urllib3 would send a GET, PUT or DELETE refused with Retry-After
    again up to three times, uncounted and unbounded; `Api.request` does it instead."""
    for configured, total in ((None, 3), (True, 3), (5, 5),
                              (urllib3.Retry(total=2, connect=1, status_forcelist=[429]), 2)):
        retries = urllib3_retries(configured)
        assert isinstance(retries, urllib3.Retry)
        assert retries.total == total
        assert not retries.respect_retry_after_header and not retries.status_forcelist
        assert not retries.is_retry("GET", 429, has_retry_after=True)
    assert urllib3_retries(urllib3.Retry(connect=1)).connect == 1
    assert urllib3_retries(False) is False


# -- what is sent, and how it is counted -----------------------------------------------------

class Colour(enum.Enum):
    RED = "red"


def test_a_body_is_sent_as_the_json_of_the_clients_sanitized_body(server: Scripted,
                                                                  api: Api) -> None:
    server.script = [OK]
    body = {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": client.V1ObjectMeta(name="a", labels={"k": "v"}),
            "data": {"when": datetime.datetime(2026, 1, 2, 3, 4, 5), "colour": Colour.RED,
                     "pair": (1, None), "day": datetime.date(2026, 1, 2)},
            "refs": [client.V1OwnerReference(api_version="v1", kind="K", name="n", uid="u")]}
    api.request("POST", "/api/v1/namespaces/ns/configmaps", body=body)
    expected = json.dumps(api.client.sanitize_for_serialization(body)).encode()
    assert server.seen[0][2] == expected
    assert json.loads(expected)["data"] == {"when": "2026-01-02T03:04:05", "colour": "red",
                                            "pair": [1, None], "day": "2026-01-02"}


def test_what_json_cannot_hold_is_refused_before_anything_is_sent(server: Scripted,
                                                                   api: Api) -> None:
    server.script = [OK]
    with pytest.raises(TypeError, match="bytes is not JSON serializable"):
        api.request("POST", "/api/v1/namespaces/ns/configmaps", body={"data": b"raw"})
    assert server.seen == []


def test_every_answer_is_counted_by_code_and_method_with_its_latency(server: Scripted,
                                                                     api: Api) -> None:
    host = server.url.removeprefix("http://")

    def latencies() -> float:
        return REGISTRY.get_sample_value("rest_client_request_duration_seconds_count",
                                         {"verb": "GET", "host": host}) or 0.0

    before = requests(server, "200"), requests(server, "404"), latencies()
    server.script = [OK, (404, {}), OK]
    api.get("/api/v1/namespaces/ns/configmaps/a")
    with pytest.raises(ApiError):
        api.get("/api/v1/namespaces/ns/configmaps/b")
    api.get("/api/v1/namespaces/ns/configmaps/c")
    after = requests(server, "200"), requests(server, "404"), latencies()
    assert [a - b for a, b in zip(after, before, strict=True)] == [2, 1, 3]
