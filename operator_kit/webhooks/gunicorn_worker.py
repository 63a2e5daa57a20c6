"""gunicorn's threaded worker, with a deadline on receiving each request.

gunicorn's ``gthread`` worker hands a connection to one of its threads, which then reads
the TLS handshake, the request line and headers, and (through the app) the body with
blocking reads that have no time limit. A client that stalls or trickles — one byte every
few seconds — holds that thread for as long as it likes, and as many such clients as the
worker has threads (8) stop every webhook from being answered: the API server's own calls
wait until its webhook timeout and then fail. A per-read socket timeout does not help, as
each trickled byte resets it.

`ThreadWorker` bounds the whole *read* of a request instead: from the moment a thread
takes the connection up to the last byte of the body, at most ``OPERATOR_KIT_READ_TIMEOUT``
seconds (default 5; the API server sends even a review of several MiB in milliseconds). A
request not received by then has its connection shut down, which wakes the thread
blocked on it; the connection is closed, a warning names the client, and
``operator_kit_webhook_read_timeouts_total{stage}`` counts it.

A new connection holds a thread only while it has something to read: once its TLS
handshake is done, if no request byte follows within ``REQUEST_GRACE`` (0.2 s) it goes back
to gunicorn's poller, like a kept-alive connection between requests, and costs no thread
until a request arrives (or ``keepalive`` passes). Go's HTTP client, the API server's,
dials connections ahead and parks the spare ones; held in threads, a burst of them took
all 8 and a review on a new connection queued behind them for up to two read deadlines.
(gunicorn older than 26 cannot take a connection back: there such a connection holds its
thread until its deadline, and is then closed, logged at debug level only.)

The time a handler takes once it has read the body does not count, nor does writing the
answer (a route that never reads its body keeps the clock running while it works: the
webhook views always read it).
One thread, ``operator_kit-read-deadlines``, watches the deadlines; it stops with the
worker.

`operator_kit.gunicorn_conf` selects this worker (``worker_class``).
"""

from __future__ import annotations

import logging
import os
import select
import socket
import ssl
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from gunicorn.workers import gthread
from gunicorn.workers.gthread import ThreadWorker as _GThreadWorker

from operator_kit.metrics import WEBHOOK_READ_TIMEOUTS

logger = logging.getLogger("operator_kit.gunicorn")

DEFAULT_READ_TIMEOUT = 5.0
CHECK_INTERVAL = 0.1
REQUEST_GRACE = 0.2
"""How long a thread waits, after a new connection's TLS handshake, for its first request
byte before handing the connection back to the poller."""

# gunicorn >= 26 has "give it back to the poller"; older ones keep the thread.
_DEFER: Any = getattr(gthread, "_DEFER", None)
DATA_TIMEOUT: float = getattr(gthread, "DEFAULT_WORKER_DATA_TIMEOUT", 5.0)


def read_timeout_from_env() -> float:
    """``OPERATOR_KIT_READ_TIMEOUT`` in seconds (default 5); a clear error if malformed."""
    raw = os.environ.get("OPERATOR_KIT_READ_TIMEOUT", "").strip()
    if not raw:
        return DEFAULT_READ_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise ValueError(
            f"OPERATOR_KIT_READ_TIMEOUT must be a positive number of seconds, got {raw!r}"
        )
    return value


CONNECTING, IDLE, REQUEST = "connecting", "idle", "request"
"""How far a connection got: in its TLS handshake, done with it (or kept alive) but sent
no byte of a request yet, or partway through a request."""


