"""Streaming initial lists: the request, its end, a server's refusal and its memory.

What the API server does with them is tested against a real one in
tests/cluster/test_streaming_lists.py."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator

import pytest
from kubernetes.client.exceptions import ApiException

from operator_kit.client.transport import Resource
from operator_kit.runtime.streaming import (
    INITIAL_EVENTS_END,
    StreamingLists,
    ends_initial_events,
    initial_events_query,
    read_lines,
    refuses_streaming,
)
from operator_kit.runtime.watching import STREAMING_ENV, Informers

CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap", True)
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment", True)
SECRETS = Resource("", "v1", "secrets", "Secret", True)

# What kube-apiserver 1.37 answers with --feature-gates=WatchList=false.
GATE_OFF = json.dumps({
    "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Invalid",
    "code": 422, "message": 'ListOptions.meta.k8s.io "" is invalid: sendInitialEvents: '
    "Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature "
    "gate is enabled"})
# What a server older than sendInitialEvents answers to resourceVersionMatch on a watch.
TOO_OLD = json.dumps({
    "kind": "Status", "code": 422, "reason": "Invalid",
    "message": 'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: '
    "resourceVersionMatch is forbidden for watch"})


def error(status: int, body: str | bytes, reason: str = "") -> ApiException:
    err = ApiException(status=status, reason=reason)
    err.body = body
    return err


def test_the_request_asks_for_initial_events_ended_by_a_bookmark() -> None:
    assert initial_events_query() == {
        "watch": True, "sendInitialEvents": True, "resourceVersionMatch": "NotOlderThan",
        "allowWatchBookmarks": True}


def test_only_the_annotated_bookmark_ends_the_initial_events() -> None:
    marked = {"metadata": {"resourceVersion": "9", "annotations": {INITIAL_EVENTS_END: "true"}}}
    assert ends_initial_events("BOOKMARK", marked)
    assert not ends_initial_events("ADDED", marked)
    assert not ends_initial_events("BOOKMARK", {"metadata": {"resourceVersion": "9"}})
    assert not ends_initial_events(
        "BOOKMARK", {"metadata": {"annotations": {INITIAL_EVENTS_END: "false"}}})


@pytest.mark.parametrize("err", [error(422, GATE_OFF), error(422, TOO_OLD),
                                 error(422, GATE_OFF.encode()),
                                 error(400, "", reason="sendInitialEvents: unknown")])
def test_a_refusal_of_the_parameters_falls_back(err: ApiException) -> None:
    assert refuses_streaming(err)


@pytest.mark.parametrize("err", [
    error(422, json.dumps({"message": "labelSelector: Invalid value"})),
    error(403, GATE_OFF), error(500, GATE_OFF), error(429, ""), error(410, "")])
def test_other_errors_are_not_a_refusal(err: ApiException) -> None:
    assert not refuses_streaming(err), "retried with backoff (or relisted), as before"


def test_a_refusal_is_remembered_per_group_version_and_logged_once_at_info(
        caplog: pytest.LogCaptureFixture) -> None:
    lists = StreamingLists()
    assert lists.use(CONFIG_MAPS) and lists.use(DEPLOYMENTS)
    with caplog.at_level(logging.DEBUG, logger="operator_kit.watching"):
        lists.refuse(CONFIG_MAPS, "configmaps in ns", "422 Unprocessable Entity: ...")
        lists.refuse(DEPLOYMENTS, "deployments.apps", "422 Unprocessable Entity: ...")
    assert not lists.use(CONFIG_MAPS) and not lists.use(SECRETS), "the same group version"
    assert not lists.use(DEPLOYMENTS)
    assert lists.refused() == {"v1": "422 Unprocessable Entity: ...",
                               "apps/v1": "422 Unprocessable Entity: ..."}
    assert [r.levelno for r in caplog.records] == [logging.INFO, logging.DEBUG]
    assert "does not stream lists of configmaps in ns" in caplog.records[0].getMessage()


def test_turned_off_nothing_streams() -> None:
    assert not StreamingLists(enabled=False).use(CONFIG_MAPS)


@pytest.mark.parametrize("value, streams", [(None, True), ("", True), ("1", True),
                                            ("off", False), ("0", False), ("No", False)])
def test_the_variable_turns_streaming_off(monkeypatch: pytest.MonkeyPatch,
                                          value: str | None, streams: bool) -> None:
    if value is None:
        monkeypatch.delenv(STREAMING_ENV, raising=False)
    else:
        monkeypatch.setenv(STREAMING_ENV, value)
    informers = Informers(None, threading.Event())  # type: ignore[arg-type]
    assert informers.streaming.enabled is streams
    informer = informers.informer(CONFIG_MAPS)
    assert informer.streaming is informers.streaming, "one memory for the operator"
    monkeypatch.setenv(STREAMING_ENV, "1")
    assert Informers(None, threading.Event(),  # type: ignore[arg-type]
                     streaming=False).streaming.enabled is False, "the argument wins"


def test_a_bad_value_of_the_variable_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from operator_kit.settings import UsageError

    monkeypatch.setenv(STREAMING_ENV, "maybe")
    with pytest.raises(UsageError, match="OPERATOR_KIT_STREAMING_LISTS='maybe'"):
        Informers(None, threading.Event())  # type: ignore[arg-type]


@pytest.mark.parametrize("argument, variable, streams", [
    (None, None, True), (False, None, False), (None, "0", False), (True, "0", True)])
def test_the_operator_hands_its_settings_to_its_informers(
        monkeypatch: pytest.MonkeyPatch, argument: bool | None, variable: str | None,
        streams: bool) -> None:
    from kubernetes.client import ApiClient

    from operator_kit import Operator
    from operator_kit.runtime.transforms import drop_managed_fields

    if variable is None:
        monkeypatch.delenv(STREAMING_ENV, raising=False)
    else:
        monkeypatch.setenv(STREAMING_ENV, variable)
    operator = Operator("op", streaming_lists=argument)
    operator.use(ApiClient())
    assert operator.informers.streaming.enabled is streams
    assert operator.informers.default_transform is drop_managed_fields
    whole = Operator("op", default_transform=None)
    whole.use(ApiClient())
    assert whole.informers.default_transform is None


class _Chunks:
    """A response whose stream yields these chunks, as urllib3's does."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = chunks

    def stream(self, amt: int | None = None, decode_content: bool = True) -> Iterator[bytes]:
        return iter(self.chunks)


def test_read_lines_yields_each_event_of_a_chunk_and_joins_those_split_across_chunks(
        ) -> None:
    events = [json.dumps({"type": "ADDED", "object": {"n": i}}).encode() for i in range(500)]
    stream = b"\n".join(events) + b"\n\n  \n" + b'{"type": "BOOKMARK"}'  # no final newline
    # a streaming list's chunk holds many events; others end mid-event
    chunks = (stream[:40_000], stream[40_000:40_003], stream[40_003:])
    assert list(read_lines(_Chunks(*chunks))) == [*events, b'{"type": "BOOKMARK"}']
    assert list(read_lines(_Chunks(b"a\r\n", b"\nb", b"c\n"))) == [b"a\r", b"bc"]
    assert list(read_lines(_Chunks())) == []
