"""Several watch namespaces against a real API server: one watch per namespace and kind,
reconciles and cache reads in each of them, nothing from the others; and the command
line's ``--watch-namespace a,b`` and ``--leader-elect``."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from operator_kit import ALL_NAMESPACES, Action, Context, Index, Operator
from operator_kit.localcluster.plane import free_port
from operator_kit.runtime.objects import resource_of
from operator_kit.testing import Namespace, TestCluster, eventually, stop_process

from .conftest import Widget, WidgetController, create_widget
from .test_cli_cluster import Output, get

pytestmark = pytest.mark.usefixtures("widget_kind")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def three(cluster: TestCluster) -> Iterator[list[Namespace]]:
    """Namespaces a and b (to watch) and c (not watched)."""
    made = [cluster.namespace(f"watch-{letter}") for letter in "abc"]
    yield made
    for namespace in made:
        namespace.delete()


def by_size(widget: Widget) -> str:
    return str(widget.spec.size)


class SeeingController(WidgetController):
    """Records what a read of every namespace's widgets of size 2 (an index) returns."""

    indexes = {"size": Index(Widget, by_size)}

    def __init__(self, namespaces: list[str]) -> None:
        super().__init__(namespaces)
        self.seen: list[list[tuple[str, str]]] = []

    def reconcile(self, obj: Widget, ctx: Context) -> Action:
        found = ctx.list(Widget, namespace=ALL_NAMESPACES, index=("size", "2"))
        self.seen.append(sorted((w.namespace or "", w.name) for w in found))
        return super().reconcile(obj, ctx)


def test_a_controller_watching_two_namespaces_reconciles_and_reads_both_and_no_other(
        three: list[Namespace], cluster: TestCluster,
        run_operator: Callable[..., Operator]) -> None:
    a, b, c = three
    controller = SeeingController([a.name, b.name])
    operator = run_operator(controller)
    for namespace in three:
        create_widget(namespace, "w", size=2)
    eventually(60, lambda: a.get("v1", "ConfigMap", "w") and b.get("v1", "ConfigMap", "w"))
    # Each read of the index sees both watched namespaces' widgets, once each is cached.
    def both_seen() -> bool:
        assert controller.seen and controller.seen[-1] == sorted(
            [(a.name, "w"), (b.name, "w")]), controller.seen
        return True

    eventually(30, both_seen)
    time.sleep(2)  # what a watch of c would have done by now
    assert c.get("v1", "ConfigMap", "w") is None
    assert all((c.name, "w") not in seen for seen in controller.seen)
    # One watch per namespace and kind; reads there are served from the cache.
    resource = resource_of(Widget)
    watched = sorted((str(i.resource), i.namespace) for i in operator.informers.values())
    assert watched == sorted((kind, ns.name) for kind in (str(resource), "configmaps")
                             for ns in (a, b)), watched
    assert operator.informers.covering(resource, a.name) is not None
    assert operator.informers.covering(resource, b.name) is not None
    assert operator.informers.covering(resource, c.name) is None  # read from the API server


def test_the_command_line_watches_the_namespaces_it_names_and_elects_when_asked(
        three: list[Namespace], cluster: TestCluster) -> None:
    a, b, c = three
    probes = free_port()
    env = dict(os.environ, TEST_NAMESPACE="", PYTHONPATH=str(ROOT))  # declares no election
    for name in ("TEST_KUBECONFIG", "KUBECONFIG", "TEST_LEADER_ELECTION"):
        env.pop(name, None)
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.cluster.served_operator", "--kubeconfig",
         cluster.kubeconfig, "--namespace", a.name, "--watch-namespace", f"{a.name},{b.name}",
         "--leader-elect", "--health-probe-bind-address", f"127.0.0.1:{probes}",
         "--metrics-bind-address", "0"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    output = Output(process.stderr)
    try:
        def ready() -> bool:
            assert get(f"http://127.0.0.1:{probes}/readyz")[0] == 200, output.lines[-20:]
            return True

        eventually(60, ready)
        lease: Any = a.get("coordination.k8s.io/v1", "Lease", "served-operator")
        assert lease is not None and lease["spec"]["holderIdentity"]
        for namespace in three:
            create_widget(namespace, "cli", size=1)
        eventually(60, lambda: a.get("v1", "ConfigMap", "cli") and b.get("v1", "ConfigMap",
                                                                         "cli"))
        time.sleep(2)
        assert c.get("v1", "ConfigMap", "cli") is None
    finally:
        stop_process(process)
    assert any("waiting to lead" in line for line in output.join())
