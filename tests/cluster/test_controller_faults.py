"""Controllers keep converging when the API server, etcd or the network misbehave."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from prometheus_client import REGISTRY

from operator_kit import Operator
from operator_kit.client.transport import api_client
from operator_kit.localcluster import LocalCluster
from operator_kit.testing import Namespace, TestCluster, eventually
from operator_kit.testing.deploy import service_account_kubeconfig
from operator_kit.testing.faults import TcpProxy, proxied_client

from .conftest import Recorder, WidgetController, create_widget, widget_path

pytestmark = pytest.mark.usefixtures("widget_kind")

RunOperator = Callable[..., Operator]


def size_in_config_map(ns: Namespace, name: str) -> str | None:
    cm = ns.get("v1", "ConfigMap", name)
    return cm["data"]["size"] if cm else None


def set_size(ns: Namespace, name: str, size: int) -> None:
    ns.api.request("PATCH", widget_path(ns, name), body={"spec": {"size": size}},
                   content_type="application/merge-patch+json")


def restarts(reason: str) -> float:
    return REGISTRY.get_sample_value("operator_kit_watch_restarts_total",
                                     {"resource": "widgets.ctl.operator-kit.test",
                                      "cluster": "", "reason": reason}) or 0.0


@pytest.fixture
def proxy(local_plane: LocalCluster) -> Iterator[TcpProxy]:
    with TcpProxy("127.0.0.1", local_plane.state.apiserver_port) as p:
        yield p


def run_through(proxy: TcpProxy, cluster: TestCluster, controller: WidgetController,
                **options: Any) -> Operator:
    operator = Operator("test-operator", [controller], **options)
    operator.use(proxied_client(cluster.client, proxy))
    operator.start()
    assert operator.wait_synced(30)
    return operator


def etcd_compact(plane: LocalCluster) -> int:
    def post(path: str, body: dict[str, Any]) -> Any:
        request = urllib.request.Request(plane.etcd_url + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    revision = int(post("/v3/kv/range", {"key": "AA=="})["header"]["revision"])
    post("/v3/kv/compaction", {"revision": revision, "physical": True})
    return revision


def test_changes_made_while_the_api_server_restarts_are_not_lost(
        namespace: Namespace, run_operator: RunOperator, local_plane: LocalCluster) -> None:
    run_operator(WidgetController(namespace.name))
    create_widget(namespace, "a", size=1)
    create_widget(namespace, "b", size=1)
    eventually(20, lambda: size_in_config_map(namespace, "b") == "1")
    local_plane.restart("kube-apiserver")
    set_size(namespace, "a", 2)
    create_widget(namespace, "c", size=3)
    eventually(60, lambda: size_in_config_map(namespace, "a") == "2")
    eventually(60, lambda: size_in_config_map(namespace, "c") == "3")
    cms = namespace.list("v1", "ConfigMap", labelSelector="!unused")
    owned = [cm["metadata"]["name"] for cm in cms if cm["metadata"].get("ownerReferences")]
    assert sorted(owned) == ["a", "b", "c"], "no duplicate or missing owned objects"


def test_watch_that_expires_after_compaction_relists_and_converges(
        namespace: Namespace, cluster: TestCluster, local_plane: LocalCluster,
        proxy: TcpProxy) -> None:
    operator = run_through(proxy, cluster, WidgetController(namespace.name))
    try:
        create_widget(namespace, "a", size=1)
        eventually(20, lambda: size_in_config_map(namespace, "a") == "1")
        expired_before = restarts("expired")
        proxy.pause()  # the operator sees nothing from here on
        set_size(namespace, "a", 2)
        create_widget(namespace, "b", size=5)
        etcd_compact(local_plane)
        # A fresh API server has a fresh watch cache: resuming from the operator's old
        # resourceVersion is now 410 Gone, as it is after any long enough outage.
        local_plane.restart("kube-apiserver")
        proxy.cut()
        proxy.resume()
        eventually(60, lambda: size_in_config_map(namespace, "a") == "2")
        eventually(60, lambda: size_in_config_map(namespace, "b") == "5")
        assert restarts("expired") > expired_before, "the watch relisted after 410 Gone"
    finally:
        operator.stop(timeout=10)


def test_stalled_watch_is_detected_and_reopened(namespace: Namespace, cluster: TestCluster,
                                                proxy: TcpProxy) -> None:
    operator = run_through(proxy, cluster, WidgetController(namespace.name),
                           watch_stall_timeout=2.0)
    try:
        create_widget(namespace, "a", size=1)
        eventually(20, lambda: size_in_config_map(namespace, "a") == "1")
        stalled_before = restarts("stalled")
        proxy.pause()  # sockets stay open, nothing passes: only a timeout can notice
        set_size(namespace, "a", 2)
        eventually(15, lambda: restarts("stalled") > stalled_before,
                   message="stall detected within its timeout")
        proxy.resume()
        eventually(30, lambda: size_in_config_map(namespace, "a") == "2")
    finally:
        operator.stop(timeout=10)


def test_missing_rbac_on_the_watch_is_logged_and_retried(
        namespace: Namespace, cluster: TestCluster, caplog: pytest.LogCaptureFixture,
        tmp_path: Path) -> None:
    from kubernetes import client

    core = client.CoreV1Api(cluster.client)
    core.create_namespaced_service_account(namespace.name, {"metadata": {"name": "nobody"}})
    kubeconfig = service_account_kubeconfig(cluster, namespace.name, "nobody",
                                            tmp_path / "nobody.kubeconfig")
    operator = Operator("test-operator", [WidgetController(namespace.name)])
    operator.use(api_client(kubeconfig))
    caplog.set_level("ERROR", logger="operator_kit.watching")
    operator.start()
    started = time.monotonic()
    try:
        eventually(10, lambda: any("forbidden" in r.message and "widgets" in r.message
                                   and "list and watch" in r.message for r in caplog.records))
        print(f"\nmissing RBAC: logged {time.monotonic() - started:.1f}s after the start")
        assert not operator.ready(), "an operator that cannot watch is not ready"
        assert operator.informers.values(), "and it keeps trying"
        assert all(i._thread is not None and i._thread.is_alive()
                   for i in operator.informers.values())
    finally:
        operator.stop(timeout=10)


def _role(namespace: str, resources: list[str]) -> dict[str, Any]:
    return {"metadata": {"name": "operator", "namespace": namespace}, "rules": [
        {"apiGroups": ["*"], "resources": resources, "verbs": ["*"]}]}


def test_a_watch_that_fails_after_the_start_is_reported_as_missing_changes_and_catches_up(
        namespace: Namespace, cluster: TestCluster, caplog: pytest.LogCaptureFixture,
        tmp_path: Path) -> None:
    """RBAC taken away from a watched kind while the operator runs (seen when its watch
    reconnects, as after an API server restart): ``operator_kit_watch_failing`` says so,
    with the seconds it has lasted, and the log says changes are being missed; once the
    RBAC is back, the watch works again and what changed meanwhile is reconciled."""
    from kubernetes import client

    core, rbac = client.CoreV1Api(cluster.client), client.RbacAuthorizationV1Api(cluster.client)
    core.create_namespaced_service_account(namespace.name, {"metadata": {"name": "op"}})
    everything = ["widgets", "widgets/status", "configmaps", "events"]
    rbac.create_namespaced_role(namespace.name, _role(namespace.name, everything))
    rbac.create_namespaced_role_binding(namespace.name, {
        "metadata": {"name": "operator"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "operator"},
        "subjects": [{"kind": "ServiceAccount", "name": "op", "namespace": namespace.name}]})
    kubeconfig = service_account_kubeconfig(cluster, namespace.name, "op", tmp_path / "op")
    recorder = Recorder()
    operator = Operator("test-operator", [WidgetController(namespace.name, recorder)])
    operator.use(api_client(kubeconfig))
    caplog.set_level("INFO", logger="operator_kit.watching")
    create_widget(namespace, "before", size=1)
    operator.start()
    try:
        assert operator.wait_synced(30)
        eventually(20, lambda: recorder.count("before") >= 1)
        widgets = next(i for i in operator.informers.values() if i.resource.plural == "widgets")

        def gauge(name: str) -> float | None:
            return REGISTRY.get_sample_value(name, {"resource": widgets.metric_resource,
                                                    "cluster": ""})

        assert gauge("operator_kit_watch_failing") == 0.0
        assert gauge("operator_kit_watch_failing_seconds") == 0.0
        rbac.replace_namespaced_role("operator", namespace.name,
                                     _role(namespace.name, ["configmaps", "events"]))
        widgets.interrupt()  # the connection drops; the new watch is refused (403)
        eventually(20, lambda: gauge("operator_kit_watch_failing") == 1.0)
        create_widget(namespace, "meanwhile", size=2)
        time.sleep(1.5)
        failing_for = gauge("operator_kit_watch_failing_seconds")
        assert failing_for is not None and failing_for >= 1.0, failing_for
        missed = [r.getMessage() for r in caplog.records
                  if f"changes to {widgets.resource} are not seen until it works again"
                  in r.getMessage()]
        assert any("forbidden" in line for line in missed), missed
        assert recorder.count("meanwhile") == 0, "the watch could not see it"
        assert operator.ready(), "readiness stays as it was (docs/reliability.md says why)"

        rbac.replace_namespaced_role("operator", namespace.name,
                                     _role(namespace.name, everything))
        eventually(40, lambda: recorder.count("meanwhile") >= 1)
        assert gauge("operator_kit_watch_failing") == 0.0
        assert gauge("operator_kit_watch_failing_seconds") == 0.0
        assert any("works again after failing for" in r.getMessage()
                   and widgets.description in r.getMessage() for r in caplog.records)
        print(f"\nwatch failing: reported {failing_for:.1f}s into the failure; "
              f"{len(missed)} lines said changes were missed")
    finally:
        operator.stop(timeout=10)


SLOW_OPERATOR = """
import logging, sys, time
logging.basicConfig(level=logging.DEBUG, format="%(relativeCreated)d %(threadName)s %(message)s")
logging.getLogger("urllib3").setLevel(logging.WARNING)
logging.getLogger("kubernetes").setLevel(logging.WARNING)
from operator_kit import Action, Operator
from tests.cluster.conftest import WidgetController

