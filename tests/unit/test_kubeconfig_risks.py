"""What a kubeconfig from a source the operator does not own may carry: the pure check
(`operator_kit.client.kubeconfig_risks`). Through the real API server, with commands
that must not run and a listener that must hear nothing: tests/cluster/test_fleet_trust.py."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from operator_kit.client.kubeconfig_risks import (
    RISKS,
    Finding,
    ForeignKubeconfigError,
    check_categories,
    check_foreign,
    risks,
)
from operator_kit.fleet import Cluster

TOKEN = "s3cr3t-t0ken-value"


def kubeconfig(user: dict[str, Any] | None = None,
               cluster: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Config", "current-context": "x",
            "clusters": [{"name": "x", "cluster": {"server": "https://10.0.0.1:6443",
                                                   "certificate-authority-data": "Q0E=",
                                                   **(cluster or {})}}],
            "users": [{"name": "admin", "user": {"token": TOKEN, **(user or {})}}],
            "contexts": [{"name": "x", "context": {"cluster": "x", "user": "admin"}}]}


EXEC = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "/bin/sh",
                 "args": ["-c", "touch /tmp/pwned"]}}
AUTH_PROVIDER = {"auth-provider": {"name": "gcp", "config": {"cmd-path": "/bin/true"}}}


@pytest.mark.parametrize(("user", "cluster", "category", "field"), [
    (EXEC, None, "exec", "exec"),
    (AUTH_PROVIDER, None, "auth-provider", "auth-provider"),
    ({"tokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"}, None, "files",
     "tokenFile"),
    ({"client-certificate": "/etc/tls.crt"}, None, "files", "client-certificate"),
    ({"client-key": "tls.key"}, None, "files", "client-key"),
    (None, {"certificate-authority": "/etc/ca.crt"}, "files", "certificate-authority"),
    (None, {"proxy-url": "http://10.0.0.9:3128"}, "proxy", "proxy-url"),
    (None, {"insecure-skip-tls-verify": True}, "insecure-tls", "insecure-skip-tls-verify"),
    # the official client skips verification for any value Python finds true
    (None, {"insecure-skip-tls-verify": "false"}, "insecure-tls", "insecure-skip-tls-verify"),
])
def test_each_risky_field_is_refused_naming_it_and_the_setting_that_allows_it(
        user: dict[str, Any] | None, cluster: dict[str, Any] | None, category: str,
        field: str) -> None:
    config = kubeconfig(user, cluster)
    with pytest.raises(ForeignKubeconfigError) as raised:
        check_foreign(config, "Secret capi/east-kubeconfig")
    message = str(raised.value)
    assert "\n" not in message and message.startswith("Secret capi/east-kubeconfig: refused:")
    assert f"has {field} ({category})" in message
    assert f"--insecure-kubeconfig={category} (OPERATOR_KIT_INSECURE_KUBECONFIG)" in message
    assert raised.value.categories == (category,)
    assert TOKEN not in message and "pwned" not in message and "10.0.0.9" not in message
    check_foreign(config, "Secret capi/east-kubeconfig", allow={category})  # opted in


def test_a_self_contained_kubeconfig_passes() -> None:
    assert risks(kubeconfig()) == []
    check_foreign(kubeconfig(cluster={"insecure-skip-tls-verify": False,
                                      "tls-server-name": "api"}), "Secret a/b")
    check_foreign(kubeconfig(user={"client-certificate-data": "Q0VSVA==",
                                   "client-key-data": "S0VZ", "tokenFile": ""}), "Secret a/b")


def test_every_entry_counts_not_only_the_current_contexts() -> None:
    config = kubeconfig()
    config["users"].append({"name": "spare", "user": EXEC})
    config["clusters"].append({"name": "spare", "cluster": {"proxy-url": "http://p"}})
    assert risks(config) == [Finding("exec", "exec", "users[1] (spare)"),
                             Finding("proxy", "proxy-url", "clusters[1] (spare)")]
    with pytest.raises(ForeignKubeconfigError) as raised:
        check_foreign(config, "Secret a/b", allow={"proxy"})
    assert raised.value.categories == ("exec",)
    assert "--insecure-kubeconfig=exec " in str(raised.value)


def test_several_findings_are_one_line_allowing_all_their_categories() -> None:
    config = kubeconfig({**EXEC, "tokenFile": "/t"}, {"insecure-skip-tls-verify": True})
    with pytest.raises(ForeignKubeconfigError) as raised:
        check_foreign(config, "Secret a/b")
    assert raised.value.categories == ("exec", "files", "insecure-tls")
    assert "--insecure-kubeconfig=exec,files,insecure-tls" in str(raised.value)
    assert str(raised.value).count("\n") == 0


@pytest.mark.parametrize("broken", [
    {"users": "admin"},
    {"users": [{"name": "a", "user": ["exec"]}]},
    {"clusters": ["https://10.0.0.1"]},
])
def test_an_entry_that_is_not_a_mapping_is_refused_as_not_a_kubeconfig(
        broken: dict[str, Any]) -> None:
    with pytest.raises(ForeignKubeconfigError, match="refused, not a kubeconfig"):
        check_foreign(broken, "Secret a/b", allow=RISKS)


def test_a_document_of_aliases_is_checked_in_time_linear_in_its_text() -> None:
    # 100,000 users that are one alias each: the check looks at fields, not into values.
    text = "users:\n- &u {name: a, user: {token: t}}\n" + "- *u\n" * 100_000
    document = yaml.safe_load(text)
    assert risks(document) == []


def test_the_categories_to_allow_are_checked() -> None:
    assert check_categories([" exec", "files ", ""], "x") == {"exec", "files"}
    with pytest.raises(ValueError, match="'tls' is not a kind of kubeconfig content"):
        check_categories(["tls"], "--insecure-kubeconfig")


def test_a_providers_in_memory_kubeconfig_is_checked_before_the_client_loads_it(
        tmp_path: Any) -> None:
    marker = tmp_path / "ran"
    config = kubeconfig({"exec": {"apiVersion": "client.authentication.k8s.io/v1",
                                  "command": "/bin/sh",
                                  "args": ["-c", f"touch {marker}; echo '{{}}'"]}})
    with pytest.raises(ValueError, match=r"cluster a: the kubeconfig of Secret c/a: refused"):
        Cluster("a", "Secret c/a", "v", config).api_client(pool_size=1)
    assert not marker.exists()
