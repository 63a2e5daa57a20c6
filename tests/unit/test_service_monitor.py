"""``--service-monitor``: a Prometheus Operator ServiceMonitor and the metrics Service it
scrapes, wired to the port the pods serve ``/metrics`` on, and nothing without the flag."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
import yaml

from operator_kit.manifests import kustomize_base, operator_manifests
from operator_kit.manifests.__main__ import main as manifests_main
from operator_kit.webhooks.certificates import ExternalCertificate, service_dns_names
from tests.unit.test_manifests import plain_operator, webhook_operator


def documents(operator: Any = None, **options: Any) -> list[dict[str, Any]]:
    return operator_manifests(operator or webhook_operator(), app="m:operator",
                              namespace="ops", image="img:1", service_monitor=True, **options)


def selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def scraped(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The ServiceMonitor, the one Service it selects and the container port that Service's
    endpoint port leads to (asserting each exists and is the only match)."""
    (monitor,) = [d for d in docs if d["kind"] == "ServiceMonitor"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["namespace"] == "ops"
    services = [d for d in docs if d["kind"] == "Service"
                and selects(monitor["spec"]["selector"]["matchLabels"], d["metadata"]["labels"])]
    assert len(services) == 1, [s["metadata"]["name"] for s in services]
    (service,) = services
    (endpoint,) = monitor["spec"]["endpoints"]
    (port,) = [p for p in service["spec"]["ports"] if p["name"] == endpoint["port"]]
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]
    assert selects(service["spec"]["selector"], pod["metadata"]["labels"])
    (container,) = pod["spec"]["containers"]
    (target,) = [p for p in container["ports"] if p["name"] == port["targetPort"]]
    return monitor, service, target


def test_without_the_flag_there_is_no_service_monitor_and_no_metrics_service() -> None:
    docs = operator_manifests(webhook_operator(), app="m:operator", namespace="ops",
                              image="img:1")
    assert "ServiceMonitor" not in [d["kind"] for d in docs]
    assert not any(d["metadata"]["name"].endswith("-metrics") for d in docs)


def test_a_webhook_operator_is_scraped_over_tls_on_the_port_gunicorn_serves_metrics_on(
        ) -> None:
    operator = webhook_operator()
    monitor, service, target = scraped(documents(operator))
    assert target == {"name": "https", "containerPort": 8443, "protocol": "TCP"}
    assert service["metadata"]["name"] == f"{operator.name}-metrics"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert (endpoint["path"], endpoint["scheme"]) == ("/metrics", "https")
    # It checks the certificate the replicas keep: their CA, the name it is issued for.
    assert endpoint["tlsConfig"] == {
        "ca": {"secret": {"name": operator.webhook_secret, "key": "ca.crt"}},
        "serverName": operator.webhook_service}
    assert endpoint["tlsConfig"]["serverName"] in service_dns_names(
        operator.webhook_service, "ops")
    assert "insecureSkipVerify" not in endpoint["tlsConfig"]


def test_a_brought_certificate_s_secret_is_the_ca_the_scrape_trusts() -> None:
    operator = webhook_operator()
    monitor, _, _ = scraped(documents(operator, certificate=ExternalCertificate("webhook-tls")))
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["tlsConfig"] == {
        "ca": {"secret": {"name": "webhook-tls", "key": "ca.crt"}},
        "serverName": f"{operator.webhook_service}.ops.svc"}


def test_an_operator_without_webhooks_is_scraped_over_http_on_its_metrics_port() -> None:
    docs = documents(plain_operator())
    monitor, service, target = scraped(docs)
    assert target == {"name": "metrics", "containerPort": 8080, "protocol": "TCP"}
    assert service["spec"]["ports"][0]["port"] == 8080
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics",
                                             "scheme": "http"}]
    (container,) = next(d for d in docs if d["kind"] == "Deployment")[
        "spec"]["template"]["spec"]["containers"]
    assert {"name": "OPERATOR_KIT_METRICS_BIND_ADDRESS", "value": ":8080"} in container["env"]


@pytest.mark.parametrize("webhooks", [True, False])
def test_the_network_policy_lets_the_scrape_in(webhooks: bool) -> None:
    docs = documents(webhook_operator() if webhooks else plain_operator())
    _, _, target = scraped(docs)
    policy = next(d for d in docs if d["kind"] == "NetworkPolicy")
    allowed = [p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]]
    assert target["name"] in allowed


def test_both_documents_carry_the_recommended_labels_as_component_metrics() -> None:
    docs = documents()
    for doc in docs:
        if doc["kind"] == "ServiceMonitor" or doc["metadata"]["name"].endswith("-metrics"):
            labels = doc["metadata"]["labels"]
            assert labels["app.kubernetes.io/component"] == "metrics"
            assert labels["app.kubernetes.io/version"] == "1"
            assert labels["app.kubernetes.io/instance"] == labels["app.kubernetes.io/name"]
    webhook_service = next(d for d in docs if d["kind"] == "Service"
                           and not d["metadata"]["name"].endswith("-metrics"))
    assert webhook_service["metadata"]["labels"]["app.kubernetes.io/component"] == "operator"


def test_the_kustomize_base_keeps_them_in_a_file_of_their_own_after_the_deployment() -> None:
    files = kustomize_base(documents())
    assert [d["kind"] for d in yaml.safe_load_all(files["metrics.yaml"])] == [
        "Service", "ServiceMonitor"]
    resources = yaml.safe_load(files["kustomization.yaml"])["resources"]
    assert resources.index("deployment.yaml") < resources.index("metrics.yaml")
    assert "ServiceMonitor" not in files["deployment.yaml"]


def test_the_command_adds_them_on_request(capsys: pytest.CaptureFixture[str]) -> None:
    code = manifests_main(["--service-monitor", "--namespace", "ops"],
                          operator=webhook_operator(), app="m:operator")
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    kinds = [d["kind"] for d in yaml.safe_load_all(out)]
    assert kinds.count("ServiceMonitor") == 1 and kinds.count("Service") == 2
    with pytest.raises(SystemExit):
        manifests_main(["--help"], operator=webhook_operator(), app="m:operator")
    assert "--service-monitor" in capsys.readouterr().out
