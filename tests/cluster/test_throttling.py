"""Throttling: an API server that answers 429 to most requests, under an operator.

A separate local plane (in ``tmp_path``) runs kube-apiserver with API Priority and
Fairness off and one request in flight at a time (one mutating, one read-only), so
almost any concurrency is refused with ``429 Too Many Requests`` and ``Retry-After``.
The max-in-flight filter exempts the group system:masters, which is who the plane's
admin kubeconfig is, so the operator and the creator act as a ServiceAccount bound to
cluster-admin (a bearer token from the TokenRequest API) instead. A hundred Widgets are
created at once from a thread pool (the creator retries its 429s, honouring
Retry-After) while an operator with eight reconcile workers runs in-process. What must
hold:

- 429s really happened: the API server counted 429 answers, and the operator's
  reconciles failed with 429 (and were retried);
- every Widget converges: its ConfigMap carries its size, its status reports it;
- the operator does not spin: reconcile attempts stay under 5x the Widget count, and
  once everything has converged, no reconcile runs for several seconds.

It needs the control-plane binaries (like test_localcluster.py), not the shared cluster.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes.client.exceptions import ApiException
from prometheus_client import REGISTRY

from operator_kit import Operator
from operator_kit.localcluster import LocalCluster
from operator_kit.testing import Namespace, TestCluster, eventually, running
from operator_kit.testing.deploy import service_account_kubeconfig
from tests.cluster.conftest import Widget, WidgetController, WidgetSpec

T = TypeVar("T")

COUNT = 100
THROTTLED = [
    "--enable-priority-and-fairness=false",
    "--max-requests-inflight=1",
    "--max-mutating-requests-inflight=1",
]


@pytest.fixture
def throttled_plane(binaries: None, tmp_path: Path) -> Iterator[LocalCluster]:
    plane = LocalCluster(tmp_path / "throttled")
    try:
        plane.up(apiserver_args=THROTTLED, timeout=90)
        yield plane
    finally:
        plane.down()


def unprivileged_kubeconfig(admin: TestCluster, path: Path) -> str:
    """A kubeconfig for a cluster-admin ServiceAccount: subject to max-in-flight, unlike
    system:masters."""
    admin.api.request("POST", "/api/v1/namespaces/default/serviceaccounts",
                      body={"metadata": {"name": "throttled"}})
    admin.api.request(
        "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        body={"metadata": {"name": "throttled-cluster-admin"},
              "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                          "name": "cluster-admin"},
              "subjects": [{"kind": "ServiceAccount", "name": "throttled",
                            "namespace": "default"}]})
    return str(service_account_kubeconfig(admin, "default", "throttled", path))


class Throttled:
    """Counts the 429s one client saw, thread-safely."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def retrying(self, fn: Callable[[], T], timeout: float = 60.0) -> T:
        """Call `fn`, retrying 429s after their Retry-After (capped), until `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return fn()
            except ApiException as err:
                if err.status != 429 or time.monotonic() > deadline:
                    raise
                with self._lock:
                    self.count += 1
                time.sleep(min(_retry_after(err), 1.0))


def _retry_after(err: ApiException) -> float:
    try:
        return max(0.05, float((err.headers or {}).get("Retry-After", "")))
    except ValueError:
        return 0.2


class Captured(logging.Handler):
    """Keeps the messages of log records, to show what the operator said under 429s."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def metric(name: str, labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def refused_requests(plane: LocalCluster, throttled: Throttled) -> float:
    """The requests the plane answered with 429 (``apiserver_request_total{code="429"}``)."""

    def scrape() -> bytes:
        status, body = plane.get("/metrics", timeout=10)
        if status == 429:
            raise ApiException(status=429)
        assert status == 200, f"/metrics answered {status}: {body[:200]!r}"
        return body

    total = 0.0
    for line in throttled.retrying(scrape).decode().splitlines():
        if line.startswith("apiserver_request_total{") and 'code="429"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_operator_converges_without_spinning_under_429s(throttled_plane: LocalCluster,
                                                        tmp_path: Path) -> None:
    throttled = Throttled()
    admin = TestCluster(str(throttled_plane.kubeconfig))  # system:masters: never throttled
    admin.install_crd(Widget)
    ns: Namespace = admin.namespace("throttle")
    cluster = TestCluster(unprivileged_kubeconfig(admin,
                                                  tmp_path / "throttled.kubeconfig"))

    controller = WidgetController(ns.name)
    controller.max_concurrent_reconciles = 8
    controller.name = "widget-throttled"  # its own metric series, whatever else ran before
    labels = {"controller": controller.name, "cluster": ""}
    reconciles_before = metric("operator_kit_controller_reconciles_total", labels)
    errors_before = metric("operator_kit_controller_reconcile_errors_total", labels)
    captured = Captured()
    controller_log = logging.getLogger("operator_kit.controller")
    controller_log.addHandler(captured)

    path = f"/apis/{Widget.api_version()}/namespaces/{ns.name}/widgets"
    names = [f"w-{i:03d}" for i in range(COUNT)]

    def create(i: int) -> None:
        body = Widget(names[i], WidgetSpec(size=i), namespace=ns.name).to_dict()

        def post() -> Any:
            try:
                return cluster.api.request("POST", path, body=body)
            except ApiException as err:
                if err.status == 409:  # an earlier attempt got through after all
                    return None
                raise

        throttled.retrying(post)

    def converged() -> bool:
        widgets = throttled.retrying(lambda: cluster.api.get(path))["items"]
        maps = throttled.retrying(
            lambda: cluster.api.get(f"/api/v1/namespaces/{ns.name}/configmaps"))["items"]
        sizes = {m["metadata"]["name"]: m.get("data", {}).get("size") for m in maps}
        behind = [
            w["metadata"]["name"] for w in widgets
            if (w.get("status") or {}).get("observed_size") != w["spec"]["size"]
            or sizes.get(w["metadata"]["name"]) != str(w["spec"]["size"])
        ]
        assert len(widgets) == COUNT, f"{len(widgets)} widgets exist"
        assert not behind, f"{len(behind)} widgets not converged, e.g. {behind[:5]}"
        return True

    try:
        with running(Operator("throttled-operator", [controller]), cluster):
            started = time.monotonic()
            with ThreadPoolExecutor(max_workers=32) as pool:
                list(pool.map(create, range(COUNT)))
            eventually(45, converged, interval=1.0, message="all widgets converged")
            took = time.monotonic() - started

            # Settled: once nothing is queued (a retry still pending after a later success
            # may run once more, harmlessly), no reconcile for a while.
            eventually(30, lambda: metric("operator_kit_controller_queue_depth", labels) == 0
                       and metric("operator_kit_controller_reconciles_in_flight", labels) == 0,
                       message="work queue drained")
            settled_at = metric("operator_kit_controller_reconciles_total", labels)
            time.sleep(5)
            after_quiet = metric("operator_kit_controller_reconciles_total", labels)
    finally:
        controller_log.removeHandler(captured)

    reconciles = metric("operator_kit_controller_reconciles_total", labels) - reconciles_before
    errors = metric("operator_kit_controller_reconcile_errors_total", labels) - errors_before
    refused = refused_requests(throttled_plane, throttled)
    throttled_logs = [m for m in captured.messages if "429" in m]
    print(f"\nconverged {COUNT} widgets in {took:.1f}s; reconciles {reconciles:.0f}, "
          f"errors {errors:.0f} ({len(throttled_logs)} logged as 429); creator 429s "
          f"{throttled.count}; API server 429s {refused:.0f}")

    assert refused > 0, "the API server refused no request: the throttle did not bite"
    # operator_kit's Api retries a 429 after its Retry-After (with jitter) as client-go
    # does, so reconciles rarely fail on throttling at all; the server's count above shows
    # the throttle bit, the bound below that nobody spun.
    assert reconciles < 5 * COUNT, f"{reconciles:.0f} reconciles for {COUNT} widgets: spinning"
    assert after_quiet == settled_at, (
        f"{after_quiet - settled_at:.0f} reconciles in the 5 s after convergence")
    assert all(controller.recorder.count(n) >= 1 for n in names)
