"""Why did it run: each reconcile knows what queued it, against a real API server.

A controller that owns a ConfigMap per Widget: a spec change of the Widget shows the
trigger ``primary`` with ``spec`` changed; a label edit of its ConfigMap shows ``owned``
naming the ConfigMap and ``metadata.labels``; ``Action.requeue`` shows ``requeue``; a
failure shows ``retry``. Each appears in ``ctx.triggers``, on the reconcile's JSON log
line and in ``operator_kit_controller_reconcile_triggers_total``. A watched Secret's change
shows ``watched`` with the mapper that named the Widget.
"""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prometheus_client import REGISTRY

from operator_kit import Action, Context, Controller, Operator, Watch, logs
from operator_kit.runtime.objects import Objects
from operator_kit.runtime.triggers import Trigger
from operator_kit.testing import Namespace, eventually

from .conftest import Widget, create_widget, widget_path

pytestmark = pytest.mark.usefixtures("widget_kind")

RunOperator = Callable[..., Operator]
MERGE = "application/merge-patch+json"


class WhyController(Controller[Widget]):
    """Keeps a ConfigMap per Widget; remembers each reconcile's triggers; requeues or
    fails once when the Widget's message asks for it."""

    resource = Widget
    owns = ("v1/ConfigMap",)
    on_error = 0.2

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.seen: list[list[Trigger]] = []
        self.failed: set[str] = set()
        self._lock = threading.Lock()

    def reconcile(self, obj: Widget, ctx: Context) -> Action:
        with self._lock:
            self.seen.append(list(ctx.triggers))
        ctx.log.info("running because of %s", ctx.triggers)
        ctx.apply_owned(obj, {"apiVersion": "v1", "kind": "ConfigMap",
                              "metadata": {"name": obj.name},
                              "data": {"size": str(obj.spec.size)}})
        if obj.spec.message == "fail" and obj.name not in self.failed:
            self.failed.add(obj.name)
            raise RuntimeError("failing once, as asked")
        if obj.spec.message == "requeue":
            return Action.requeue(0.3)
        return Action.await_change()

    def reconciled_for(self, match: Callable[[Trigger], bool]) -> list[Trigger]:
        """The triggers of the first reconcile that had one matching `match`."""
        with self._lock:
            return next((seen for seen in self.seen if any(map(match, seen))), [])


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    """The controller logger's lines, in JSON, at DEBUG (where the outcome lines are)."""
    buffer = io.StringIO()
    handler = logs.handler("json", stream=buffer)
    logger = logging.getLogger("operator_kit.controller")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield buffer
    logger.removeHandler(handler)
    logger.setLevel(level)


def outcome_lines(buffer: io.StringIO, ns: Namespace, name: str) -> list[dict[str, Any]]:
    """The outcome lines of the reconciles of `name` in `ns`."""
    lines = [json.loads(line) for line in buffer.getvalue().splitlines() if line]
    return [line for line in lines if line.get("namespace") == ns.name
            and line.get("name") == name and "triggers" in line]


def counted(controller: str, trigger: str) -> float:
    return REGISTRY.get_sample_value("operator_kit_controller_reconcile_triggers_total",
                                     {"controller": controller, "cluster": "",
                                      "trigger": trigger}) or 0.0


def patch(ns: Namespace, path: str, body: dict[str, Any]) -> None:
    ns.api.request("PATCH", path, body=body, content_type=MERGE)


def test_a_spec_change_and_an_owned_label_edit_say_what_changed(
        namespace: Namespace, run_operator: RunOperator, json_lines: io.StringIO) -> None:
    controller = WhyController("why-changes")
    run_operator(controller)
    create_widget(namespace, "w")
    eventually(20, lambda: controller.reconciled_for(lambda t: t.source == "primary"))
    primary_before = counted("why-changes", "primary")

    patch(namespace, widget_path(namespace, "w"), {"spec": {"size": 2}})
    spec_change = eventually(20, lambda: controller.reconciled_for(
        lambda t: t.source == "primary" and t.event == "MODIFIED"))
    assert Trigger("primary", "Widget", namespace.name, "w", "MODIFIED", ("spec",)) \
        in spec_change
    assert counted("why-changes", "primary") > primary_before

    owned_before = counted("why-changes", "owned")
    config_map = f"/api/v1/namespaces/{namespace.name}/configmaps/w"
    patch(namespace, config_map, {"metadata": {"labels": {"edited": "by-hand"}}})
    label_edit = eventually(20, lambda: controller.reconciled_for(
        lambda t: t.source == "owned" and "metadata.labels" in t.changed))
    assert Trigger("owned", "ConfigMap", namespace.name, "w", "MODIFIED",
                   ("metadata.labels",)) in label_edit
    assert counted("why-changes", "owned") > owned_before

    def logged(source: str, changed: str) -> list[dict[str, Any]]:
        return [line for line in outcome_lines(json_lines, namespace, "w")
                if any(t["source"] == source and changed in t.get("changed", ())
                       for t in line["triggers"])]

    spec_line = eventually(10, lambda: logged("primary", "spec"))[0]
    assert spec_line["msg"].startswith(f"why-changes: reconciled {namespace.name}/w in ")
    assert f"primary Widget {namespace.name}/w MODIFIED [spec]" in spec_line["msg"]
    assert spec_line["triggerCount"] >= 1
    assert spec_line["controller"] == "why-changes" and spec_line["level"] == "debug"
    owned_line = eventually(10, lambda: logged("owned", "metadata.labels"))[0]
    assert {"source": "owned", "kind": "ConfigMap", "namespace": namespace.name,
            "name": "w", "event": "MODIFIED", "changed": ["metadata.labels"]} \
        in owned_line["triggers"]


