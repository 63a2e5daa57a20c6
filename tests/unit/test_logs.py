"""Logging: JSON and text lines, and the object of the reconcile on every line of it."""

from __future__ import annotations

import datetime
import io
import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from operator_kit import logs


@pytest.fixture
def configured() -> Iterator[Any]:
    """Install the operator's handler on a buffer; restore the root logger afterwards."""
    root = logging.getLogger()
    saved = (root.level, list(root.handlers))
    buffers: list[io.StringIO] = []

    def configure(fmt: str, level: str = "debug") -> io.StringIO:
        buffer = io.StringIO()
        logs.configure(level, fmt, stream=buffer)
        buffers.append(buffer)
        return buffer

    yield configure
    root.setLevel(saved[0])
    root.handlers[:] = saved[1]


def json_lines(buffer: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in buffer.getvalue().splitlines()]


def test_json_lines_carry_zaps_keys_and_the_reconciled_object(configured: Any) -> None:
    buffer = configured("json")
    with logs.reconciling("backup", "prod", "nightly", kind="Backup",
                          group="example.com") as reconcile:
        logging.getLogger("operator_kit.controller.backup").info("made %d jobs", 2)
        logging.getLogger("some.library").warning("slow")
    first, second = json_lines(buffer)
    assert (first["level"], second["level"]) == ("info", "warn")
    assert first["logger"] == "operator_kit.controller.backup"
    assert first["msg"] == "made 2 jobs"
    assert first["caller"].startswith("unit/test_logs.py:")
    # RFC 3339 in UTC ("...Z"; Python 3.10's fromisoformat needs the offset spelled out)
    parsed = datetime.datetime.fromisoformat(first["ts"].replace("Z", "+00:00"))
    assert parsed.utcoffset() == datetime.timedelta(0)
    assert abs(parsed.timestamp() - time.time()) < 60
    for line in (first, second):
        assert {key: line[key] for key in logs.OBJECT_FIELDS} == {
            "controller": "backup", "controllerGroup": "example.com",
            "controllerKind": "Backup", "namespace": "prod", "name": "nightly",
            "reconcileID": reconcile.reconcile_id}
        assert not {"time", "message", "reconcile_id"} & set(line)
    assert second["logger"] == "some.library"


def test_critical_is_zaps_fatal_and_debug_its_debug(configured: Any) -> None:
    buffer = configured("json")
    logging.getLogger("x").critical("gone")
    logging.getLogger("x").debug("detail")
    assert [line["level"] for line in json_lines(buffer)] == ["fatal", "debug"]


def test_each_reconcile_gets_its_own_id_and_lines_outside_one_carry_no_object(
        configured: Any) -> None:
    buffer = configured("json")
    logger = logging.getLogger("operator_kit.test")
    with logs.reconciling("c", "ns", "a"):
        logger.info("one")
    with logs.reconciling("c", "ns", "a"):
        logger.info("two")
    logger.info("outside")
    one, two, outside = json_lines(buffer)
    assert one["reconcileID"] != two["reconcileID"]
    assert not set(logs.OBJECT_FIELDS) & set(outside)


def test_concurrent_reconciles_in_threads_never_mix_their_objects(configured: Any) -> None:
    buffer = configured("json")
    logger = logging.getLogger("operator_kit.test")
    barrier = threading.Barrier(2)

    def work(name: str) -> None:
        with logs.reconciling("c", "ns", name):
            barrier.wait()
            logger.info(name)

    threads = [threading.Thread(target=work, args=(n,)) for n in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    lines = json_lines(buffer)
    assert sorted(line["msg"] for line in lines) == ["a", "b"]
    assert all(line["name"] == line["msg"] for line in lines)


def test_an_exception_is_error_error_type_and_stacktrace_never_in_msg(
        configured: Any) -> None:
    buffer = configured("json")
    try:
        raise ValueError("boom\nsecond line")
    except ValueError:
        logging.getLogger("x").exception("failed", extra={"attempt": 3})
    (line,) = json_lines(buffer)
    assert line["attempt"] == 3
    assert line["msg"] == "failed"
    assert (line["error"], line["errorType"]) == ("boom", "ValueError")
    assert "ValueError: boom" in line["stacktrace"]
    assert line["stacktrace"].startswith("Traceback (most recent call last):")


class Refused(Exception):
    """An error of a module of its own, to see its qualified name."""


def test_failure_gives_the_error_its_text_and_its_type_in_fields_of_their_own(
        configured: Any) -> None:
    json_buffer = configured("json")
    err = Refused("403 Forbidden")
    logging.getLogger("x").error("reconcile failed", extra=logs.failure(err, "denied: 403"))
    (line,) = json_lines(json_buffer)
    assert (line["msg"], line["error"]) == ("reconcile failed", "denied: 403")
    assert line["errorType"] == f"{__name__}.Refused"
    assert "stacktrace" not in line  # logged without exc_info
    assert logs.failure(KeyError())["error"] == "KeyError"  # no text: its class
    text_buffer = configured("text")
    logging.getLogger("x").error("reconcile failed", extra=logs.failure(err))
    assert text_buffer.getvalue().rstrip().endswith(" ERROR x: reconcile failed: 403 Forbidden")


def test_library_debug_lines_stay_out_unless_asked_for(configured: Any) -> None:
    saved = {name: logging.getLogger(name).level for name in logs.LIBRARIES}
    try:
        buffer = configured("json", "debug")
        for name in ("urllib3.connectionpool", "kubernetes.client.rest", "operator_kit.x"):
            logging.getLogger(name).debug("from %s", name)
        logging.getLogger("urllib3.connectionpool").info("retrying")
        assert [line["msg"] for line in json_lines(buffer)] == [
            "from operator_kit.x", "retrying"]
        loud = io.StringIO()
        logs.configure("debug", "json", stream=loud, libraries=True)
        logging.getLogger("kubernetes.client.rest").debug("response body")
        assert [line["msg"] for line in json_lines(loud)] == ["response body"]
        quiet = configured("text", "warning")
        logging.getLogger("urllib3").info("hidden at warning")
        assert quiet.getvalue() == ""
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


def test_text_lines_name_the_object_in_brackets(configured: Any) -> None:
    buffer = configured("text")
    logger = logging.getLogger("operator_kit.controller")
    with logs.reconciling("backup", "prod", "nightly", kind="Backup") as reconcile:
        logger.error("failed")
    logger.info("idle")
    during, after = buffer.getvalue().splitlines()
    assert " ERROR operator_kit.controller: failed [controller=backup controllerKind=Backup " \
           f"namespace=prod name=nightly reconcileID={reconcile.reconcile_id}]" in during
    assert after.endswith(" INFO operator_kit.controller: idle")


def test_the_level_filters_and_a_second_configure_replaces_the_first(configured: Any) -> None:
    first = configured("text", "warning")
    logging.getLogger("x").info("hidden")
    second = configured("json", "info")
    logging.getLogger("x").info("shown")
    assert first.getvalue() == ""
    assert [line["msg"] for line in json_lines(second)] == ["shown"]


def test_bad_levels_and_formats_name_the_choices() -> None:
    assert logs.parse_level("DEBUG") == logging.DEBUG
    with pytest.raises(ValueError, match="choose one of debug, info, warning"):
        logs.parse_level("loud")
    with pytest.raises(ValueError, match="choose one of text, json"):
        logs.formatter("xml")
