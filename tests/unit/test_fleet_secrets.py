"""KubeconfigSecrets' pure part: which Secrets are members, named how, and what a Secret
that is not usable says (never what it holds). Against the API server:
tests/cluster/test_fleet.py."""

from __future__ import annotations

import base64
import logging
from typing import Any

import pytest
import yaml

from operator_kit.api.rbac import Rule
from operator_kit.fleet import (
    CLUSTER_NAME_LABEL,
    Cluster,
    Fleet,
    HubAccess,
    KubeconfigSecrets,
    plan,
)
from operator_kit.fleet.secrets import members

TOKEN = "s3cr3t-t0ken-value"


def kubeconfig(server: str = "https://10.0.0.1:6443", token: str = TOKEN) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Config", "current-context": "x",
            "clusters": [{"name": "x", "cluster": {"server": server,
                                                   "certificate-authority-data": "Q0E="}}],
            "users": [{"name": "x", "user": {"token": token}}],
            "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}]}


def secret(namespace: str, name: str, cluster: str | None, value: object = None,
           key: str = "value") -> dict[str, Any]:
    labels = {CLUSTER_NAME_LABEL: cluster} if cluster else {}
    data = {} if value is None else {key: base64.b64encode(
        (value if isinstance(value, str) else yaml.safe_dump(value)).encode()).decode()}
    return {"metadata": {"namespace": namespace, "name": name, "labels": labels},
            "data": data}


def test_a_cluster_api_kubeconfig_secret_is_a_member_and_its_other_secrets_are_not() -> None:
    found, _, problems, _ = members([
        secret("capi", "east-kubeconfig", "east", kubeconfig()),
        secret("capi", "east-ca", "east", "not a kubeconfig"),
        secret("capi", "east-etcd", "east", "x"),
        secret("capi", "east-user-kubeconfig", "east", kubeconfig()),
    ], qualified=False)
    assert list(found) == ["east"] and problems == []
    east = found["east"]
    assert east.kubeconfig == "Secret capi/east-kubeconfig"  # where from, for logs
    assert east.config == kubeconfig() and TOKEN not in repr(east)


def test_every_namespace_qualifies_the_names_and_an_unlabelled_secret_counts_by_name() -> None:
    found, _, _, _ = members([secret("a", "east-kubeconfig", "east", kubeconfig()),
                           secret("b", "east-kubeconfig", "east", kubeconfig()),
                           secret("b", "west-kubeconfig", None, kubeconfig())],
                          qualified=True)
    assert sorted(found) == ["a.east", "b.east", "b.west"]


def test_a_changed_kubeconfig_rejoins_and_an_unchanged_one_is_not_parsed_again() -> None:
    first, known, _, _ = members([secret("c", "east-kubeconfig", "east", kubeconfig())],
                              qualified=False)
    again, known, _, _ = members([secret("c", "east-kubeconfig", "east", kubeconfig())],
                              qualified=False, known=known)
    assert again["east"] is first["east"]
    changed, _, _, _ = members([secret("c", "east-kubeconfig", "east",
                                    kubeconfig("https://10.0.0.2:6443"))],
                            qualified=False, known=known)
    assert plan(first, changed).leave == ["east"]
    assert plan(first, changed).join == [changed["east"]]
    assert plan(first, {}).leave == ["east"]  # the Secret deleted: the cluster leaves


@pytest.mark.parametrize(("value", "says"), [
    (None, "has no key 'value'"),
    (f"token: {TOKEN}\n  bad: [", "is not valid YAML (line "),
    (f"just a token {TOKEN}", "is not a kubeconfig"),
])
def test_an_unusable_secret_is_skipped_and_named_without_its_content(
        value: str | None, says: str) -> None:
    found, _, problems, refused = members([secret("c", "bad-kubeconfig", "bad", value),
                                  secret("c", "good-kubeconfig", "good", kubeconfig())],
                                 qualified=False)
    assert list(found) == ["good"]
    assert len(problems) == 1 and "Secret c/bad-kubeconfig" in problems[0]
    assert says in problems[0] and TOKEN not in problems[0]
    assert refused[("c", "bad-kubeconfig")].reasons == ("invalid",)


def test_base64_that_is_not_text_is_named() -> None:
    broken = secret("c", "bad-kubeconfig", "bad")
    broken["data"] = {"value": "%%%not-base64"}
    problems = members([broken], qualified=False).problems
    assert problems == ["Secret c/bad-kubeconfig: value is not base64-encoded UTF-8 text"]


def test_a_name_that_cannot_name_a_cluster_is_a_problem() -> None:
    problems = members([secret("c", "East-kubeconfig", "East", kubeconfig())],
                       qualified=False).problems
    assert "cannot name a cluster" in problems[0]


