"""gunicorn's threaded worker, with new connections handshaken in its poller and
deadlines on receiving each request and on sending each answer.

gunicorn's ``gthread`` worker hands each new connection to one of its threads (8), which
waits up to 5 s for a first byte, then does the TLS handshake and reads the request with
blocking reads that have no time limit. Anyone who can reach the port could stop
admission with a few dozen sockets: 24 that never sent a byte made 8 of 16 writes fail
at the API server ("failed calling webhook … timeout"), and one that sends a byte every
few seconds holds its thread for as long as it likes (a per-read socket timeout does not
help: each byte resets it).

`ThreadWorker` changes two things:

- **A new connection costs no thread until its first request byte.** The poller (the
  worker's main loop) accepts it, wraps it in TLS without blocking and drives the
  handshake from readiness events, as Go's net/http does in a goroutine per connection.
  A peer that sends nothing, or part of a ClientHello, costs a socket and under a KiB,
  never a thread. Once the handshake is done the connection waits in the poller, as a
  kept-alive one does between requests (until ``keepalive``), and a thread takes it only
  when request bytes are readable. A handshake not done within
  ``OPERATOR_KIT_READ_TIMEOUT`` seconds (default 5) has its connection closed: a warning
  names a peer that sent part of one, a debug line one that sent nothing (port scans,
  TCP probes).
- **A request must be received in full within ``OPERATOR_KIT_READ_TIMEOUT`` of a thread
  taking it up** (the API server sends even a review of several MiB in milliseconds),
  else its connection is shut down, which wakes the thread blocked on it; a warning names
  the client. One thread, ``operator_kit-read-deadlines``, watches these deadlines; it
  stops with the worker. The time a handler takes once it has read the body does not
  count (the webhook views always read their body).
- **An answer must be sent in full within ``OPERATOR_KIT_WRITE_TIMEOUT`` seconds**
  (default 10) of the app returning it, else its connection is shut down and the thread
  is free again. Without it, a client that sends requests with large answers and never
  reads them holds a thread per request in ``send`` for as long as it keeps its socket
  open: 8 such clients stopped all admission (issue 38, R2). The same thread watches
  these deadlines.

Warnings about slow clients are logged once per client address and reason per minute,
with the count of those left out (`operator_kit.webhooks.limits.LogThrottle`).

``operator_kit_webhook_read_timeouts_total{stage}`` counts the connections closed, by how
far they got (`CONNECTING`, `IDLE`, `REQUEST`); ``operator_kit_webhook_write_timeouts_total``
those closed with their answer unsent.

The remaining limit is gunicorn's ``worker_connections`` (1000) per worker. When that many
connections are open, the one that has waited longest without sending a request byte (in
its handshake, or parked after it) is closed to make room, so idle sockets cannot lock out
the API server's connections; kept-alive connections and requests being read are never
closed for this. Each parked connection costs memory (see bench/idle_socket_bench.py).

`operator_kit.gunicorn_conf` selects this worker (``worker_class``). It relies on the
structure of gunicorn 26 and 27's gthread worker (its poller, ``pending_conns`` and
``enqueue_req``), hence the bound on gunicorn in setup.cfg.
"""

from __future__ import annotations

import errno
import logging
import os
import selectors
import socket
import ssl
import threading
import time
import weakref
from collections.abc import Callable
from functools import partial
from typing import Any

from gunicorn import http
from gunicorn import sock as gsock
from gunicorn.workers.gthread import TConn
from gunicorn.workers.gthread import ThreadWorker as _GThreadWorker

from operator_kit.metrics import WEBHOOK_READ_TIMEOUTS, WEBHOOK_WRITE_TIMEOUTS
from operator_kit.webhooks.limits import LogThrottle

logger = logging.getLogger("operator_kit.gunicorn")

DEFAULT_READ_TIMEOUT = 5.0
DEFAULT_WRITE_TIMEOUT = 10.0
CHECK_INTERVAL = 0.1
SLOW_CLIENT_LOG_INTERVAL = 60.0


def read_timeout_from_env() -> float:
    """``OPERATOR_KIT_READ_TIMEOUT`` in seconds (default 5); a clear error if malformed."""
    return _seconds_from_env("OPERATOR_KIT_READ_TIMEOUT", DEFAULT_READ_TIMEOUT)


def write_timeout_from_env() -> float:
    """``OPERATOR_KIT_WRITE_TIMEOUT`` in seconds (default 10); a clear error if malformed."""
    return _seconds_from_env("OPERATOR_KIT_WRITE_TIMEOUT", DEFAULT_WRITE_TIMEOUT)


