"""Fairness between flows against the real API server: while a flood of changes in one
namespace (or of one tenant) waits in the work queue, another namespace's (tenant's)
change is reconciled after a few of the flood's reconciles, not after the flood.

The assertions count reconciles (how many of the flood went before the quiet change),
not wall-clock times, so a loaded machine slows the test without failing it. A control
run with fairness off -- the first-in, first-out order of one priority -- shows the same
scenario does make the quiet change wait behind the whole flood.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from operator_kit import Action, Context, Controller, Fairness, Operator
from operator_kit.testing import Namespace, TestCluster, eventually

from .conftest import Widget, create_widget

pytestmark = pytest.mark.usefixtures("widget_kind")

RunOperator = Callable[..., Operator]

FLOOD = 300
WORKERS = 2
RECONCILE_SECONDS = 0.1
FAIR_BOUND = 30  # flood reconciles before the quiet change: a few turns, whatever FLOOD


def tenant_of(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["labels"]["tenant"])


class SlowWidgets(Controller[Widget]):
    """Records the order of its reconciles (namespace/name); each takes a while."""

    resource = Widget
    max_concurrent_reconciles = WORKERS

    def __init__(self, namespaces: list[str], fairness: Fairness | None) -> None:
        super().__init__()
        self.namespace = namespaces
        self.fairness = fairness
        self.order: list[str] = []
        self._lock = threading.Lock()

    def reconcile(self, obj: Widget, ctx: Context) -> Action:
        time.sleep(RECONCILE_SECONDS)
        with self._lock:
            self.order.append(f"{obj.namespace}/{obj.name}")
        return Action.await_change()

    def reconciled(self) -> list[str]:
        with self._lock:
            return list(self.order)


@pytest.fixture
def quiet(cluster: TestCluster) -> Iterator[Namespace]:
    """A second namespace, for the quiet flow."""
    ns = cluster.namespace("fairness-quiet")
    yield ns
    ns.delete()


def flood_then_change(noisy: Namespace, quiet: Namespace, controller: SlowWidgets,
                      run_operator: RunOperator) -> tuple[int, int]:
    """FLOOD widgets created in `noisy` (tenant "noisy") as fast as the API server takes
    them, then one in `quiet` (tenant "quiet"): (flood reconciles that went before the
    quiet one since it was created, flood left to reconcile when it was created)."""
    run_operator(controller)
    with ThreadPoolExecutor(8, thread_name_prefix="test-flood") as pool:
        list(pool.map(lambda i: create_widget(noisy, f"flood-{i:03d}",
                                              labels={"tenant": "noisy"}), range(FLOOD)))
    at_create = len(controller.reconciled())
    create_widget(quiet, "change", labels={"tenant": "quiet"})
    wanted = f"{quiet.name}/change"
    order = eventually(120, lambda: wanted in (o := controller.reconciled()) and o)
    return order.index(wanted) - at_create, FLOOD - at_create


def test_a_flood_in_one_namespace_leaves_another_namespaces_change_reconciled_soon(
        namespace: Namespace, quiet: Namespace, run_operator: RunOperator) -> None:
    controller = SlowWidgets([namespace.name, quiet.name], Fairness())

    before, left = flood_then_change(namespace, quiet, controller, run_operator)

    assert left > 2 * FAIR_BOUND, f"the flood had drained already ({left} left)"
    assert before <= FAIR_BOUND, (before, left)


def test_a_tenant_label_flow_is_fair_between_tenants_of_one_namespace(
        namespace: Namespace, run_operator: RunOperator) -> None:
    controller = SlowWidgets([namespace.name], Fairness(flow=tenant_of))

    before, left = flood_then_change(namespace, namespace, controller, run_operator)

    assert left > 2 * FAIR_BOUND, f"the flood had drained already ({left} left)"
    assert before <= FAIR_BOUND, (before, left)


def test_control_with_fairness_off_the_change_waits_for_the_whole_flood(
        namespace: Namespace, quiet: Namespace, run_operator: RunOperator) -> None:
    controller = SlowWidgets([namespace.name, quiet.name], None)

    before, left = flood_then_change(namespace, quiet, controller, run_operator)

    assert left > 2 * FAIR_BOUND, f"the flood had drained already ({left} left)"
    assert before >= left / 2, (before, left)  # (its own watch may deliver it a bit early)
