"""The priority work queue against the real API server: after a restart with a backlog of
existing objects, a new or changed object is reconciled before the backlog drains.

The assertions count reconciles (how many backlog objects went before the new one), not
wall-clock times, so a loaded machine slows the test without failing it. A control run
with every event at one priority -- the FIFO order the queue had before -- shows the
same scenario does make the new object wait behind the whole backlog.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from operator_kit import Action, Context, Controller, Operator
from operator_kit.runtime.changes import WatchEvent
from operator_kit.runtime.queueing import NORMAL_PRIORITY
from operator_kit.testing import Namespace, eventually

from .conftest import Widget, create_widget, widget_path

pytestmark = pytest.mark.usefixtures("widget_kind")

RunOperator = Callable[..., Operator]

BACKLOG = 300
WORKERS = 2
RECONCILE_SECONDS = 0.05


class SlowWidgets(Controller[Widget]):
    """Records the order of its reconciles; each takes `seconds`."""

    resource = Widget
    max_concurrent_reconciles = WORKERS

    def __init__(self, namespace: str, seconds: float) -> None:
        super().__init__()
        self.namespace = namespace
        self.seconds = seconds
        self.order: list[str] = []
        self._lock = threading.Lock()

    def reconcile(self, obj: Widget, ctx: Context) -> Action:
        time.sleep(self.seconds)
        with self._lock:
            self.order.append(obj.name)
        return Action.await_change()

    def reconciled(self) -> list[str]:
        with self._lock:
            return list(self.order)


class SlowWidgetsFifo(SlowWidgets):
    """Every event at one priority: the queue is first in, first out, as it was."""

    def priority(self, event: WatchEvent) -> int:
        return NORMAL_PRIORITY


def fill(namespace: Namespace) -> list[str]:
    names = [f"old-{i:03d}" for i in range(BACKLOG)]
    with ThreadPoolExecutor(8, thread_name_prefix="test-create") as pool:
        list(pool.map(lambda name: create_widget(namespace, name), names))
    return names


def restart(namespace: Namespace, run_operator: RunOperator,
            controller: SlowWidgets) -> None:
    """An operator that has reconciled every object stops; `controller`'s starts."""
    first = SlowWidgets(namespace.name, 0.0)
    operator = run_operator(first, name="test-operator-before")
    eventually(120, lambda: len(set(first.reconciled())) == BACKLOG)
    operator.stop(timeout=10)
    run_operator(controller)
    # The backlog is being worked on: the initial list queued all of it.
    eventually(60, lambda: len(controller.reconciled()) >= 10)


def went_before(order: list[str], name: str, after: int) -> int:
    """How many other reconciles ran from position `after` until `name`'s first one."""
    return order.index(name, after) - after


def test_a_new_object_is_reconciled_before_the_backlog_of_a_restart(
        namespace: Namespace, run_operator: RunOperator) -> None:
    fill(namespace)
    controller = SlowWidgets(namespace.name, RECONCILE_SECONDS)
    restart(namespace, run_operator, controller)

    at_create = len(controller.reconciled())
    create_widget(namespace, "new")
    order = eventually(60, lambda: "new" in (o := controller.reconciled()) and o)

    left = BACKLOG - at_create
    before = went_before(order, "new", at_create)
    assert before < left / 4, (before, left)
    assert len(set(order) - {"new"}) < BACKLOG, "the backlog had not drained"


def test_a_waiting_object_that_changes_moves_ahead_of_the_backlog(
        namespace: Namespace, run_operator: RunOperator) -> None:
    names = fill(namespace)
    controller = SlowWidgets(namespace.name, RECONCILE_SECONDS)
    restart(namespace, run_operator, controller)

    at_change = len(controller.reconciled())
    last = names[-1]  # the initial list queued it last
    assert last not in controller.reconciled()
    namespace.api.request("PATCH", widget_path(namespace, last), body={"spec": {"size": 2}},
                          content_type="application/merge-patch+json")
    order = eventually(60, lambda: last in (o := controller.reconciled()) and o)

    left = BACKLOG - at_change
    before = went_before(order, last, at_change)
    assert before < left / 4, (before, left)
    assert order.count(last) == 1, "queued twice, reconciled once"


def test_control_with_one_priority_the_new_object_waits_for_the_whole_backlog(
        namespace: Namespace, run_operator: RunOperator) -> None:
    fill(namespace)
    controller = SlowWidgetsFifo(namespace.name, RECONCILE_SECONDS)
    restart(namespace, run_operator, controller)

    at_create = len(controller.reconciled())
    create_widget(namespace, "new")
    order = eventually(120, lambda: "new" in (o := controller.reconciled()) and o)

    left = BACKLOG - at_create
    assert went_before(order, "new", at_create) >= left - WORKERS
