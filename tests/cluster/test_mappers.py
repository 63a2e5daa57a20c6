"""Watch mappers against the real API server: what they return becomes keys, and what
names no primary is logged once and counted, never read as names."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import REGISTRY

from operator_kit import Context, Controller, Operator, Watch
from operator_kit.runtime.controller import Mapper
from operator_kit.runtime.objects import Objects
from operator_kit.testing import Namespace, eventually

from .conftest import Recorder, Widget, create_widget

pytestmark = pytest.mark.usefixtures("widget_kind")

RunOperator = Callable[..., Operator]
LABEL = "mappers-test"  # only the tests' own ConfigMaps are watched (not kube-root-ca.crt)


class MappedController(Controller[Widget]):
    """Records its reconciles; reconciles what `mapper` returns for a changed ConfigMap."""

    resource = Widget

    def __init__(self, namespace: str, mapper: Mapper) -> None:
        self.watches = (Watch("v1/ConfigMap", mapper, label_selector=LABEL),)
        super().__init__()
        self.namespace = namespace
        self.recorder = Recorder()

    def reconcile(self, obj: Widget, ctx: Context) -> None:
        self.recorder.record(obj.name, time.monotonic())


def to_a_str(cm: dict[str, Any], objects: Objects) -> Any:
    return "web"


def to_the_config_map(cm: dict[str, Any], objects: Objects) -> Any:
    return [cm]


def to_a_name_a_key_and_an_object(cm: dict[str, Any], objects: Objects) -> Any:
    namespace = cm["metadata"]["namespace"]
    return ["a", (namespace, "b"), objects.get(Widget, "c", namespace)]


def config_map(ns: Namespace, name: str, value: str) -> None:
    ns.apply({"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": {"name": name, "namespace": ns.name, "labels": {LABEL: "yes"}},
              "data": {"v": value}})


def settle(recorder: Recorder, quiet: float = 1.0) -> dict[str, int]:
    """Wait until nothing has been reconciled for `quiet` seconds; the counts by name."""
    while True:
        count = len(recorder.calls)
        time.sleep(quiet)
        if len(recorder.calls) == count:
            return {name: recorder.count(name) for name, _ in recorder.calls}


def mapper_errors(mapper: str) -> float:
    return REGISTRY.get_sample_value("operator_kit_mapper_errors_total",
                                     {"controller": "widget", "cluster": "",
                                      "mapper": mapper}) or 0.0


def mapper_lines(caplog: pytest.LogCaptureFixture, mapper: str) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records
            if r.name == "operator_kit.controller" and f"mapper {mapper} " in r.getMessage()]


def test_a_mapper_returning_a_str_reconciles_no_letter_and_is_logged_once_and_counted(
        namespace: Namespace, run_operator: RunOperator,
        caplog: pytest.LogCaptureFixture) -> None:
    controller = MappedController(namespace.name, to_a_str)
    run_operator(controller)
    for name in ("web", "w", "e", "b"):
        create_widget(namespace, name)
    eventually(20, lambda: all(controller.recorder.count(n) for n in ("web", "w", "e", "b")))
    before, errors = settle(controller.recorder), mapper_errors("to_a_str")
    with caplog.at_level(logging.DEBUG, logger="operator_kit.controller"):
        config_map(namespace, "cm", "1")  # ADDED: the mapper once
        config_map(namespace, "cm", "2")  # MODIFIED: for the object and its old version
        eventually(20, lambda: mapper_errors("to_a_str") == errors + 3)
        after = settle(controller.recorder)
    assert after == before == {"web": 1, "w": 1, "e": 1, "b": 1}
    lines = mapper_lines(caplog, "to_a_str")
    assert [level for level, _ in lines] == [logging.ERROR, logging.DEBUG, logging.DEBUG]
    assert f"returned str 'web' (a str is not iterated: return [name] for one name) for " \
           f"v1/ConfigMap {namespace.name}/cm" in lines[0][1]


def test_a_mapper_returning_the_config_map_reconciles_nothing_and_says_so(
        namespace: Namespace, run_operator: RunOperator,
        caplog: pytest.LogCaptureFixture) -> None:
    controller = MappedController(namespace.name, to_the_config_map)
    run_operator(controller)
    create_widget(namespace, "cm")  # named like the ConfigMap
    eventually(20, lambda: controller.recorder.count("cm"))
    before, errors = settle(controller.recorder), mapper_errors("to_the_config_map")
    with caplog.at_level(logging.DEBUG, logger="operator_kit.controller"):
        config_map(namespace, "cm", "1")
        eventually(20, lambda: mapper_errors("to_the_config_map") == errors + 1)
        after = settle(controller.recorder)
    assert after == before == {"cm": 1}
    [(level, message)] = mapper_lines(caplog, "to_the_config_map")
    assert level == logging.ERROR
    assert f"returned dict (v1/ConfigMap) {namespace.name}/cm (not a Widget)" in message
    assert "a mapper returns a list (any iterable) of names" in message


def test_a_mapper_returning_a_name_a_key_and_an_object_reconciles_all_three(
        namespace: Namespace, run_operator: RunOperator,
        caplog: pytest.LogCaptureFixture) -> None:
    controller = MappedController(namespace.name, to_a_name_a_key_and_an_object)
    run_operator(controller)
    for name in ("a", "b", "c", "d"):
        create_widget(namespace, name)
    eventually(20, lambda: all(controller.recorder.count(n) for n in ("a", "b", "c", "d")))
    before = settle(controller.recorder)
    errors = mapper_errors("to_a_name_a_key_and_an_object")
    with caplog.at_level(logging.DEBUG, logger="operator_kit.controller"):
        config_map(namespace, "cm", "1")
        eventually(20, lambda: all(controller.recorder.count(n) == before[n] + 1
                                   for n in ("a", "b", "c")))
        after = settle(controller.recorder)
    assert after == {"a": 2, "b": 2, "c": 2, "d": 1}
    assert mapper_errors("to_a_name_a_key_and_an_object") == errors
    assert mapper_lines(caplog, "to_a_name_a_key_and_an_object") == []