class ReadDeadlines:
    """Connections whose request is being read, each with the time it must be read by.

    `begin` when a thread takes a connection, `reached` as it gets further (see
    CONNECTING, IDLE, REQUEST), `end` once its request has been read (or the thread is
    done with it); `expired` takes out those past their deadline, with how far each got.
    Thread-safe; the clock is injectable for tests.
    """

    def __init__(self, timeout: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout = timeout
        self._clock = clock
        self._lock = threading.Lock()
        self._deadlines: dict[int, tuple[float, Any, str]] = {}

    def begin(self, conn: Any, stage: str = REQUEST) -> None:
        with self._lock:
            self._deadlines[id(conn)] = (self._clock() + self.timeout, conn, stage)

    def reached(self, conn: Any, stage: str) -> None:
        with self._lock:
            entry = self._deadlines.get(id(conn))
            if entry is not None:
                self._deadlines[id(conn)] = (entry[0], conn, stage)

    def end(self, conn: Any) -> None:
        with self._lock:
            self._deadlines.pop(id(conn), None)

    def expired(self) -> list[tuple[Any, str]]:
        now = self._clock()
        with self._lock:
            late = [key for key, (deadline, _, _) in self._deadlines.items() if deadline <= now]
            return [self._deadlines.pop(key)[1:] for key in late]

    def __len__(self) -> int:
        with self._lock:
            return len(self._deadlines)


class _EndOfBody:
    """Wraps a gunicorn body reader: calls `done` once the body has been read to its end."""

    def __init__(self, reader: Any, done: Callable[[], None]) -> None:
        self._reader = reader
        self._done = done

    def read(self, size: int) -> bytes:
        data: bytes = self._reader.read(size)
        if not data or getattr(self._reader, "length", None) == 0:
            self._done()
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reader, name)


def shut_down(sock: Any) -> bool:
    """Shut a connection down in both directions so a thread blocked reading it wakes up.

    The plain socket call is used even for TLS: `ssl.SSLSocket.shutdown` would also drop
    the TLS state the blocked thread is using. False if the socket is already closed.
    """
    if sock is None or sock.fileno() == -1:
        return False
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:  # already disconnected
        return False
    return True


