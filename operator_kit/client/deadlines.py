"""Request deadlines kept by a reaper, not by socket timeouts.

Every request operator_kit sends has a deadline (60 s by default): a connection that stops
answering must not hold a worker for ever. The obvious way, a socket timeout, is costly in
CPython: a socket with a timeout is non-blocking underneath, so each TLS write polls first,
and waiting for the answer is a read that fails (EAGAIN), a ``poll``, then the read again —
three system calls more per request than on a blocking socket, each of which hands the GIL
to another thread and takes it back. With a controller's eight workers all waiting on the
API server, that doubled the futex calls per request (``strace -c`` on
`bench/controller_bench.py`'s worker: 15.3 per request, 7.5 with the reaper).

So, as Go's ``net/http`` keeps a deadline apart from the read itself, a request with a
long enough deadline waits on a blocking socket, and one thread — the reaper, started on
first use, ending once no deadline has been open for `IDLE_EXIT` seconds — looks at the
open deadlines every `PERIOD` seconds and shuts down the socket of any request past its
own: the blocked read returns at once, and `operator_kit.client.transport` raises urllib3's
``ReadTimeoutError`` as a socket timeout would have. Registering a deadline wakes nobody
(no futex); the reaper's scan costs a few microseconds per open request. A deadline is
kept to within `PERIOD`; shorter ones (`SHORTEST`, the leader election's) keep socket
timeouts, as do streams (a watch's read timeout is per read).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any

import urllib3
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

PERIOD = 0.1
"""Seconds between the reaper's looks at the open deadlines: how late one may end."""

SHORTEST = 5.0
"""A request with a shorter deadline keeps a socket timeout (exact to the millisecond)."""

IDLE_EXIT = 30.0
"""The reaper's thread ends after this many seconds without an open deadline."""

__all__ = ["REAPER", "Deadline", "Reaper", "request", "use_reaper"]


class Deadline:
    """One request's deadline: open from before it is sent until its answer is read."""

    __slots__ = ("_reaper", "_sock", "at", "expired")

    def __init__(self, reaper: Reaper, at: float) -> None:
        self.at = at
        self.expired = False
        self._sock: socket.socket | None = None
        self._reaper = reaper

    def passed(self) -> bool:
        """Whether the deadline has passed (the reaper may not have looked yet)."""
        return self.expired or time.monotonic() >= self.at

    def left(self) -> float:
        """Seconds left; `TimeoutError` when there are none (a retry after the deadline
        must not wait again)."""
        left = self.at - time.monotonic()
        if self.expired or left <= 0:
            self.expired = True
            raise TimeoutError("the request's deadline passed")
        return left

    def attach(self, sock: Any) -> None:
        """The request is about to be sent on `sock` (`TimeoutError` if too late)."""
        with self._reaper.lock:
            self.left()
            self._sock = sock

    def detach(self) -> None:
        """Its connection goes back to the pool (its answer read): from here on, the
        socket may carry another request, and this deadline never shuts it down."""
        with self._reaper.lock:
            self._sock = None

    def close(self) -> None:
        """The request is over (answered or failed): the reaper lets it be."""
        self._reaper.close(self)


class Reaper:
    """The open deadlines, and the thread that ends requests past theirs."""

    def __init__(self, period: float = PERIOD, idle_exit: float = IDLE_EXIT) -> None:
        self.period = period
        self.idle_exit = idle_exit
        self.lock = threading.Lock()
        self._open: set[Deadline] = set()
        self._thread: threading.Thread | None = None
        self.reaped = 0  # requests whose socket it shut down (for tests and debugging)

    def open(self, seconds: float) -> Deadline:
        """A deadline `seconds` from now, watched until it is closed."""
        deadline = Deadline(self, time.monotonic() + seconds)
        with self.lock:
            self._open.add(deadline)
            if self._thread is None:  # none, or it ended: its last act was to say so
                self._thread = threading.Thread(
                    target=self._run, name="operator_kit-request-deadlines", daemon=True)
                self._thread.start()
        return deadline

    def running(self) -> bool:
        """Whether its thread runs (it ends after `idle_exit` seconds without work)."""
        with self.lock:
            return self._thread is not None

    def close(self, deadline: Deadline) -> None:
        with self.lock:
            self._open.discard(deadline)
            deadline._sock = None

    def _run(self) -> None:
        idle_since = time.monotonic()
        while True:
            time.sleep(self.period)
            now = time.monotonic()
            with self.lock:
                if not self._open:
                    if now - idle_since >= self.idle_exit:
                        self._thread = None  # the next open() starts another
                        return
                    continue
                idle_since = now
                for deadline in [d for d in self._open if d.at <= now]:
                    self._open.discard(deadline)
                    deadline.expired = True
                    if deadline._sock is not None:
                        self.reaped += 1
                        try:
                            deadline._sock.shutdown(socket.SHUT_RDWR)
                        except OSError:
                            pass  # closed already: nothing waits on it

    def forget_after_fork(self) -> None:
        """In a forked child (gunicorn's workers): the parent's thread is not here, and
        its requests are not this process's."""
        self.lock = threading.Lock()
        self._open = set()
        self._thread = None


