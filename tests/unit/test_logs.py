"""Logging: JSON and text lines, and the object of the reconcile on every line of it."""

from __future__ import annotations

import io
import json
import logging
import threading
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


def test_json_lines_carry_time_level_logger_message_and_the_reconciled_object(
        configured: Any) -> None:
    buffer = configured("json")
    with logs.reconciling("backup", "prod", "nightly") as reconcile:
        logging.getLogger("operator_kit.controller.backup").info("made %d jobs", 2)
        logging.getLogger("some.library").warning("slow")
    first, second = json_lines(buffer)
    assert first["level"] == "INFO"
    assert first["logger"] == "operator_kit.controller.backup"
    assert first["message"] == "made 2 jobs"
    assert first["time"].endswith("Z") and first["time"][10] == "T"
    for line in (first, second):
        assert (line["controller"], line["namespace"], line["name"]) == (
            "backup", "prod", "nightly")
        assert line["reconcile_id"] == reconcile.reconcile_id
    assert second["logger"] == "some.library"


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
    assert one["reconcile_id"] != two["reconcile_id"]
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
    assert sorted(line["message"] for line in lines) == ["a", "b"]
    assert all(line["name"] == line["message"] for line in lines)


def test_json_keeps_extra_fields_and_the_traceback(configured: Any) -> None:
    buffer = configured("json")
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("x").exception("failed", extra={"attempt": 3})
    (line,) = json_lines(buffer)
    assert line["attempt"] == 3
    assert "ValueError: boom" in line["exception"]


def test_text_lines_name_the_object_in_brackets(configured: Any) -> None:
    buffer = configured("text")
    logger = logging.getLogger("operator_kit.controller")
    with logs.reconciling("backup", "prod", "nightly") as reconcile:
        logger.error("failed")
    logger.info("idle")
    during, after = buffer.getvalue().splitlines()
    assert " ERROR operator_kit.controller: failed [controller=backup namespace=prod " \
           f"name=nightly reconcile_id={reconcile.reconcile_id}]" in during
    assert after.endswith(" INFO operator_kit.controller: idle")


def test_the_level_filters_and_a_second_configure_replaces_the_first(configured: Any) -> None:
    first = configured("text", "warning")
    logging.getLogger("x").info("hidden")
    second = configured("json", "info")
    logging.getLogger("x").info("shown")
    assert first.getvalue() == ""
    assert [line["message"] for line in json_lines(second)] == ["shown"]


def test_bad_levels_and_formats_name_the_choices() -> None:
    assert logs.parse_level("DEBUG") == logging.DEBUG
    with pytest.raises(ValueError, match="choose one of debug, info, warning"):
        logs.parse_level("loud")
    with pytest.raises(ValueError, match="choose one of text, json"):
        logs.formatter("xml")
