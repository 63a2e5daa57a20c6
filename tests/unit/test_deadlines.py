"""Request deadlines kept by the reaper (operator_kit.client.deadlines): a request waits on
a blocking socket, and the reaper shuts the socket down once the request's deadline has
passed — never a socket whose request is over and that may carry another one."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
import urllib3

from operator_kit.client import deadlines
from operator_kit.client.deadlines import Reaper


@pytest.fixture
def reaper() -> Reaper:
    """A reaper of its own that looks every 20 ms (the process's looks every 100 ms)."""
    return Reaper(period=0.02, idle_exit=1.0)


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def test_a_wait_past_its_deadline_is_ended_by_the_reaper(
        reaper: Reaper, pair: tuple[socket.socket, socket.socket]) -> None:
    waiting, _ = pair
    deadline = reaper.open(0.2)
    deadline.attach(waiting)
    started = time.monotonic()
    assert waiting.recv(1) == b"", "the blocked read returns once the socket is shut down"
    assert 0.15 <= time.monotonic() - started < 1.0
    assert deadline.expired and reaper.reaped == 1
    deadline.close()


def test_a_socket_back_in_the_pool_is_never_shut_down(
        reaper: Reaper, pair: tuple[socket.socket, socket.socket]) -> None:
    reused, peer = pair
    deadline = reaper.open(0.1)
    deadline.attach(reused)
    deadline.detach()  # the answer was read: the connection went back to the pool
    time.sleep(0.3)  # well past the deadline
    peer.sendall(b"x")
    assert reused.recv(1) == b"x", "another request's socket still works"
    assert reaper.reaped == 0
    deadline.close()


def test_a_closed_deadline_is_forgotten(
        reaper: Reaper, pair: tuple[socket.socket, socket.socket]) -> None:
    deadline = reaper.open(0.1)
    deadline.attach(pair[0])
    deadline.close()
    time.sleep(0.3)
    assert not deadline.expired and reaper.reaped == 0


def test_a_retry_after_the_deadline_does_not_wait_again(
        reaper: Reaper, pair: tuple[socket.socket, socket.socket]) -> None:
    deadline = reaper.open(0.05)
    time.sleep(0.1)
    with pytest.raises(TimeoutError):
        deadline.attach(pair[0])  # urllib3 reads this as a read timeout
    assert deadline.expired
    deadline.close()


def test_the_reaper_thread_ends_when_idle_and_comes_back_on_demand() -> None:
    reaper = Reaper(period=0.01, idle_exit=0.1)
    reaper.open(10).close()
    assert reaper.running()
    deadline_at = time.monotonic() + 5
    while reaper.running() and time.monotonic() < deadline_at:
        time.sleep(0.02)
    assert not reaper.running(), "no thread is kept for an idle process"
    reaper.open(10).close()
    assert reaper.running()


def test_only_a_plain_pool_manager_that_has_not_connected_takes_the_hook() -> None:
    fresh = urllib3.PoolManager()
    assert deadlines.use_reaper(fresh)
    assert deadlines.use_reaper(fresh), "a second Api on the same client"
    used = urllib3.PoolManager()
    used.connection_from_url("https://example.invalid")  # a pool exists: made without it
    assert not deadlines.use_reaper(used)
    assert not deadlines.use_reaper(urllib3.ProxyManager("http://127.0.0.1:3128"))


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A TCP server that accepts connections and never answers (a stalled peer)."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, name="silent-server")
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/"
    stop.set()
    thread.join()
    for sock in accepted:
        sock.close()
    listener.close()


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_request_to_a_silent_server_ends_at_its_deadline(
        silent_server: str, method: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deadlines, "SHORTEST", 0.1)
    pool = urllib3.PoolManager()
    assert deadlines.use_reaper(pool)
    started = time.monotonic()
    with pytest.raises(urllib3.exceptions.ReadTimeoutError, match=r"deadline=0\.5s"):
        deadlines.request(pool, method, silent_server, 0.5, reaped=True,
                          retries=urllib3.Retry(3), body=b"{}" if method == "POST" else None)
    elapsed = time.monotonic() - started
    # GET is retried by urllib3 after a read error; the retries do not wait again
    assert 0.45 <= elapsed < 0.5 + 3 * deadlines.PERIOD, elapsed


def test_a_short_deadline_keeps_a_socket_timeout(silent_server: str) -> None:
    pool = urllib3.PoolManager()
    assert deadlines.use_reaper(pool)
    before = deadlines.REAPER.reaped
    with pytest.raises(urllib3.exceptions.ReadTimeoutError,
                       match=r"Read timed out\. \(read timeout="):
        deadlines.request(pool, "POST", silent_server, 0.3, reaped=True, body=b"{}")
    assert deadlines.REAPER.reaped == before, "not the reaper's: below SHORTEST"


def test_a_forked_child_starts_a_reaper_of_its_own() -> None:
    """gunicorn forks its workers: the parent's reaper thread is not in the child, and
    the child's requests must still have their deadlines kept."""
    import os

    deadlines.REAPER.open(10).close()  # the parent's reaper runs
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a deadline of its own is kept
        import signal

        signal.alarm(5)  # a reaper that never came would leave it blocked: end it
        reaper_ok = not deadlines.REAPER.running()
        deadline = deadlines.REAPER.open(0.2)
        a, _peer = socket.socketpair()
        deadline.attach(a)
        ended = a.recv(1) == b"" and deadline.expired
        os.write(write, b"ok" if reaper_ok and ended else b"no")
        os._exit(0)
    os.close(write)
    answer = os.read(read, 2)
    os.waitpid(pid, 0)
    assert answer == b"ok"