REAPER = Reaper()
"""The process's reaper: deadlines are a property of requests, not of one client."""
os.register_at_fork(after_in_child=REAPER.forget_after_fork)

class _Waiting(threading.local):
    deadline: Deadline | None = None  # the request this thread is sending, if any


_waiting = _Waiting()


class _Waits:
    """What the connections below add: the request's deadline bounds their waits.
    Connecting keeps a socket timeout, cut to the time the request has left; sending and
    waiting for the answer are on a blocking socket that the reaper shuts down at the
    deadline (in timeout mode, each TLS write polls first, each read fails once before
    it polls). urllib3's retries (of a GET after a read error, or a refused connection)
    fail at once after the deadline."""

    deadline: Deadline | None = None  # the request's that waits on it, until it is back
    sock: Any
    timeout: Any

    def connect(self) -> None:
        deadline = _waiting.deadline
        if deadline is not None:
            left = deadline.left()
            self.timeout = (min(self.timeout, left)
                            if isinstance(self.timeout, int | float) else left)
        super().connect()  # type: ignore[misc]

    def request(self, *args: Any, **kwargs: Any) -> None:
        deadline = _waiting.deadline
        if deadline is not None:
            if self.sock is None:  # plain HTTP connects lazily: do it here, bounded
                self.connect()
            deadline.attach(self.sock)  # TimeoutError if it has passed
            self.deadline = deadline
            self.timeout = None  # blocking, from here to the end of the answer
        super().request(*args, **kwargs)  # type: ignore[misc]

    def getresponse(self, *args: Any, **kwargs: Any) -> Any:
        if self.deadline is not None:
            self.timeout = None  # urllib3 set the read timeout: None, as asked
        return super().getresponse(*args, **kwargs)  # type: ignore[misc]


class _Connection(_Waits, urllib3.connection.HTTPConnection):
    pass


class _TLSConnection(_Waits, urllib3.connection.HTTPSConnection):
    pass


class _Returns:
    """What the pools below add: a connection goes back to the pool (urllib3 does so as
    soon as an answer is read to its end) with its request's deadline detached, before
    anyone reuses it."""

    def _put_conn(self, conn: Any) -> None:
        deadline = getattr(conn, "deadline", None)
        if deadline is not None:
            deadline.detach()
            conn.deadline = None
        super()._put_conn(conn)  # type: ignore[misc]


class _Pool(_Returns, HTTPConnectionPool):
    ConnectionCls = _Connection


class _TLSPool(_Returns, HTTPSConnectionPool):
    ConnectionCls = _TLSConnection


def use_reaper(pool: Any) -> bool:
    """Make `pool` (the kubernetes client's urllib3 PoolManager) open connections whose
    waits the reaper can end; whether it does. Only a plain PoolManager that has not
    connected yet: a proxy or SOCKS manager keeps its own connection classes, and the
    connections of one already used were made without the hook; their requests keep
    socket timeouts."""
    ours = {"http": _Pool, "https": _TLSPool}
    if type(pool) is not urllib3.PoolManager:
        return False
    if getattr(pool, "pool_classes_by_scheme", None) == ours:
        return True  # a client shared by several Apis: done already
    if len(pool.pools):
        return False
    pool.pool_classes_by_scheme = ours
    return True


def request(pool: Any, method: str, url: str, timeout: float | tuple[float, float] | None,
            *, reaped: bool, **options: Any) -> Any:
    """``pool.request`` within `timeout`: seconds for the whole request, (connect, read)
    seconds for a stream (a socket timeout per read), or None (urllib3's default). With
    `reaped` (`use_reaper` said yes; not a stream) and a deadline of at least `SHORTEST`,
    the wait is on a blocking socket and the reaper ends it; the answer's body is then
    read here too, within the deadline. A request past its deadline raises urllib3's
    ``ReadTimeoutError``, whichever error the shut-down socket gave."""
    if isinstance(timeout, tuple):
        connect, read = timeout
        return pool.request(method, url, timeout=urllib3.Timeout(connect=connect, read=read),
                            **options)
    if not timeout:
        return pool.request(method, url, **options)
    if not reaped or timeout < SHORTEST:
        return pool.request(method, url, timeout=urllib3.Timeout(total=timeout), **options)
    deadline = REAPER.open(timeout)
    _waiting.deadline = deadline
    try:
        response = pool.request(method, url, timeout=urllib3.Timeout(connect=timeout, read=None),
                                **options)
        response.data  # noqa: B018 - the body, within the deadline
        return response
    except Exception as err:
        if deadline.passed():
            raise urllib3.exceptions.ReadTimeoutError(
                pool, url, f"Read timed out. (deadline={timeout:g}s)") from err
        raise
    finally:
        _waiting.deadline = None
        deadline.close()
