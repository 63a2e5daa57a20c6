"""Shared pieces for controller tests: a Widget kind and an operator run in-process."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from operator_kit import Action, Context, Controller, CustomResource, Operator, PrinterColumn
from operator_kit.localcluster import (
    BinariesError,
    LocalCluster,
    LocalClusterError,
    find_or_build,
    gates,
)
from operator_kit.testing import Namespace, TestCluster


@dataclass
class WidgetSpec:
    """How big the widget is."""

    size: int
    message: str = "hello"


@dataclass
class WidgetStatus:
    observed_size: int | None = None
    observed_generation: int | None = None


class Widget(CustomResource):
    group = "ctl.operator-kit.test"
    version = "v1"
    kind = "Widget"
    plural = "widgets"
    printer_columns = (PrinterColumn("Size", ".spec.size", type="integer"),)
    spec: WidgetSpec
    status: WidgetStatus


class Recorder:
    """Counts reconciles per object name, thread-safely, and lets a test wait on them."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, float]] = []
        self._cond = threading.Condition()

    def record(self, name: str, at: float) -> None:
        with self._cond:
            self.calls.append((name, at))
            self._cond.notify_all()

    def count(self, name: str) -> int:
        with self._cond:
            return sum(1 for n, _ in self.calls if n == name)

    def times(self, name: str) -> list[float]:
        with self._cond:
            return [t for n, t in self.calls if n == name]


class RequestCounter:
    """Every request the operator's reconciles send, as (method, path)."""

    def __init__(self, operator: Operator) -> None:
        self.sent: list[tuple[str, str]] = []
        send = operator.api.request
        lock = threading.Lock()

        def spy(method: str, path: str, **options: Any) -> Any:
            if threading.current_thread().name.startswith("reconcile-"):
                with lock:
                    self.sent.append((method, path))
            return send(method, path, **options)

        operator.api.request = spy  # type: ignore[method-assign]

    def count(self, method: str, contains: str) -> int:
        return sum(1 for m, p in self.sent if m == method and contains in p)


class WidgetController(Controller[Widget]):
    """Keeps a ConfigMap per Widget holding its size, and reports what it saw in status."""

    resource = Widget
    owns = ("v1/ConfigMap",)

    def __init__(self, namespace: str | list[str] | None, recorder: Recorder | None = None,
                 action: Callable[[Widget], Action] | None = None) -> None:
        super().__init__()
        self.namespace = namespace
        self.recorder = recorder or Recorder()
        self.action = action or (lambda _obj: Action.await_change())

    def reconcile(self, obj: Widget, ctx: Context) -> Action:
        import time

        self.recorder.record(obj.name, time.monotonic())
        ctx.log.info("widget of size %d", obj.spec.size)
        ctx.apply_owned(obj, {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": obj.name},
            "data": {"size": str(obj.spec.size), "message": obj.spec.message},
        })
        ctx.patch_status(obj, {"observed_size": obj.spec.size,
                               "observed_generation": obj.generation})
        return self.action(obj)


@pytest.fixture(scope="session")
def widget_kind(cluster: TestCluster) -> type[Widget]:
    """The tests' Widget CRD, installed once per session."""
    cluster.install_crd(Widget)
    return Widget


@pytest.fixture
def run_operator(cluster: TestCluster) -> Iterator[Callable[..., Operator]]:
    """Start an operator with the given controllers; stopped after the test."""
    started: list[Operator] = []

    def run(*controllers: Controller[Any], name: str = "test-operator",
            **options: Any) -> Operator:
        operator = Operator(name, controllers, **options)
        operator.use(cluster.client)
        operator.start()
        started.append(operator)
        assert operator.wait_synced(30), "caches did not sync"
        return operator

    yield run
    for operator in started:
        operator.stop(timeout=10)


