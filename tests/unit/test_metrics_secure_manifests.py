"""``--metrics-secure`` in the manifests: what the operator may ask the API server, the
ClusterRole a scraper is bound to, the Deployment's setting, the ServiceMonitor's token.

That these are enough against a real API server (the operator run as its generated
ServiceAccount) is tests/cluster/test_metrics_secure.py."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from operator_kit.manifests import kustomize_base, operator_manifests
from operator_kit.manifests.__main__ import main as manifests_main
from tests.unit.test_manifests import plain_operator, webhook_operator

TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


def documents(operator: Any, **options: Any) -> list[dict[str, Any]]:
    return operator_manifests(operator, app="m:operator", namespace="ops", image="img:1",
                              **options)


def named(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    (found,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(found)


@pytest.mark.parametrize("make", [webhook_operator, plain_operator])
def test_the_operator_may_ask_who_a_token_is_and_what_it_may_do(make: Any) -> None:
    operator = make()
    rules = named(documents(operator, metrics_secure=True), "ClusterRole",
                  operator.name)["rules"]
    assert {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"],
            "verbs": ["create"]} in rules
    assert {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"],
            "verbs": ["create"]} in rules
    plain = named(documents(operator), "ClusterRole", operator.name)["rules"]
    assert not any("tokenreviews" in r["resources"] for r in plain), "only when asked"


def test_a_metrics_reader_cluster_role_is_there_to_bind_to_prometheus() -> None:
    operator = webhook_operator()
    docs = documents(operator, metrics_secure=True)
    role = named(docs, "ClusterRole", f"{operator.name}-metrics-reader")
    assert role["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    assert role["metadata"]["labels"]["operator-kit.io/installation"] == "ops"
    assert role["metadata"]["labels"]["app.kubernetes.io/component"] == "metrics"
    assert "namespace" not in role["metadata"]
    assert not [d for d in docs if d["kind"] == "ClusterRoleBinding"
                and d["roleRef"]["name"] == role["metadata"]["name"]], \
        "who scrapes is the user's to bind"
    assert not [d for d in documents(operator) if d["metadata"]["name"].endswith("-reader")]


@pytest.mark.parametrize("make", [webhook_operator, plain_operator])
def test_the_deployment_turns_it_on(make: Any) -> None:
    setting = {"name": "OPERATOR_KIT_METRICS_SECURE", "value": "1"}
    assert setting in container(documents(make(), metrics_secure=True))["env"]
    assert setting not in container(documents(make()))["env"]


def test_without_webhooks_the_pod_says_its_metrics_are_https() -> None:
    docs = documents(plain_operator(), metrics_secure=True)
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scheme"] == "https"
    probes = container(docs)["livenessProbe"]["httpGet"]
    assert probes["scheme"] == "HTTP", "the kubelet's probes stay plain"


def endpoint(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (monitor,) = [d for d in docs if d["kind"] == "ServiceMonitor"]
    (found,) = monitor["spec"]["endpoints"]
    return dict(found)


def test_the_service_monitor_sends_prometheus_s_token_and_checks_the_webhook_certificate(
        ) -> None:
    operator = webhook_operator()
    found = endpoint(documents(operator, metrics_secure=True, service_monitor=True))
    assert found == {"port": "metrics", "path": "/metrics", "scheme": "https",
                     "bearerTokenFile": TOKEN,
                     "tlsConfig": {"ca": {"secret": {"name": operator.webhook_secret,
                                                     "key": "ca.crt"}},
                                   "serverName": operator.webhook_service}}


def test_without_webhooks_the_service_monitor_sends_the_token_over_https() -> None:
    found = endpoint(documents(plain_operator(), metrics_secure=True, service_monitor=True))
    assert found == {"port": "metrics", "path": "/metrics", "scheme": "https",
                     "bearerTokenFile": TOKEN, "tlsConfig": {"insecureSkipVerify": True}}


def test_the_kustomize_base_puts_the_reader_role_with_the_metrics() -> None:
    files = kustomize_base(documents(webhook_operator(), metrics_secure=True,
                                     service_monitor=True))
    kinds = [d["kind"] for d in yaml.safe_load_all(files["metrics.yaml"])]
    assert sorted(kinds) == ["ClusterRole", "Service", "ServiceMonitor"]


def test_the_command_takes_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    code = manifests_main(["--metrics-secure", "--namespace", "ops"],
                          operator=plain_operator(), app="m:operator")
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    names = [d["metadata"]["name"] for d in yaml.safe_load_all(out)]
    assert f"{plain_operator().name}-metrics-reader" in names


def _generated(*flags: str, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    code = manifests_main([*flags, "--namespace", "ops"], operator=plain_operator(),
                          app="m:operator")
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    return list(yaml.safe_load_all(out))


def test_the_generated_manifests_are_secure_by_default_as_kubebuilder_s(
        capsys: pytest.CaptureFixture[str]) -> None:
    docs = _generated(capsys=capsys)
    assert {"name": "OPERATOR_KIT_METRICS_SECURE", "value": "1"} in container(docs)["env"]
    assert f"{plain_operator().name}-metrics-reader" in [d["metadata"]["name"] for d in docs]


def test_no_metrics_secure_turns_it_off(capsys: pytest.CaptureFixture[str]) -> None:
    docs = _generated("--no-metrics-secure", capsys=capsys)
    assert "OPERATOR_KIT_METRICS_SECURE" not in [e["name"] for e in container(docs)["env"]]
    assert f"{plain_operator().name}-metrics-reader" not in [
        d["metadata"]["name"] for d in docs]
    assert container(docs)["readinessProbe"]["httpGet"]["scheme"] == "HTTP"
