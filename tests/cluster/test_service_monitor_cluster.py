"""``--service-monitor`` against a running operator: the ServiceMonitor's TLS settings (the
CA Secret, the server name) verify what the replicas serve on ``/metrics``, and an
overlay's namePrefix keeps them right.

The plane has no Prometheus (nor the Prometheus Operator's CRDs), so the scrape is done
here as Prometheus would do it, with the ServiceMonitor's settings; the documents
themselves are in tests/unit/test_service_monitor.py."""

from __future__ import annotations

import base64
import socket
import ssl
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from backup_operator import operator

from operator_kit.localcluster import find_or_build
from operator_kit.localcluster.plane import free_port
from operator_kit.manifests import operator_manifests, write_kustomize_base
from operator_kit.testing import Namespace, TestCluster
from operator_kit.testing.deploy import LocalDeployment
from operator_kit.webhooks.certificates import service_dns_names

SAMPLE_DIR = str(Path(__file__).resolve().parents[2] / "samples" / "backup")
APP = "backup_operator:operator"


def scrape(port: int, path: str, *, ca: str, server_name: str) -> tuple[int, str]:
    """GET `path` over TLS from 127.0.0.1:`port`, trusting only `ca`, checking the
    certificate names `server_name`: as Prometheus scrapes with a ServiceMonitor's
    ``tlsConfig``. The status and the body."""
    context = ssl.create_default_context(cadata=ca)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=server_name) as tls:
        tls.sendall(f"GET {path} HTTP/1.0\r\nHost: {server_name}\r\n"
                    "Connection: close\r\n\r\n".encode())
        answer = b""
        while chunk := tls.recv(65536):
            answer += chunk
    head, _, body = answer.decode().partition("\r\n\r\n")
    return int(head.split()[1]), body


def monitor_endpoint(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (monitor,) = [d for d in docs if d["kind"] == "ServiceMonitor"]
    (endpoint,) = monitor["spec"]["endpoints"]
    return dict(endpoint)


def test_the_service_monitor_s_tls_settings_verify_the_metrics_the_replicas_serve(
        cluster: TestCluster, namespace: Namespace) -> None:
    port = free_port()
    docs = operator_manifests(operator, app=APP, namespace=namespace.name, image="local",
                              replicas=1, webhook_port=port, service_monitor=True)
    endpoint = monitor_endpoint(docs)
    assert (endpoint["scheme"], endpoint["path"]) == ("https", "/metrics")
    tls = endpoint["tlsConfig"]
    # No Prometheus Operator CRDs on the plane: everything but the ServiceMonitor is applied.
    deployment = LocalDeployment(cluster, operator, app=APP, namespace=namespace.name,
                                 replicas=1, port=port, pythonpath=[SAMPLE_DIR],
                                 documents=[d for d in docs if d["kind"] != "ServiceMonitor"])
    deployment.apply()
    try:
        with deployment:
            deployment.start()
            deployment.wait_serving()
            secret = namespace.get("v1", "Secret", tls["ca"]["secret"]["name"])
            assert secret is not None, "the Secret the ServiceMonitor trusts is the operator's"
            ca = base64.b64decode(secret["data"][tls["ca"]["secret"]["key"]]).decode()
            status, body = scrape(port, endpoint["path"], ca=ca, server_name=tls["serverName"])
            assert status == 200
            assert "# TYPE operator_kit_controller_reconciles_total counter" in body.splitlines()
            assert "_created" not in body, "no _created series on gunicorn's /metrics"
            with pytest.raises(ssl.SSLCertVerificationError):  # the check is a real one
                scrape(port, endpoint["path"], ca=ca, server_name="metrics.example.com")
    finally:
        deployment.delete()


def test_an_overlay_s_name_prefix_renames_the_server_name_with_the_service(
        cluster: TestCluster, tmp_path: Path) -> None:
    kubectl = find_or_build(log=False).kubectl
    assert kubectl is not None, "operator_kit.localcluster builds kubectl with the plane"
    write_kustomize_base(tmp_path / "base", operator_manifests(
        operator, app=APP, namespace="backup-operator", image="example.com/op:1",
        service_monitor=True))
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        "namePrefix: dev-\nnamespace: backup-dev\nresources: [../base]\n")
    rendered = list(yaml.safe_load_all(subprocess.run(
        [str(kubectl), "kustomize", str(overlay)], capture_output=True, text=True,
        timeout=60, check=True).stdout))
    endpoint = monitor_endpoint(rendered)
    deployment = next(d for d in rendered if d["kind"] == "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    service = {e["name"]: e.get("value") for e in container["env"]}[
        "OPERATOR_KIT_WEBHOOK_SERVICE"]
    assert service == "dev-backup-operator"
    # The renamed operator's certificate is issued for its renamed Service's names.
    assert endpoint["tlsConfig"]["serverName"] in service_dns_names(service, "backup-dev")
    (monitor,) = [d for d in rendered if d["kind"] == "ServiceMonitor"]
    selected = [d["metadata"]["name"] for d in rendered if d["kind"] == "Service" and all(
        d["metadata"]["labels"].get(k) == v
        for k, v in monitor["spec"]["selector"]["matchLabels"].items())]
    assert selected == ["dev-backup-operator-metrics"]
