"""The read deadline of operator_kit.gunicorn_worker, piece by piece (the whole worker
against slow clients is in test_webhook_abuse.py)."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import pytest

from operator_kit.webhooks.gunicorn_worker import (
    CONNECTING,
    DEFAULT_READ_TIMEOUT,
    IDLE,
    REQUEST,
    ReadDeadlines,
    _EndOfBody,
    read_timeout_from_env,
    shut_down,
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_connection_expires_once_its_read_timeout_has_passed_and_only_once() -> None:
    clock = Clock()
    deadlines = ReadDeadlines(5.0, clock)
    first, second = object(), object()
    deadlines.begin(first)
    clock.now += 3
    deadlines.begin(second)
    clock.now += 1.9
    assert deadlines.expired() == []
    clock.now += 0.1
    assert deadlines.expired() == [(first, "request")]
    assert deadlines.expired() == []  # taken out: it is shut down once
    clock.now += 3
    assert deadlines.expired() == [(second, "request")]
    assert len(deadlines) == 0


def test_a_connection_whose_request_was_read_in_time_never_expires() -> None:
    clock = Clock()
    deadlines = ReadDeadlines(5.0, clock)
    conn = object()
    deadlines.begin(conn)
    clock.now += 4
    deadlines.end(conn)
    clock.now += 60  # a slow handler after the read does not count
    assert deadlines.expired() == []
    deadlines.end(conn)  # ending twice is harmless


def test_each_request_on_a_kept_alive_connection_gets_a_fresh_deadline() -> None:
    clock = Clock()
    deadlines = ReadDeadlines(5.0, clock)
    conn = object()
    deadlines.begin(conn)
    deadlines.end(conn)
    clock.now += 30
    deadlines.begin(conn)
    clock.now += 4.9
    assert deadlines.expired() == []
    clock.now += 0.1
    assert deadlines.expired() == [(conn, "request")]


def test_an_expired_connection_says_how_far_it_got() -> None:
    clock = Clock()
    deadlines = ReadDeadlines(5.0, clock)
    handshaking, idle, partway = object(), object(), object()
    for conn in (handshaking, idle, partway):
        deadlines.begin(conn, CONNECTING)
    deadlines.reached(idle, IDLE)
    deadlines.reached(partway, IDLE)
    deadlines.reached(partway, REQUEST)
    deadlines.reached(object(), REQUEST)  # not (or no longer) watched: ignored
    clock.now += 5
    assert sorted(deadlines.expired(), key=lambda e: e[1]) == [
        (handshaking, CONNECTING), (idle, IDLE), (partway, REQUEST)]


class LengthReader:
    """Like gunicorn's: `length` is what is left of the body."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.length = len(body)

    def read(self, size: int) -> bytes:
        data, self.body = self.body[:size], self.body[size:]
        self.length -= len(data)
        return data


def test_the_read_ends_when_the_last_byte_of_the_body_is_read() -> None:
    ended: list[int] = []
    reader = _EndOfBody(LengthReader(b"0123456789"), lambda: ended.append(1))
    assert reader.read(4) == b"0123"
    assert ended == []
    assert reader.read(100) == b"456789"
    assert ended == [1]
    assert reader.length == 0  # the wrapped reader's attributes show through


def test_the_read_ends_when_a_body_of_unknown_length_runs_out() -> None:
    chunks = [b"ab", b"cd", b""]
    ended: list[int] = []

    class Chunked:
        def read(self, size: int) -> bytes:
            return chunks.pop(0)

    reader = _EndOfBody(Chunked(), lambda: ended.append(1))
    assert reader.read(10) + reader.read(10) == b"abcd"
    assert ended == []
    assert reader.read(10) == b""
    assert ended == [1]


def test_shutting_a_connection_down_wakes_the_thread_blocked_reading_it() -> None:
    server, client = socket.socketpair()
    got: list[Any] = []
    reader = threading.Thread(target=lambda: got.append(server.recv(10)), name="reader")
    reader.start()
    time.sleep(0.2)
    assert reader.is_alive()  # blocked: the client sends nothing
    assert shut_down(server) is True
    reader.join(timeout=5)
    assert not reader.is_alive()
    assert got == [b""]
    server.close()
    assert shut_down(server) is False  # closed already: nothing to do, no error
    client.close()


@pytest.mark.parametrize(
    ("value", "expected"), [("", DEFAULT_READ_TIMEOUT), ("2", 2.0), (" 0.5 ", 0.5)]
)
def test_the_read_timeout_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, value: str, expected: float
) -> None:
    monkeypatch.setenv("OPERATOR_KIT_READ_TIMEOUT", value)
    assert read_timeout_from_env() == expected


@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan", "inf"])
def test_a_malformed_read_timeout_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("OPERATOR_KIT_READ_TIMEOUT", value)
    with pytest.raises(ValueError, match="OPERATOR_KIT_READ_TIMEOUT must be a positive number"):
        read_timeout_from_env()