class ThreadWorker(_GThreadWorker):  # type: ignore[misc]
    """gunicorn's gthread worker with a deadline on reading each request (module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.read_deadlines = ReadDeadlines(read_timeout_from_env())
        self._deadline_stop = threading.Event()

    def run(self) -> None:
        watcher = threading.Thread(
            target=self._watch_deadlines, name="operator_kit-read-deadlines", daemon=True
        )
        watcher.start()
        try:
            super().run()
        finally:
            self._deadline_stop.set()
            watcher.join(timeout=5)

    def handle(self, conn: Any) -> Any:
        if getattr(conn, "initialized", True):  # kept alive: waiting for its next request
            self.read_deadlines.begin(conn, IDLE)
        else:
            self.read_deadlines.begin(conn, CONNECTING)
            self._follow_stages(conn)
            if _DEFER is not None:
                deferred = self._handshake_or_defer(conn)
                if deferred is not None:
                    self.read_deadlines.end(conn)
                    return deferred
        try:
            return super().handle(conn)
        finally:
            self.read_deadlines.end(conn)

    def _handshake_or_defer(self, conn: Any) -> Any:
        """Do a new connection's TLS handshake here; hand it back to the poller (no thread
        held) if no request byte follows within REQUEST_GRACE seconds.

        Go's HTTP client (the API server's) dials connections ahead and parks the spare
        ones: blocked on them until the read deadline, 8 threads were soon all held by
        connections that carry no request, and a review on a new connection queued behind
        them for up to two read deadlines. Parked in the poller like a kept-alive
        connection, an idle one costs a socket until ``keepalive``, and no thread.

        None: go on in this thread (the handshake is done, or not wanted: plain HTTP,
        HTTP/2). `_DEFER`, or False when the handshake failed (logged at debug level, as
        gunicorn logs a client that goes away)."""
        if not getattr(self.cfg, "is_ssl", False) or not callable(getattr(conn, "init", None)):
            return None
        if not conn.data_ready and not conn.wait_for_data(DATA_TIMEOUT):
            return _DEFER
        try:
            conn.sock.setblocking(True)
            conn.init()
        except (ssl.SSLError, OSError, ValueError) as err:
            logger.debug("TLS handshake with %s failed: %s",
                         _address(getattr(conn, "client", None)), err)
            shut_down(conn.sock)  # gunicorn closes it: at once, there is nothing to drain
            return False
        if getattr(conn, "is_http2", False) or _request_waiting(conn.sock, REQUEST_GRACE):
            return None
        return _DEFER

    def handle_request(self, req: Any, conn: Any) -> Any:
        # The headers are in. The read ends with the body: now if there is none, else when
        # the app (or gunicorn's drain after it) reaches its end.
        body: Any = getattr(req, "body", None)
        reader = getattr(body, "reader", None)
        if reader is None or getattr(reader, "length", None) == 0:
            self.read_deadlines.end(conn)
        else:
            body.reader = _EndOfBody(reader, lambda: self.read_deadlines.end(conn))
        return super().handle_request(req, conn)

    def _follow_stages(self, conn: Any) -> None:
        """Note when `conn` is through its TLS handshake, and when a request's first byte
        arrives, by wrapping its (idempotent) ``init`` and then its parser's socket reads.

        The wrappers hold the connection and its reader weakly: they are stored on them,
        and a reference cycle per connection would keep each one (and its TLS buffers)
        alive until a full garbage collection."""
        init = getattr(type(conn), "init", None)
        if init is None or getattr(conn, "_operator_kit_followed", False):
            return
        conn._operator_kit_followed = True
        deadlines = self.read_deadlines
        conn_ref = weakref.ref(conn)

        def init_and_follow() -> None:
            this = conn_ref()
            if this is None:
                return
            init(this)
            deadlines.reached(this, IDLE)
            unreader: Any = getattr(getattr(this, "parser", None), "unreader", None)
            chunk = getattr(type(unreader), "chunk", None)
            if chunk is None:
                return
            unreader_ref = weakref.ref(unreader)

            def chunk_and_note(*args: Any, **kwargs: Any) -> Any:
                data = chunk(unreader_ref(), *args, **kwargs)
                reader = conn_ref()
                if data and reader is not None:
                    deadlines.reached(reader, REQUEST)
                return data

            unreader.chunk = chunk_and_note

        conn.init = init_and_follow

    def _watch_deadlines(self) -> None:
        while not self._deadline_stop.wait(CHECK_INTERVAL):
            for conn, stage in self.read_deadlines.expired():
                if getattr(conn, "is_http2", False):
                    continue  # streams are multiplexed: a deadline per request does not fit
                if not shut_down(getattr(conn, "sock", None)):
                    continue
                WEBHOOK_READ_TIMEOUTS.labels(stage).inc()
                client = _address(getattr(conn, "client", None))
                if stage == IDLE:  # a client's spare connection (Go dials ahead), not a request
                    logger.debug("closed the idle connection from %s: no request began on it "
                                 "within %.1f s", client, self.read_deadlines.timeout)
                else:
                    logger.warning(
                        "closed the connection from %s: its request was not received "
                        "within %.1f s (a slow or stalled client; OPERATOR_KIT_READ_TIMEOUT)",
                        client, self.read_deadlines.timeout,
                    )


def _request_waiting(sock: Any, timeout: float) -> bool:
    """Whether bytes of a request are (or within `timeout` become) readable on `sock`."""
    pending = getattr(sock, "pending", None)
    if callable(pending) and pending() > 0:  # already decrypted, in the TLS buffer
        return True
    try:
        readable, _, _ = select.select([sock], [], [], timeout)
    except (OSError, ValueError):  # closed meanwhile: let the thread find out
        return True
    return bool(readable)


def _address(client: Any) -> str:
    if isinstance(client, tuple) and len(client) >= 2:
        return f"{client[0]}:{client[1]}"
    return str(client or "an unknown client")
