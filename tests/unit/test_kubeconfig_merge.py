"""A ``KUBECONFIG`` list is merged as kubectl merges it (client-go's loading rules).

`merge` is pure (documents in, a kubeconfig out); `load` reads the files; `api_client` and
`current_namespace` use it. That a merged list really connects is
tests/cluster/test_client_retries.py.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from operator_kit.client import kubeconfig
from operator_kit.client.kubeconfig import ConfigurationError, Kubeconfig, load, merge, split
from operator_kit.client.transport import api_client, current_namespace


def cluster(name: str, server: str, **more: str) -> dict[str, Any]:
    return {"name": name, "cluster": {"server": server, **more}}


def user(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "user": fields}


def context(name: str, cluster_: str, user_: str, **more: str) -> dict[str, Any]:
    return {"name": name, "context": {"cluster": cluster_, "user": user_, **more}}


def write(path: Path, document: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(document if isinstance(document, str) else yaml.safe_dump(document))
    return path


def authorization(configuration: Any) -> str | None:
    """The Authorization header the Configuration sends (its key differs by client major)."""
    for setting in configuration.auth_settings().values():
        if setting.get("key") == "authorization":
            return str(setting["value"])
    return None


def names(config: dict[str, Any], section: str) -> list[str]:
    return [entry["name"] for entry in config[section]]


# -- merge (pure) ------------------------------------------------------------------------

def test_the_first_file_to_define_a_name_wins_and_its_entry_is_taken_whole() -> None:
    first = {"clusters": [cluster("prod", "https://first")],
             "users": [user("admin", token="first-token")],
             "contexts": [context("prod", "prod", "admin")]}
    second = {"clusters": [cluster("prod", "https://second", **{"proxy-url": "http://p"}),
                           cluster("dev", "https://dev")],
              "users": [user("admin", token="second", username="ignored"), user("dev")],
              "contexts": [context("prod", "dev", "dev"), context("dev", "dev", "dev")]}
    merged = merge([("/a/first", first), ("/b/second", second)])
    assert names(merged, "clusters") == ["prod", "dev"]
    assert merged["clusters"][0]["cluster"] == {"server": "https://first"}, \
        "not a field-by-field merge: the second file's proxy-url is not taken"
    assert merged["users"][0] == user("admin", token="first-token")
    assert merged["contexts"][0] == context("prod", "prod", "admin")
    assert names(merged, "users") == ["admin", "dev"]
    assert names(merged, "contexts") == ["prod", "dev"]
    assert first["clusters"][0] == cluster("prod", "https://first"), "inputs unchanged"


def test_current_context_comes_from_the_first_file_that_sets_it() -> None:
    merged = merge([("/a", {"contexts": [context("a", "c", "u")]}),
                    ("/b", {"current-context": ""}),
                    ("/c", {"current-context": "from-c"}),
                    ("/d", {"current-context": "from-d"})])
    assert merged["current-context"] == "from-c"
    assert "current-context" not in merge([("/a", {}), ("/b", {"clusters": []})])


def test_other_top_level_fields_come_from_the_first_file_that_has_them() -> None:
    merged = merge([("/a", {"preferences": {}}),
                    ("/b", {"preferences": {"colors": True}}),
                    ("/c", {"preferences": {"colors": False}})])
    assert merged["preferences"] == {"colors": True}
    assert (merged["apiVersion"], merged["kind"]) == ("v1", "Config")


def test_relative_paths_are_resolved_against_the_file_that_defined_them() -> None:
    one = {"clusters": [cluster("c", "https://x", **{"certificate-authority": "pki/ca.crt"})],
           "users": [user("shadowed", token="t")]}
    two = {"clusters": [cluster("abs", "https://y", **{"certificate-authority": "/etc/ca.crt"}),
                        cluster("c", "https://z", **{"certificate-authority": "other.crt"})],
           "users": [user("u", **{"client-certificate": "certs/u.crt",
                                  "client-key": "../keys/u.key", "tokenFile": "token",
                                  "exec": {"command": "./bin/login", "apiVersion": "x"}}),
                     user("on-path", exec={"command": "kubelogin"}),
                     user("empty", **{"client-certificate": ""})]}
    merged = merge([("/etc/one/config", one), ("/home/me/two/config", two)])
    clusters = {c["name"]: c["cluster"] for c in merged["clusters"]}
    users = {u["name"]: u["user"] for u in merged["users"]}
    assert clusters["c"]["certificate-authority"] == "/etc/one/pki/ca.crt"
    assert clusters["abs"]["certificate-authority"] == "/etc/ca.crt"
    assert users["u"]["client-certificate"] == "/home/me/two/certs/u.crt"
    assert users["u"]["client-key"] == os.path.join("/home/me/two", "../keys/u.key")
    assert users["u"]["tokenFile"] == "/home/me/two/token"
    assert users["u"]["exec"]["command"] == "/home/me/two/./bin/login", "a path: resolved"
    assert users["on-path"]["exec"]["command"] == "kubelogin", "a name on PATH: left alone"
    assert users["empty"]["client-certificate"] == ""
    assert two["users"][0]["user"]["tokenFile"] == "token", "inputs unchanged"


def test_a_relative_kubeconfig_path_resolves_against_the_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    merged = merge([("conf/kc", {"users": [user("u", tokenFile="t")]})])
    assert merged["users"][0]["user"]["tokenFile"] == str(tmp_path / "conf" / "t")


# -- the list of files -------------------------------------------------------------------

def test_split_drops_empty_entries_and_repeats_and_expands_home() -> None:
    sep = os.pathsep
    assert split(f"/a{sep}{sep}/b{sep}/a{sep}") == ["/a", "/b"]
    assert split(f"~/kc{sep}/b") == [os.path.expanduser("~/kc"), "/b"]
    assert split(Path("/one")) == ["/one"]


def test_missing_files_are_skipped(tmp_path: Path) -> None:
    two = write(tmp_path / "two", {"clusters": [cluster("c", "https://two")],
                                   "current-context": "ctx"})
    three = write(tmp_path / "three", {"users": [user("u", token="t")]})
    missing = tmp_path / "missing"
    loaded = load(os.pathsep.join(map(str, (missing, two, three))))
    assert loaded.files == [two, three]
    assert loaded.missing == [str(missing)]
    assert names(loaded.config, "clusters") == ["c"] and names(loaded.config, "users") == ["u"]
    assert loaded.config["current-context"] == "ctx"


def test_when_every_file_is_missing_the_error_says_so_and_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as one:
        load(tmp_path / "nope")
    assert str(one.value) == (
        f"kubeconfig {tmp_path / 'nope'} does not exist. Point KUBECONFIG at a valid file, "
        "or start a local control plane: python -m operator_kit.localcluster up")
    listed = os.pathsep.join([str(tmp_path / "a"), str(tmp_path / "b")])
    with pytest.raises(ConfigurationError) as both:
        load(listed)
    assert str(both.value).startswith(f"no kubeconfig of {listed} exists. Point KUBECONFIG")


@pytest.mark.parametrize(("text", "says"), [
    ("clusters: [\n", "is not valid YAML"),
    ("- just\n- a list\n", "is not a kubeconfig: a list, not a mapping"),
    ("clusters: {name: c}\n", "clusters is not a list"),
    ("users:\n- user: {token: t}\n", "users[0] has no name"),
    ("contexts:\n- 3\n", "contexts[0] has no name"),
])
def test_a_file_that_is_not_a_kubeconfig_is_an_error_naming_it(
        tmp_path: Path, text: str, says: str) -> None:
    good = write(tmp_path / "good", {"clusters": [cluster("c", "https://c")]})
    bad = write(tmp_path / "bad", text)
    with pytest.raises(ConfigurationError) as raised:
        load(os.pathsep.join([str(good), str(bad)]))
    assert f"kubeconfig {bad}" in str(raised.value) and says in str(raised.value)
    assert "\n" not in str(raised.value)


def test_a_file_that_cannot_be_read_is_an_error_naming_it(tmp_path: Path) -> None:
    folder = tmp_path / "a-folder"
    folder.mkdir()
    with pytest.raises(ConfigurationError, match=f"kubeconfig {folder} cannot be read"):
        load(folder)


def test_an_empty_file_is_an_empty_kubeconfig(tmp_path: Path) -> None:
    empty = write(tmp_path / "empty", "# nothing yet\n")
    full = write(tmp_path / "full", {"clusters": [cluster("c", "https://c")]})
    loaded = load(os.pathsep.join([str(empty), str(full)]))
    assert loaded.files == [empty, full] and names(loaded.config, "clusters") == ["c"]


def test_the_current_context_body() -> None:
    config = merge([("/a", {"contexts": [context("x", "c", "u", namespace="ns")],
                            "current-context": "x"})])
    assert Kubeconfig(config).current_context == {"cluster": "c", "user": "u",
                                                  "namespace": "ns"}
    assert Kubeconfig(merge([("/a", {"current-context": "gone"})])).current_context is None


# -- api_client and current_namespace use it ---------------------------------------------

@pytest.fixture
def pieces(tmp_path: Path) -> list[Path]:
    """A kubeconfig in pieces, as kubectl users keep one: the first file missing, the
    second the context and the cluster (its CA relative to it), the third the user (its
    token file relative to that one)."""
    write(tmp_path / "clusters" / "pki" / "ca.crt", "not parsed until a connection\n")
    # no newline at the end: the official client sends a token file's content as it is
    write(tmp_path / "users" / "secret" / "token", "the-token")
    second = write(tmp_path / "clusters" / "config", {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [cluster("local", "https://127.0.0.1:6443",
                             **{"certificate-authority": "pki/ca.crt"})],
        "contexts": [context("local", "local", "me", namespace="from-the-context")],
        "current-context": "local"})
    third = write(tmp_path / "users" / "config", {
        "apiVersion": "v1", "kind": "Config", "current-context": "elsewhere",
        "users": [user("me", tokenFile="secret/token")]})
    return [tmp_path / "missing", second, third]


def test_api_client_connects_with_the_merged_list(pieces: list[Path], tmp_path: Path) -> None:
    with api_client(os.pathsep.join(map(str, pieces))) as made:
        configuration = made.configuration
    assert configuration.host == "https://127.0.0.1:6443"
    assert configuration.ssl_ca_cert == str(tmp_path / "clusters" / "pki" / "ca.crt")
    assert authorization(configuration) == "Bearer the-token"


def test_kubeconfig_lists_come_from_the_environment_too(
        pieces: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join(map(str, pieces)))
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    with api_client() as made:
        assert made.configuration.host == "https://127.0.0.1:6443"
    if not kubeconfig.Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace").exists():
        assert current_namespace() == "from-the-context"
        assert current_namespace(pieces[2]) == "default", "no context in that file alone"


def test_a_single_file_still_loads(pieces: list[Path]) -> None:
    whole = pieces[1].parent / "whole"
    config = yaml.safe_load(pieces[1].read_text())
    config["users"] = [user("me", token="inline")]
    write(whole, config)
    with api_client(whole) as made:
        assert made.configuration.host == "https://127.0.0.1:6443"
        assert authorization(made.configuration) == "Bearer inline"


def test_api_client_says_when_no_file_of_the_list_exists(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"does not exist\. Point KUBECONFIG"):
        api_client(tmp_path / "missing")