def _seconds_from_env(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{name} must be a positive number of seconds, got {raw!r}")
    return value


CONNECTING, IDLE, REQUEST = "connecting", "idle", "request"
"""How far a connection got: in its TLS handshake, done with it (or kept alive) but sent
no byte of a request yet, or partway through a request."""
ANSWER = "answer"
"""Its answer is being sent (the write deadline's only stage)."""


class ReadDeadlines:
    """Connections whose request is being read (or, for the write deadline, whose answer
    is being sent), each with the time it must be done by.

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


class PolledConn(TConn):  # type: ignore[misc]
    """A connection whose TLS handshake the worker's poller does (`ThreadWorker.accept`).

    ``init``, which gunicorn calls in the thread that takes the connection, then only
    makes the request parser: the socket is wrapped already."""

    sock: Any
    parser: Any
    initialized: bool

    def __init__(self, cfg: Any, sock: Any, client: Any, server: Any) -> None:
        super().__init__(cfg, sock, client, server)
        self.handshaken = False
        self.heard = False  # some byte arrived while connecting
        self.deadline = 0.0  # for its handshake (monotonic)

    def start_tls(self) -> None:
        """Wrap the (non-blocking) socket in TLS; the handshake is then driven by
        `ThreadWorker._advance`."""
        self.sock = gsock.ssl_context(self.cfg).wrap_socket(
            self.sock, server_side=True, do_handshake_on_connect=False,
            suppress_ragged_eofs=self.cfg.suppress_ragged_eofs,
        )

    def init(self) -> None:
        if self.initialized:
            return
        if not self.handshaken:  # plain HTTP: gunicorn's own
            super().init()
            return
        self.initialized = True
        self.sock.setblocking(True)
        if self.parser is not None:
            return
        if gsock.is_http2_negotiated(self.sock):
            self.is_http2 = True
            self.parser = http.get_parser(self.cfg, self.sock, self.client,
                                          http2_connection=True)
            self.parser.initiate_connection()
        else:
            self.parser = http.get_parser(self.cfg, self.sock, self.client)


class ThreadWorker(_GThreadWorker):  # type: ignore[misc]
    """gunicorn's gthread worker; connections handshaken in the poller, deadlines on
    reading each request and sending each answer (module docstring)."""

    wsgi: Any  # gunicorn's: the app it serves, set by load_wsgi

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.read_deadlines = ReadDeadlines(read_timeout_from_env())
        self.write_deadlines = ReadDeadlines(write_timeout_from_env())
        self.slow_client_log = LogThrottle(SLOW_CLIENT_LOG_INTERVAL)
        self._in_thread = threading.local()  # the connection a thread is answering
        self._deadline_stop = threading.Event()
        # Connections not yet given to a thread, oldest first: in their handshake
        # (plain HTTP: waiting for a first byte), with the event each waits for.
        self.connecting: dict[PolledConn, int] = {}

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
            for conn in list(self.connecting):
                self._drop(conn)

    def load_wsgi(self) -> None:
        """The app, wrapped so that a thread's answer gets its write deadline once the
        app has returned it (Flask has computed the whole answer by then)."""
        super().load_wsgi()
        app: Any = self.wsgi
        in_thread, deadlines = self._in_thread, self.write_deadlines

        def answer_in_time(environ: Any, start_response: Any) -> Any:
            result = app(environ, start_response)
            conn = getattr(in_thread, "conn", None)
            if conn is not None:
                deadlines.begin(conn, ANSWER)
            return result

        self.wsgi = answer_in_time

    # -- in the poller (the worker's main thread) ---------------------------------------

    def accept(self, listener: Any) -> None:
        try:
            client_sock, client_addr = listener.accept()
        except OSError as err:
            if err.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        self.nr_conns += 1
        conn = PolledConn(self.cfg, client_sock, client_addr, listener.getsockname())
        conn.deadline = time.monotonic() + self.read_deadlines.timeout
        if self.cfg.is_ssl:
            try:
                conn.start_tls()
            except (ssl.SSLError, OSError, ValueError) as err:
                logger.debug("TLS with %s could not start: %s", _address(client_addr), err)
                self.nr_conns -= 1
                conn.close()
                return
        self.connecting[conn] = selectors.EVENT_READ
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._advance, conn))
        if self.nr_conns >= self.worker_connections:
            self._make_room()

    def _advance(self, conn: PolledConn, _fileobj: Any) -> None:
        """The connection is readable (or writable, as its handshake asked): take the
        handshake a step further, and once it is done, park it or hand it to a thread."""
        if self.connecting.get(conn) == selectors.EVENT_READ:
            conn.heard = True
        if self.cfg.is_ssl:
            try:
                conn.sock.do_handshake()
            except ssl.SSLWantReadError:
                self._wait_for(conn, selectors.EVENT_READ)
                return
            except ssl.SSLWantWriteError:
                self._wait_for(conn, selectors.EVENT_WRITE)
                return
            except (ssl.SSLError, OSError, ValueError) as err:
                logger.debug("TLS handshake with %s failed: %s", _address(conn.client), err)
                self._drop(conn)
                return
            conn.handshaken = True
        del self.connecting[conn]
        self.poller.unregister(conn.sock)
        if not self.cfg.is_ssl or conn.sock.pending() > 0:
            conn.data_ready = True  # bytes of a request are here already
            self.enqueue_req(conn)
            return
        # Handshaken, no request yet: wait in the poller, as gunicorn parks a connection
        # that sent no data (Go's HTTP client dials spare connections ahead).
        conn.sock.setblocking(False)
        conn.timeout = time.monotonic() + self.cfg.keepalive
        self.pending_conns.append(conn)
        self.poller.register(conn.sock, selectors.EVENT_READ,
                             partial(self.on_pending_socket_readable, conn))

    def _wait_for(self, conn: PolledConn, event: int) -> None:
        if self.connecting[conn] != event:
            self.connecting[conn] = event
            self.poller.modify(conn.sock, event, partial(self._advance, conn))

    def _drop(self, conn: PolledConn) -> None:
        if self.connecting.pop(conn, None) is not None:
            try:
                self.poller.unregister(conn.sock)
            except (KeyError, ValueError, OSError):
                pass
        self.nr_conns -= 1
        conn.close()

    def murder_pending(self) -> None:
        """gunicorn's sweep of parked connections, and of handshakes past their deadline."""
        super().murder_pending()
        now = time.monotonic()
        while self.connecting:
            conn = next(iter(self.connecting))
            if conn.deadline > now and self.alive:
                break
            if self.alive:
                self._count_timeout(conn)
            self._drop(conn)

    def _count_timeout(self, conn: PolledConn) -> None:
        WEBHOOK_READ_TIMEOUTS.labels(CONNECTING).inc()
        client = _address(conn.client)
        if conn.heard:
            self._warn(conn, CONNECTING, "its request was not received within %.1f s "
                       "(stalled in its TLS handshake: a slow or stalled client; "
                       "OPERATOR_KIT_READ_TIMEOUT)", self.read_deadlines.timeout)
        else:
            logger.debug("closed the connection from %s: it sent nothing within %.1f s",
                         client, self.read_deadlines.timeout)

    def _make_room(self) -> None:
        """At gunicorn's connection cap: close the connection that has waited longest
        without sending a request byte, so that idle sockets cannot keep out new ones."""
        if self.connecting:
            oldest = next(iter(self.connecting))
            logger.debug("closed the connection from %s to make room: %d connections open",
                         _address(oldest.client), self.nr_conns)
            self._drop(oldest)
        elif self.pending_conns:
            conn = self.pending_conns.popleft()
            try:
                self.poller.unregister(conn.sock)
            except (KeyError, ValueError, OSError):
                pass
            self.nr_conns -= 1
            conn.close()

    # -- in the threads -----------------------------------------------------------------

    def handle(self, conn: Any) -> Any:
        if getattr(conn, "initialized", True):  # kept alive: waiting for its next request
            self.read_deadlines.begin(conn, IDLE)
        else:  # its first request (handshaken already, or plain HTTP)
            self.read_deadlines.begin(conn, IDLE if getattr(conn, "handshaken", False)
                                      else CONNECTING)
            self._follow_stages(conn)
        try:
            return super().handle(conn)
        finally:
            self.read_deadlines.end(conn)

    def handle_request(self, req: Any, conn: Any) -> Any:
        # The headers are in. The read ends with the body: now if there is none, else when
        # the app (or gunicorn's drain after it) reaches its end.
        body: Any = getattr(req, "body", None)
        reader = getattr(body, "reader", None)
        if reader is None or getattr(reader, "length", None) == 0:
            self.read_deadlines.end(conn)
        else:
            body.reader = _EndOfBody(reader, lambda: self.read_deadlines.end(conn))
        self._in_thread.conn = conn
        try:
            return super().handle_request(req, conn)
        finally:
            self._in_thread.conn = None
            self.write_deadlines.end(conn)

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
                    self._warn(conn, stage, "its request was not received within %.1f s "
                               "(a slow or stalled client; OPERATOR_KIT_READ_TIMEOUT)",
                               self.read_deadlines.timeout)
            for conn, _ in self.write_deadlines.expired():
                if getattr(conn, "is_http2", False) or not shut_down(getattr(conn, "sock", None)):
                    continue
                WEBHOOK_WRITE_TIMEOUTS.inc()
                self._warn(conn, ANSWER, "its answer was not taken within %.1f s (a client "
                           "that does not read, or reads too slowly; OPERATOR_KIT_WRITE_TIMEOUT)",
                           self.write_deadlines.timeout)

    def _warn(self, conn: Any, reason: str, message: str, *args: Any) -> None:
        """A warning about a slow client, once per address and reason per interval."""
        client = getattr(conn, "client", None)
        host = client[0] if isinstance(client, tuple) and client else str(client)
        left_out = self.slow_client_log.admit((host, reason))
        if left_out is None:
            return
        more = (f" ({left_out} more like it from {host} since the last such line, not logged)"
                if left_out else "")
        logger.warning("closed the connection from %s: " + message + "%s",
                       _address(client), *args, more)


def _address(client: Any) -> str:
    if isinstance(client, tuple) and len(client) >= 2:
        return f"{client[0]}:{client[1]}"
    return str(client or "an unknown client")