class Slow(WidgetController):
    def reconcile(self, obj, ctx):
        print("reconciling", obj.name, flush=True)
        time.sleep(3)
        ctx.patch_status(obj, {"observed_size": obj.spec.size})
        print("finished", obj.name, flush=True)
        return Action.await_change()

sys.exit(Operator("slow", [Slow(sys.argv[1])], kubeconfig=sys.argv[2]).run())
"""


def test_sigterm_during_a_reconcile_lets_it_finish(namespace: Namespace,
                                                  cluster: TestCluster) -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", SLOW_OPERATOR, namespace.name, cluster.kubeconfig],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    # The output is read on a thread so that an operator which never prints
    # "reconciling w" fails the test after a timeout instead of hanging it.
    lines: queue.Queue[str | None] = queue.Queue()
    collected: list[str] = []

    def read_output() -> None:
        assert process.stdout is not None
        for output_line in process.stdout:
            lines.put(output_line)
        lines.put(None)

    reader = threading.Thread(target=read_output, name="slow-operator-output", daemon=True)
    reader.start()
    try:
        create_widget(namespace, "w", size=4)
        deadline = time.monotonic() + 60
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError("the operator did not start reconciling w within 60 s:\n"
                                     + "".join(collected)) from None
            assert line is not None, "the operator exited early:\n" + "".join(collected)
            collected.append(line)
            if line.startswith("reconciling w"):
                break
        process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        process.wait(timeout=60)
        reader.join(timeout=10)
        while (line := lines.get_nowait() if not lines.empty() else None) is not None:
            collected.append(line)
        output = "".join(collected)
        assert time.monotonic() - signalled < 10, output
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, output
    assert "finished w" in output
    status = namespace.api.get(widget_path(namespace, "w")).get("status", {})
    assert status.get("observed_size") == 4, "the in-flight reconcile completed its write"


def test_reconcile_that_raises_on_some_objects_does_not_hold_up_others(
        namespace: Namespace, run_operator: RunOperator) -> None:
    class Picky(WidgetController):
        on_error = 0.2

        def reconcile(self, obj: Any, ctx: Any) -> Any:
            if obj.name.startswith("bad"):
                self.recorder.record(obj.name, 0.0)
                raise ValueError("bad widget")
            return super().reconcile(obj, ctx)

    recorder = Recorder()
    run_operator(Picky(namespace.name, recorder))
    create_widget(namespace, "bad-1")
    for i in range(5):
        create_widget(namespace, f"good-{i}", size=i)
    created = time.monotonic()
    for i in range(5):
        eventually(20, lambda i=i: size_in_config_map(namespace, f"good-{i}") == str(i))
    print(f"\nraises on some: the 5 others converged in {time.monotonic() - created:.1f}s "
          f"while the failing one was tried {recorder.count('bad-1')} times")
    eventually(10, lambda: recorder.count("bad-1") >= 3, message="the failing one is retried")
    try:
        namespace.api.get(f"/api/v1/namespaces/{namespace.name}/configmaps/bad-1")
        raise AssertionError("bad-1 must not have been reconciled")
    except ApiException as err:
        assert err.status == 404


def reconcile_errors() -> float:
    return REGISTRY.get_sample_value("operator_kit_controller_reconcile_errors_total",
                                     {"controller": "widget", "cluster": ""}) or 0.0


def test_an_object_deleted_during_its_reconcile_is_gone_not_failed(
        namespace: Namespace, run_operator: RunOperator) -> None:
    class Racing(WidgetController):
        on_error = 0.2

        def reconcile(self, obj: Any, ctx: Any) -> Any:
            if obj.name == "vanishes":  # someone deletes it while we work on it
                namespace.api.request("DELETE", widget_path(namespace, obj.name))
            if obj.name == "needs-secret":  # a 404 about another object is a failure
                self.recorder.record(obj.name, 0.0)
                namespace.api.get(f"/api/v1/namespaces/{namespace.name}/secrets/missing")
            return super().reconcile(obj, ctx)  # its status write finds nothing: 404

    recorder = Recorder()
    errors_before = reconcile_errors()
    run_operator(Racing(namespace.name, recorder))
    create_widget(namespace, "vanishes")
    create_widget(namespace, "stays", size=2)
    eventually(20, lambda: size_in_config_map(namespace, "stays") == "2")
    eventually(10, lambda: recorder.count("vanishes") == 1)
    create_widget(namespace, "needs-secret")
    eventually(10, lambda: recorder.count("needs-secret") >= 2,
               message="a reconcile that fails on another object's 404 is retried")
    time.sleep(1)  # time enough for a retry of "vanishes" (on_error 0.2 s), were there one

    assert recorder.count("vanishes") == 1, "a deleted object is not retried"
    reasons = [(e["involvedObject"]["name"], e["reason"])
               for e in namespace.list("v1", "Event")]
    assert ("vanishes", "ReconcileError") not in reasons
    assert ("needs-secret", "ReconcileError") in reasons
    errors = reconcile_errors() - errors_before
    assert 1 <= errors <= recorder.count("needs-secret")  # recorded before each failure


def test_changes_made_while_etcd_restarts_are_not_lost(
        namespace: Namespace, run_operator: RunOperator, local_plane: LocalCluster) -> None:
    run_operator(WidgetController(namespace.name))
    create_widget(namespace, "a", size=1)
    eventually(20, lambda: size_in_config_map(namespace, "a") == "1")
    local_plane.restart("etcd")
    eventually(60, lambda: set_size(namespace, "a", 2) or True)  # the API server recovers
    create_widget(namespace, "b", size=4)
    eventually(60, lambda: size_in_config_map(namespace, "a") == "2")
    eventually(60, lambda: size_in_config_map(namespace, "b") == "4")


def test_another_writer_fighting_over_the_same_objects_converges(
        namespace: Namespace, run_operator: RunOperator) -> None:
    import threading

    recorder = Recorder()
    run_operator(WidgetController(namespace.name, recorder))
    for i in range(3):
        create_widget(namespace, f"w{i}", size=0)
    stop = threading.Event()

    def meddle() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            for i in range(3):
                cm = f"/api/v1/namespaces/{namespace.name}/configmaps/w{i}"
                try:  # overwrite a field the operator owns, and change the spec
                    namespace.api.request("PATCH", cm, body={"data": {"size": "tampered"}},
                                          content_type="application/merge-patch+json")
                    set_size(namespace, f"w{i}", n)
                except ApiException:
                    pass
            stop.wait(0.05)

    meddler = threading.Thread(target=meddle, name="meddler")
    meddler.start()
    time.sleep(4)
    stop.set()
    meddler.join(10)
    stopped, during = time.monotonic(), len(recorder.calls)
    for i in range(3):
        final = namespace.api.get(widget_path(namespace, f"w{i}"))

        def converged(i: int = i, final: Any = final) -> bool:
            obj = namespace.api.get(widget_path(namespace, f"w{i}"))
            return (size_in_config_map(namespace, f"w{i}") == str(final["spec"]["size"])
                    and obj.get("status", {}).get("observed_generation")
                    == obj["metadata"]["generation"])

        eventually(30, converged, message=f"w{i} converged after the fight")
    converged_at = time.monotonic()
    while True:  # the echoes of the last writes may reconcile once more, then it is quiet
        settled = len(recorder.calls)
        time.sleep(1.0)
        if len(recorder.calls) == settled:
            break
    assert time.monotonic() - converged_at < 10, "it went quiet soon after converging"
    print(f"\nanother writer: {during} reconciles during 4 s of tampering; all converged "
          f"{time.monotonic() - stopped:.1f}s after it stopped")
    time.sleep(2)
    assert len(recorder.calls) == settled, "no reconciling once the other writer stopped"


def test_connections_to_the_api_server_carry_tcp_keepalive(cluster: TestCluster) -> None:
    """A peer that vanishes without a word (a node or load balancer gone) is noticed by the
    kernel's keepalive probes, so a call without a timeout of its own cannot block for good."""
    import socket

    from kubernetes import client

    from operator_kit.client.transport import KEEPALIVE_COUNT, KEEPALIVE_IDLE, KEEPALIVE_INTERVAL

    fresh = api_client(cluster.kubeconfig)
    client.VersionApi(fresh).get_code()
    manager = fresh.rest_client.pool_manager
    pools = [manager.pools[key] for key in manager.pools.keys()]
    sockets = [conn.sock for pool in pools for conn in list(pool.pool.queue)
               if conn is not None and conn.sock is not None]
    assert sockets, "the request left a kept-alive connection in the pool"
    for sock in sockets:
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == KEEPALIVE_IDLE
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == KEEPALIVE_INTERVAL
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == KEEPALIVE_COUNT
    fresh.close()


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_request_the_api_server_stops_answering_ends_at_its_deadline(
        namespace: Namespace, cluster: TestCluster, proxy: TcpProxy, method: str) -> None:
    """A request waits on a blocking socket (cheaper than a socket timeout: deadlines.py)
    and the reaper ends it at its deadline; the connections recover once the server
    answers again."""
    import urllib3

    from operator_kit.client import deadlines
    from operator_kit.client.transport import Api

    api = Api(proxied_client(cluster.client, proxy))
    path = f"/api/v1/namespaces/{namespace.name}/configmaps"
    api.request("GET", path)  # a connection, made and back in the pool
    proxy.pause()  # sockets stay open, nothing passes: only the deadline can end it
    reaped, started = deadlines.REAPER.reaped, time.monotonic()
    with pytest.raises(urllib3.exceptions.ReadTimeoutError, match=r"deadline=6s"):
        api.request(method, path, timeout=6.0, body={
            "metadata": {"name": "late"}, "data": {}} if method == "POST" else None)
    elapsed = time.monotonic() - started
    print(f"\n{method} to a stalled API server ended after {elapsed:.2f}s (deadline 6s)")
    assert 6.0 <= elapsed < 7.0
    assert deadlines.REAPER.reaped > reaped, "ended by the reaper, not by a socket timeout"
    proxy.resume()
    assert api.request("GET", path)["kind"] == "ConfigMapList"
