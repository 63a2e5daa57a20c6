"""``python -m my_operator`` against a real API server: probes and metrics on their own
ports, every dashboard series present, JSON logs that carry the reconciled object; and
gunicorn logging in the same format."""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Any

import pytest

from operator_kit.localcluster.plane import free_port
from operator_kit.testing import Namespace, TestCluster, eventually, stop_process
from tests.unit.test_metrics import CONTROLLER_RUNTIME, DASHBOARD, promtool

from .conftest import Widget, WidgetSpec, create_widget

pytestmark = pytest.mark.usefixtures("widget_kind")
ROOT = Path(__file__).resolve().parents[2]


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError:
        return 0, ""


class Output:
    """A process's output, read line by line in a thread (so its pipe never fills)."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.append(line.rstrip("\n"))

    def join(self) -> list[str]:
        self._thread.join(10)
        return self.lines


def series(metrics: str, name: str) -> list[str]:
    return [line for line in metrics.splitlines()
            if line.startswith((name + "{", name + " "))]


def objects_of(lines: list[str]) -> list[dict[str, Any]]:
    parsed = []
    for line in lines:
        try:
            parsed.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"not one JSON object per line: {line!r}") from None
    return parsed


def test_a_plain_run_serves_probes_and_metrics_and_logs_zap_json_lines_with_the_object(
        namespace: Namespace, cluster: TestCluster) -> None:
    probes, metrics_port = free_port(), free_port()
    env = dict(os.environ, TEST_NAMESPACE=namespace.name, TEST_LEADER_ELECTION="1",
               PYTHONPATH=str(ROOT))
    env.pop("TEST_KUBECONFIG", None)
    env.pop("KUBECONFIG", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.cluster.served_operator",
         "--kubeconfig", cluster.kubeconfig, "--namespace", namespace.name,
         "--log-format", "json", "--log-level", "debug",
         "--health-probe-bind-address", f"127.0.0.1:{probes}",
         "--metrics-bind-address", f"127.0.0.1:{metrics_port}"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    output = Output(process.stderr)
    try:
        eventually(60, lambda: get(f"http://127.0.0.1:{probes}/livez")[0] == 200)
        eventually(60, lambda: get(f"http://127.0.0.1:{probes}/readyz")[0] == 200,
                   message="ready once it leads and its caches synced")
        create_widget(namespace, "plain", size=3)
        eventually(60, lambda: namespace.get("v1", "ConfigMap", "plain"))
        broken = Widget("broken", WidgetSpec(size=1, message="fail"), namespace=namespace.name)
        namespace.api.request("POST", f"/apis/{Widget.api_version()}/namespaces/"
                              f"{namespace.name}/widgets", body=broken.to_dict())
        eventually(60, lambda: any('"broken"' in line and '"error"' in line
                                   for line in list(output.lines)))
        status, metrics = get(f"http://127.0.0.1:{metrics_port}/metrics")
        assert status == 200
        assert get(f"http://127.0.0.1:{probes}/metrics")[0] == 404  # a port of its own

        # Every series kubebuilder's dashboards query is there, for this controller.
        for name, labels in {**DASHBOARD, **CONTROLLER_RUNTIME}.items():
            if name.startswith("controller_runtime_webhook_"):
                continue  # a plain run serves no webhooks (gunicorn does)
            found = series(metrics, name)
            assert found, f"{name}: no series"
            if "controller" in labels:
                assert any('controller="widget"' in line for line in found), (name, found)
            elif name == "leader_election_master_status":
                assert f'{name}{{name="served-operator"}} 1.0' in found
            elif "name" in labels:
                assert any('name="widget"' in line for line in found), (name, found)
        assert any('result="success"' in line
                   for line in series(metrics, "controller_runtime_reconcile_total"))
        tool = promtool()
        if tool is not None:
            checked = subprocess.run([tool, "check", "metrics"], input=metrics.encode(),
                                     capture_output=True, timeout=60, check=False)
            assert checked.returncode == 0, checked.stdout.decode() + checked.stderr.decode()

        process.send_signal(signal.SIGTERM)
        assert process.wait(40) == 0
    finally:
        stop_process(process)
    lines = objects_of(output.join())
    mine = [line for line in lines if line.get("name") == "plain"]
    assert any(line["logger"] == "operator_kit.controller.widget"
               and line["msg"] == "widget of size 3" for line in mine), "ctx.log's line"
    reconciled = [line for line in mine if line["msg"].startswith("widget: reconciled ")]
    assert reconciled and reconciled[0]["level"] == "debug"
    assert ": success; triggered by primary Widget " in reconciled[0]["msg"]
    assert reconciled[0]["triggers"][0]["source"] == "primary", reconciled[0]
    for line in mine:
        assert (line["controller"], line["controllerKind"]) == ("widget", "Widget")
        assert line["controllerGroup"] == Widget.group
        assert line["namespace"] == namespace.name
        assert len(line["reconcileID"]) == 32
        assert {"ts", "level", "logger", "caller", "msg"} <= set(line)
    assert any(line["msg"] == "operator served-operator stopped" for line in lines)
    # A failed reconcile's line, as a pipeline that parses controller-runtime's reads it.
    failed = next(line for line in lines if line.get("name") == "broken" and "error" in line)
    assert failed["level"] == "error" and failed["controllerKind"] == "Widget"
    assert failed["error"] == "RuntimeError: widget broken asked to fail"
    assert failed["errorType"] == "RuntimeError"
    assert "asked to fail" not in failed["msg"] and "reconcile of" in failed["msg"]
    assert 'raise RuntimeError(f"widget {widget.name} asked to fail")' in failed["stacktrace"]
    logged_at = datetime.datetime.fromisoformat(failed["ts"].replace("Z", "+00:00"))
    assert time.time() - logged_at.timestamp() < 300
    # --log-level debug, and still no line of the client libraries (urllib3's, ...)
    assert not [line for line in lines if line["logger"].startswith(("urllib3", "kubernetes"))]


def test_gunicorn_logs_in_the_same_json_format_its_own_lines_included(
        namespace: Namespace, cluster: TestCluster) -> None:
    port = free_port()
    env = dict(os.environ, OPERATOR_KIT_APP="tests.cluster.served_operator:operator",
               OPERATOR_KIT_BIND=f"127.0.0.1:{port}", OPERATOR_KIT_INSECURE_HTTP="1",
               OPERATOR_KIT_LOG_FORMAT="json", OPERATOR_KIT_LOG_LEVEL="debug",
               TEST_NAMESPACE=namespace.name, TEST_KUBECONFIG=cluster.kubeconfig,
               PYTHONPATH=str(ROOT))
    # Plain HTTP: certificate files named by an earlier test's install() would make it
    # serve TLS, and this probe would never get an answer (the old xfail).
    env.pop("OPERATOR_KIT_TLS_CERT", None)
    env.pop("OPERATOR_KIT_TLS_KEY", None)
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", "python:operator_kit.gunicorn_conf",
         "operator_kit.webhooks:app"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert server.stdout is not None
    output = Output(server.stdout)
    try:
        eventually(60, lambda: get(f"http://127.0.0.1:{port}/readyz")[0] == 200,
                   message="ready; its output: " + "".join(list(output.lines)[-20:]))
        create_widget(namespace, "served-json", size=2)
        eventually(60, lambda: namespace.get("v1", "ConfigMap", "served-json"))
        eventually(30, lambda: any('"served-json"' in line and "reconciled" in line
                                   for line in list(output.lines)))
        server.send_signal(signal.SIGTERM)
        assert server.wait(40) == 0
    finally:
        stop_process(server)
    lines = objects_of(output.join())
    assert any(line["logger"] == "gunicorn.error" and "Booting worker" in line["msg"]
               for line in lines), "gunicorn's own lines in the same format"
    reconciled = [line for line in lines if line.get("name") == "served-json"
                  and line["msg"].startswith("widget: reconciled ")]
    assert reconciled and reconciled[0]["namespace"] == namespace.name