def test_a_requeue_and_a_retry_say_so(namespace: Namespace, run_operator: RunOperator,
                                      json_lines: io.StringIO) -> None:
    controller = WhyController("why-again")
    run_operator(controller)
    requeues, retries = counted("why-again", "requeue"), counted("why-again", "retry")
    create_widget(namespace, "again")
    patch(namespace, widget_path(namespace, "again"), {"spec": {"message": "requeue"}})
    eventually(20, lambda: controller.reconciled_for(lambda t: t.source == "requeue"))
    assert counted("why-again", "requeue") > requeues

    create_widget(namespace, "broken")
    patch(namespace, widget_path(namespace, "broken"), {"spec": {"message": "fail"}})
    retried = eventually(20, lambda: controller.reconciled_for(
        lambda t: t.source == "retry"))
    assert Trigger("retry") in retried  # with the ConfigMap's echo, if it came meanwhile
    assert counted("why-again", "retry") > retries

    failed = eventually(10, lambda: [line for line in outcome_lines(json_lines, namespace, "broken")
                                     if line["level"] == "error"])[0]
    assert failed["error"].endswith("failing once, as asked")
    assert f"primary Widget {namespace.name}/broken MODIFIED [spec]" in \
        failed["msg"].partition("; triggered by ")[2]
    assert any(t["source"] == "primary" for t in failed["triggers"])
    retry_line = eventually(10, lambda: [
        line for line in outcome_lines(json_lines, namespace, "broken")
        if {"source": "retry"} in line["triggers"]])[0]
    assert "retry" in retry_line["msg"].partition("triggered by ")[2]
    requeue_line = eventually(10, lambda: [
        line for line in outcome_lines(json_lines, namespace, "again")
        if any(t["source"] == "requeue" for t in line["triggers"])])[0]
    assert "requeue" in requeue_line["msg"]


WATCHED = "why-test"  # the label of the Secrets the watching controller sees


def to_the_named_widget(secret: dict[str, Any], objects: Objects) -> list[str]:
    return [secret["metadata"]["labels"][WATCHED]]


class WatchingController(WhyController):
    """The same, watching Secrets labelled `WATCHED`, each mapped to the Widget it names."""

    watches = (Watch("v1/Secret", to_the_named_widget, label_selector=WATCHED),)


def test_a_watched_change_names_the_object_and_the_mapper(
        namespace: Namespace, run_operator: RunOperator) -> None:
    controller = WatchingController("why-watched")
    run_operator(controller)
    before = counted("why-watched", "watched")
    create_widget(namespace, "target")
    eventually(20, lambda: controller.reconciled_for(lambda t: t.source == "primary"))
    secret = {"apiVersion": "v1", "kind": "Secret",
              "metadata": {"name": "s", "namespace": namespace.name,
                           "labels": {WATCHED: "target"}},
              "stringData": {"password": "one"}}
    namespace.apply(secret)
    added = eventually(20, lambda: controller.reconciled_for(
        lambda t: t.source == "watched" and t.event == "ADDED"))
    assert Trigger("watched", "Secret", namespace.name, "s", "ADDED",
                   via="to_the_named_widget") in added
    namespace.apply({**secret, "stringData": {"password": "two"}})
    modified = eventually(20, lambda: controller.reconciled_for(
        lambda t: t.source == "watched" and t.event == "MODIFIED"))
    assert [t.changed for t in modified if t.source == "watched"] == [("data",)]
    assert counted("why-watched", "watched") >= before + 2