def test_an_in_memory_kubeconfig_makes_a_client_for_its_server() -> None:
    member = Cluster("a", "Secret c/a-kubeconfig", "v", kubeconfig())
    made = member.api_client(pool_size=7)
    try:
        assert made.configuration.host == "https://10.0.0.1:6443"
        assert made.configuration.connection_pool_maxsize == 7
    finally:
        made.close()


def test_an_unusable_in_memory_kubeconfig_says_where_from_and_hides_its_token() -> None:
    config = kubeconfig()
    config["current-context"] = TOKEN  # an error message that would quote it
    with pytest.raises(ValueError) as raised:
        Cluster("a", "Secret c/a-kubeconfig", "v", config).api_client(pool_size=1)
    message = str(raised.value)
    assert message.startswith("cluster a: the kubeconfig of Secret c/a-kubeconfig cannot be "
                              "used: ")
    assert TOKEN not in message


def test_a_kubeconfig_that_runs_a_command_is_refused_and_its_cluster_does_not_join() -> None:
    config = kubeconfig()
    config["users"][0]["user"] = {"exec": {"command": "/bin/sh", "args": ["-c", "id"]}}
    reading = members([secret("c", "evil-kubeconfig", "evil", config),
                       secret("c", "good-kubeconfig", "good", kubeconfig())], qualified=False)
    assert list(reading.found) == ["good"]
    assert list(reading.refused) == [("c", "evil-kubeconfig")]
    refusal = reading.refused[("c", "evil-kubeconfig")]
    assert refusal.reasons == ("exec",) and reading.problems == [refusal.problem]
    assert refusal.problem.startswith("Secret c/evil-kubeconfig: refused: users[0] (x) has "
                                      "exec (exec)")
    assert "--insecure-kubeconfig=exec" in refusal.problem
    allowed = members([secret("c", "evil-kubeconfig", "evil", config)], qualified=False,
                      allow={"exec"})
    assert list(allowed.found) == ["evil"] and allowed.found["evil"].allow == {"exec"}
    # allowed once, then no longer: the known member is checked again, not kept
    again = members([secret("c", "evil-kubeconfig", "evil", config)], qualified=False,
                    known=allowed.by_secret)
    assert again.found == {} and again.refused[("c", "evil-kubeconfig")].reasons == ("exec",)


def test_the_provider_allows_its_own_categories_and_the_operators() -> None:
    provider = KubeconfigSecrets(namespace="capi", allow=["proxy"])
    assert provider.allowed() == {"proxy"}
    provider.bind_operator("team-operator", lambda: {"exec"})
    assert provider.allowed() == {"proxy", "exec"}


def test_the_provider_reads_secrets_in_the_namespaces_it_names() -> None:
    rules = (Rule([""], ["secrets"], ["list", "watch"]),
             Rule(["events.k8s.io"], ["events"], ["create", "get", "patch"]))
    assert KubeconfigSecrets(namespace="capi").hub_access() == HubAccess(rules, ("capi",))
    assert KubeconfigSecrets(namespace=["a", "b", "a"]).hub_access() == HubAccess(
        rules, ("a", "b"))
    assert KubeconfigSecrets(all_namespaces=True).hub_access() == HubAccess(rules, None)


def test_reading_every_namespace_must_be_asked_for() -> None:
    with pytest.raises(ValueError, match="name the namespaces of the kubeconfig Secrets"):
        KubeconfigSecrets()
    with pytest.raises(ValueError, match="not both"):
        KubeconfigSecrets(namespace="capi", all_namespaces=True)


def test_without_a_hub_the_provider_says_how_to_give_one() -> None:
    with pytest.raises(RuntimeError, match=r"Fleet.of\(operator, provider\)"):
        KubeconfigSecrets(namespace="capi").clusters()


def test_the_fleet_logs_each_problem_once_on_a_line_of_its_own(
        caplog: pytest.LogCaptureFixture) -> None:
    class Provider:
        problems = ["Secret c/x-kubeconfig: refused: a", "Secret c/y-kubeconfig: refused: b"]

        def clusters(self) -> dict[str, Cluster]:
            return {}

    provider = Provider()
    fleet = Fleet("f", [], provider)
    with caplog.at_level(logging.ERROR, logger="operator_kit.fleet"):
        fleet.sync()
        fleet.sync()  # the same problems: not logged again
        provider.problems = provider.problems[1:]
        fleet.sync()
        provider.problems = ["Secret c/x-kubeconfig: refused: a", *provider.problems]
        fleet.sync()  # gone, then back: logged again
    assert [r.getMessage() for r in caplog.records] == [
        "Secret c/x-kubeconfig: refused: a", "Secret c/y-kubeconfig: refused: b",
        "Secret c/x-kubeconfig: refused: a"]