def create_widget(ns: Namespace, name: str, size: int = 1, **metadata: Any) -> dict[str, Any]:
    body = Widget(name, WidgetSpec(size=size), namespace=ns.name).to_dict()
    body["metadata"].update(metadata)
    result: dict[str, Any] = ns.api.request(
        "POST", f"/apis/{Widget.api_version()}/namespaces/{ns.name}/widgets", body=body)
    return result


def freeze(process: subprocess.Popen[str]) -> None:
    """SIGSTOP `process` and return once every one of its threads has stopped.

    The signal is only queued when kill() returns: the process stops when one of its
    threads is next scheduled and stops the others, and under load a thread on the other
    core can go on for milliseconds (start a reconcile, log a write) after the caller
    read its clock. Read the clock after this instead."""
    process.send_signal(signal.SIGSTOP)
    tasks = Path(f"/proc/{process.pid}/task")
    deadline = time.monotonic() + 10

    def state(task: Path) -> str:
        try:  # "pid (comm) S ...": the state follows the last ")"
            return (task / "stat").read_text().rpartition(")")[2].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return "T"  # a thread that ended stops nothing
    while not all(state(task) in "tT" for task in tasks.iterdir()):
        assert time.monotonic() < deadline, f"process {process.pid} did not stop"
        time.sleep(0.001)


def widget_path(ns: Namespace, name: str) -> str:
    return f"/apis/{Widget.api_version()}/namespaces/{ns.name}/widgets/{name}"


@pytest.fixture(scope="session")
def local_plane(cluster: TestCluster) -> LocalCluster:
    """The project's local plane behind the test cluster, for tests that restart parts of it."""
    folder = Path(cluster.kubeconfig).parent
    if not (folder / "state.json").exists():
        pytest.skip("this test restarts control-plane processes: it needs the local plane "
                    "(python -m operator_kit.localcluster up), not kind or k3d")
    return LocalCluster(folder)


@pytest.fixture(scope="session")
def binaries() -> None:
    """The control plane's binaries, for tests that start a plane of their own."""
    try:
        find_or_build(log=False)
    except BinariesError as err:
        if TestCluster.required():
            pytest.fail(str(err), pytrace=False)
        pytest.skip(str(err))


SHARDED_ENV = "OPERATOR_KIT_TEST_SHARDED_KUBECONFIG"


@pytest.fixture(scope="session")
def sharded_cluster(tmp_path_factory: pytest.TempPathFactory,
                    binaries: None) -> Iterator[TestCluster]:
    """A cluster whose API server filters lists and watches by shard (the feature gate
    ShardedListAndWatch on): the kubeconfig in OPERATOR_KIT_TEST_SHARDED_KUBECONFIG, or a
    local plane started with the gate from the built binaries for the session (about
    5 s), with the Widget CRD."""
    named = os.environ.get(SHARDED_ENV)
    plane = None if named else LocalCluster(tmp_path_factory.mktemp("sharded-plane"))
    try:
        if plane is not None:
            try:
                named = str(plane.up(apiserver_args=gates.apiserver_args(
                    {"ShardedListAndWatch": True})))
            except (LocalClusterError, BinariesError) as err:
                message = f"a local plane with ShardedListAndWatch would not start: {err}"
                if TestCluster.required():
                    pytest.fail(message, pytrace=False)
                pytest.skip(message)
        assert named is not None
        sharded = TestCluster(named)
        sharded.install_crd(Widget)
        yield sharded
    finally:
        if plane is not None:
            plane.down()


@pytest.fixture(scope="session")
def fleet_clusters(cluster: TestCluster, binaries: None,
                   member_clusters: dict[str, TestCluster]) -> list[TestCluster]:
    """Three member clusters for the fleet tests: the hub's plane first, then the plugin's
    two `member_clusters` (started once for the session, shared with the fleet sample's
    tests, or named in OPERATOR_KIT_TEST_FLEET_KUBECONFIGS)."""
    return [cluster, *member_clusters.values()]
