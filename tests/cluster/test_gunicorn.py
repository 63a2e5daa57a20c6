"""``gunicorn operator_kit.webhooks:app`` runs an operator's controllers next to its probes."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from operator_kit.localcluster.plane import free_port
from operator_kit.testing import Namespace, TestCluster, eventually
from operator_kit.webhooks.certificates import WebhookCertificate

from .conftest import create_widget

pytestmark = pytest.mark.usefixtures("widget_kind")
ROOT = Path(__file__).resolve().parents[2]


def get(url: str, ca: Path) -> tuple[int, str]:
    context = ssl.create_default_context(cafile=str(ca))
    try:
        with urllib.request.urlopen(url, context=context, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_gunicorn_serves_probes_and_metrics_and_runs_the_controllers(
        namespace: Namespace, cluster: TestCluster, tmp_path: Path) -> None:
    certificate = WebhookCertificate.generate_for("localhost", ["localhost"])
    tls = tmp_path / "tls"
    certificate.install(tls, point_server=False)
    port = free_port()
    env = dict(os.environ, OPERATOR_KIT_APP="tests.cluster.served_operator:operator",
               OPERATOR_KIT_BIND=f"127.0.0.1:{port}", OPERATOR_KIT_TLS_DIR=str(tls),
               OPERATOR_KIT_MANAGE_TLS="0", TEST_NAMESPACE=namespace.name,
               TEST_KUBECONFIG=cluster.kubeconfig, PYTHONPATH=str(ROOT))
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", "python:operator_kit.gunicorn_conf",
         "operator_kit.webhooks:app"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"https://localhost:{port}"
    try:
        eventually(30, lambda: get(f"{base}/livez", tls / "ca.crt")[0] == 200)
        eventually(30, lambda: get(f"{base}/readyz", tls / "ca.crt")[0] == 200,
                   message="ready once the caches synced")
        create_widget(namespace, "served", size=8)
        cm = eventually(20, lambda: namespace.get("v1", "ConfigMap", "served"))
        assert cm["data"]["size"] == "8"
        status, metrics = get(f"{base}/metrics", tls / "ca.crt")
        assert status == 200
        assert 'operator_kit_controller_reconciles_total{cluster="",controller="widget"}' in metrics
        with pytest.raises((ConnectionError, urllib.error.URLError)):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/livez", timeout=5)  # TLS only
        server.send_signal(signal.SIGTERM)
        output = server.communicate(timeout=40)[0]
        assert server.returncode == 0, output
        assert "operator served-operator stopped" in output
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
