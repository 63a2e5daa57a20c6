"""The operator's command line (`Operator.main`): each flag, its environment variable,
and bad input as one line with exit code 2.

The probe and metrics servers are exercised here on loopback with an operator that is
never started (no request reaches a cluster: `main` is given a `run` that only probes
the servers); the same against a real API server is in tests/cluster/test_cli_cluster.py.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from operator_kit import (
    Action,
    Context,
    Controller,
    CustomResource,
    LeaderElection,
    Operator,
    Sharding,
    cli,
)
from operator_kit.cli import Address, Settings, UsageError, apply_environment, parse
from operator_kit.localcluster.plane import free_port


@dataclass
class ThingSpec:
    size: int = 0


class Thing(CustomResource):
    group = "cli.operator-kit.test"
    version = "v1"
    kind = "Thing"
    spec: ThingSpec


@dataclass
class ClusterThingSpec:
    size: int = 0


class ClusterThing(CustomResource):
    group = "cli.operator-kit.test"
    version = "v1"
    kind = "ClusterThing"
    namespaced = False
    spec: ClusterThingSpec


class ThingController(Controller[Thing]):
    resource = Thing

    def reconcile(self, obj: Thing, ctx: Context) -> Action:
        return Action.await_change()


class ClusterThingController(Controller[ClusterThing]):
    resource = ClusterThing

    def reconcile(self, obj: ClusterThing, ctx: Context) -> Action:
        return Action.await_change()


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Path:
    """A kubeconfig that loads (nothing ever connects to its server)."""
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u",
                                                "namespace": "from-context"}}]}))
    return path


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    saved = (root.level, list(root.handlers))
    yield
    root.setLevel(saved[0])
    root.handlers[:] = saved[1]


def run_main(operator: Operator, argv: list[str], capsys: pytest.CaptureFixture[str],
             run: Any = None) -> tuple[int, str, str]:
    code = cli.main(operator, argv, run=run or (lambda: 0))
    out, err = capsys.readouterr()
    return code, out, err


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


# -- parsing -----------------------------------------------------------------------------

def test_without_flags_probes_and_metrics_listen_on_loopback_outside_a_pod() -> None:
    settings = parse([], environ={})
    assert settings == Settings(health_probe_bind_address=Address("127.0.0.1", 8081),
                                metrics_bind_address=Address("127.0.0.1", 8080))


def test_in_a_pod_probes_and_metrics_listen_on_every_interface() -> None:
    settings = parse([], environ={"KUBERNETES_SERVICE_HOST": "10.0.0.1"})
    assert settings.health_probe_bind_address == Address("0.0.0.0", 8081)
    assert settings.metrics_bind_address == Address("0.0.0.0", 8080)


def test_a_kubeconfig_list_needs_only_one_file_that_exists(kubeconfig: Path) -> None:
    listed = f"/no/such/kubeconfig:{kubeconfig}"
    assert parse(["--kubeconfig", listed]).kubeconfig == listed


def test_each_flag_is_read(kubeconfig: Path) -> None:
    settings = parse(["--namespace", "ops", "--watch-namespace", "apps", "--kubeconfig",
                      str(kubeconfig), "--log-level", "DEBUG", "--log-format", "json",
                      "--health-probe-bind-address", ":9001",
                      "--metrics-bind-address", "[::1]:9002"], environ={})
    assert settings == Settings(
        namespace="ops", watch_namespaces=("apps",), kubeconfig=str(kubeconfig),
        log_level="debug", log_format="json",
        health_probe_bind_address=Address("0.0.0.0", 9001),
        metrics_bind_address=Address("::1", 9002))


def test_each_environment_variable_is_read_and_a_flag_wins_over_it(kubeconfig: Path) -> None:
    environ = {"OPERATOR_KIT_NAMESPACE": "ops", "OPERATOR_KIT_WATCH_NAMESPACE": "apps",
               "KUBECONFIG": str(kubeconfig), "OPERATOR_KIT_LOG_LEVEL": "warning",
               "OPERATOR_KIT_LOG_FORMAT": "json",
               "OPERATOR_KIT_HEALTH_PROBE_BIND_ADDRESS": "0",
               "OPERATOR_KIT_METRICS_BIND_ADDRESS": "127.0.0.2:9100"}
    settings = parse([], environ=environ)
    assert settings == Settings(
        namespace="ops", watch_namespaces=("apps",), kubeconfig=str(kubeconfig),
        log_level="warning", log_format="json", health_probe_bind_address=None,
        metrics_bind_address=Address("127.0.0.2", 9100))
    assert parse(["--log-format", "text", "--namespace", "mine"],
                 environ=environ).log_format == "text"
    assert parse(["--namespace", "mine"], environ=environ).namespace == "mine"


def test_insecure_kubeconfig_categories_come_from_the_flag_or_else_the_variable() -> None:
    assert parse([], environ={}).insecure_kubeconfig == ()
    environ = {"OPERATOR_KIT_INSECURE_KUBECONFIG": "proxy, insecure-tls"}
    assert parse([], environ=environ).insecure_kubeconfig == ("insecure-tls", "proxy")
    assert parse(["--insecure-kubeconfig", "exec", "--insecure-kubeconfig", "files"],
                 environ=environ).insecure_kubeconfig == ("exec", "files")


def test_apply_environment_gives_the_operator_the_insecure_kubeconfig_categories(
        monkeypatch: pytest.MonkeyPatch) -> None:
    operator = Operator("op", [ThingController()])
    assert operator.insecure_kubeconfig == frozenset()
    cli.apply_environment(operator, Settings(insecure_kubeconfig=("exec",)))
    assert operator.insecure_kubeconfig == {"exec"}
    monkeypatch.setenv("OPERATOR_KIT_INSECURE_KUBECONFIG", "files")  # as under gunicorn
    cli.apply_environment(operator)
    assert operator.insecure_kubeconfig == {"files"}


def test_zero_turns_a_server_off() -> None:
    settings = parse(["--health-probe-bind-address", "0", "--metrics-bind-address", "0"],
                     environ={})
    assert settings.health_probe_bind_address is None
    assert settings.metrics_bind_address is None


def test_the_client_libraries_debug_lines_are_asked_for_in_the_environment() -> None:
    assert parse([], environ={}).log_libraries is False
    assert parse([], environ={"OPERATOR_KIT_LOG_LIBRARIES": "yes"}).log_libraries is True


def test_manifests_takes_every_flag_after_it() -> None:
    assert parse(["--manifests", "--namespace", "x"], environ={}).manifests == [
        "--namespace", "x"]


@pytest.mark.parametrize(("argv", "environ", "message"), [
    (["--log-level", "loud"], {}, "--log-level 'loud' is not a log level; use one of debug"),
    ([], {"OPERATOR_KIT_LOG_LEVEL": "loud"}, "OPERATOR_KIT_LOG_LEVEL 'loud' is not a log"),
    (["--log-format", "xml"], {}, "--log-format 'xml' is not a log format; use text or json"),
    (["--zap-log-level", "loud"], {}, "--zap-log-level 'loud' is not a log level; use one of "
     "debug, info, warn, error, panic, or a verbosity above 0 (debug)"),
    (["--zap-log-level", "0"], {}, "--zap-log-level '0' is not a log level"),
    (["--zap-encoder", "text"], {}, "--zap-encoder 'text' is not a zap encoder; use console "
     "(text) or json"),
    (["--log-level", "info", "--zap-log-level", "debug"], {}, "--log-level and "
     "--zap-log-level: one setting given twice; keep one"),
    (["--log-format", "json", "--zap-encoder", "json"], {}, "--log-format and --zap-encoder: "
     "one setting given twice"),
    ([], {"OPERATOR_KIT_LOG_LIBRARIES": "loud"}, "OPERATOR_KIT_LOG_LIBRARIES='loud': "
     "neither yes nor no; use 1, true, yes or on to turn it on"),
    (["--metrics-bind-address", "8080"], {}, "--metrics-bind-address '8080' is not an "
     "address; give HOST:PORT or :PORT"),
    ([], {"OPERATOR_KIT_HEALTH_PROBE_BIND_ADDRESS": "host:http"},
     "OPERATOR_KIT_HEALTH_PROBE_BIND_ADDRESS 'host:http' is not an address"),
    (["--metrics-bind-address", ":70000"], {}, "is not an address"),
    ([], {"OPERATOR_KIT_METRICS_SECURE": "maybe"}, "OPERATOR_KIT_METRICS_SECURE='maybe': "
     "neither yes nor no"),
    (["--metrics-secure", "--metrics-cert-dir", "/"], {}, "--metrics-cert-dir /: no tls.crt "
     "or tls.key there; give the folder a kubernetes.io/tls Secret is mounted in"),
    ([], {"OPERATOR_KIT_METRICS_CERT_DIR": "/no/such"}, "OPERATOR_KIT_METRICS_CERT_DIR "
     "/no/such: no tls.crt or tls.key there"),
    (["--kubeconfig", "/no/such/kubeconfig"], {}, "--kubeconfig /no/such/kubeconfig: no such "
     "file; point it at the cluster's kubeconfig"),
    ([], {"KUBECONFIG": "/no/such/kubeconfig"}, "KUBECONFIG /no/such/kubeconfig: no such file"),
    ([], {"KUBECONFIG": "/no/such/a:/no/such/b"},
     "KUBECONFIG /no/such/a:/no/such/b: none of these files exists"),
    (["--kubeconfig", "/"], {}, "--kubeconfig /: is a directory, not a kubeconfig file; "
     "point it at the cluster's kubeconfig"),
    ([], {"KUBECONFIG": "/"}, "KUBECONFIG /: is a directory, not a kubeconfig file"),
    ([], {"KUBECONFIG": "/no/such/a:/"},
     "KUBECONFIG /no/such/a:/: none of these is a kubeconfig file (/: a directory)"),
    (["--bogus"], {}, "unrecognized arguments: --bogus; run operator --help for the flags"),
    (["--namespace"], {}, "argument --namespace: expected one argument"),
    (["--namespace", "Bad_NS"], {}, "--namespace='Bad_NS': not a namespace name; use at most "
     "63 lowercase letters, digits and '-', beginning and ending with a letter or digit "
     "(a DNS-1123 label)"),
    ([], {"OPERATOR_KIT_NAMESPACE": "Bad_NS"}, "OPERATOR_KIT_NAMESPACE='Bad_NS': not a "
     "namespace name"),
    (["--watch-namespace", "a" * 64], {}, "--watch-namespace='" + "a" * 64 + "': 64 "
     "characters, more than 63"),
    ([], {"OPERATOR_KIT_WATCH_NAMESPACE": "-apps"}, "OPERATOR_KIT_WATCH_NAMESPACE='-apps': "
     "not a namespace name"),
    ([], {"OPERATOR_KIT_WEBHOOK_SERVICE": "1-svc"}, "OPERATOR_KIT_WEBHOOK_SERVICE='1-svc': not "
     "a Service name; use at most 63 lowercase letters, digits and '-', beginning with a "
     "letter"),
    ([], {"OPERATOR_KIT_VALIDATING_WEBHOOK_CONFIGURATION": "Checks"},
     "OPERATOR_KIT_VALIDATING_WEBHOOK_CONFIGURATION='Checks': not a webhook configuration "
     "name; use at most 253 lowercase letters"),
    ([], {"OPERATOR_KIT_MUTATING_WEBHOOK_CONFIGURATION": "a..b"},
     "OPERATOR_KIT_MUTATING_WEBHOOK_CONFIGURATION='a..b': not a webhook configuration name"),
    (["--insecure-kubeconfig", "exec,everything"], {}, "--insecure-kubeconfig: 'everything' "
     "is not a kind of kubeconfig content to allow; use any of exec, auth-provider, files, "
     "proxy, insecure-tls"),
    ([], {"OPERATOR_KIT_INSECURE_KUBECONFIG": "tls"}, "OPERATOR_KIT_INSECURE_KUBECONFIG: "
     "'tls' is not a kind of kubeconfig content to allow"),
])
def test_bad_input_is_a_usage_error_naming_the_problem_and_the_fix(
        argv: list[str], environ: dict[str, str], message: str) -> None:
    with pytest.raises(UsageError) as raised:
        parse(argv, environ=environ)
    assert message in str(raised.value)


# -- main --------------------------------------------------------------------------------

def test_an_unknown_flag_exits_2_with_one_line_and_runs_nothing(
        capsys: pytest.CaptureFixture[str]) -> None:
    ran: list[bool] = []
    code, out, err = run_main(Operator("op", [ThingController()]), ["--bogus"], capsys,
                              run=lambda: ran.append(True) or 0)
    assert (code, out, ran) == (2, "", [])
    assert err.count("\n") == 1
    assert err.endswith("error: unrecognized arguments: --bogus; run "
                        f"{cli._program()[0]} --help for the flags\n")


def test_help_lists_every_flag_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(Operator("op", [ThingController()]), ["--help"], capsys)
    assert code == 0
    for flag in ("--version", "--namespace", "--watch-namespace", "--kubeconfig",
                 "--log-level", "--log-format", "--health-probe-bind-address",
                 "--metrics-bind-address", "--leader-elect", "--no-leader-elect",
                 "--metrics-secure", "--no-metrics-secure", "--metrics-cert-dir",
                 "--insecure-kubeconfig", "--manifests", "--zap-log-level", "--zap-encoder"):
        assert flag in out


def test_version_names_the_operator_and_operator_kit(capsys: pytest.CaptureFixture[str]) -> None:
    import operator_kit

    code, out, _ = run_main(Operator("my-op", [ThingController()]), ["--version"], capsys)
    assert code == 0
    assert out.startswith("my-op ")
    assert out.endswith(f"(operator_kit {operator_kit.__version__})\n")


def test_a_kubeconfig_that_does_not_exist_exits_2_with_one_line(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", "/no/such/kubeconfig")
    code, _, err = run_main(Operator("op", [ThingController()]), [], capsys)
    assert code == 2
    assert err.count("\n") == 1 and "KUBECONFIG /no/such/kubeconfig: no such file" in err


def test_a_kubeconfig_that_does_not_parse_exits_2_with_one_line(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    code, _, err = run_main(Operator("op", [ThingController()]),
                            ["--kubeconfig", str(broken), "--metrics-bind-address", "0",
                             "--health-probe-bind-address", "0"], capsys)
    assert code == 2
    assert err.count("\n") == 1 and "error:" in err


_SERVER = {"cluster": {"server": "https://127.0.0.1:1"}}


@pytest.mark.parametrize(("text", "says"), [
    ("garbage: [unclosed\n  - : :\n", "is not valid YAML: while parsing a flow sequence"),
    ("\t\x01", "is not valid YAML: unacceptable character"),
    ("- a\n- b\n", "is not a kubeconfig: a list, not a mapping"),
    ("just a string\n", "is not a kubeconfig: a str, not a mapping"),
    ("apiVersion: v1\nkind: Config\n", "has no clusters, so no API server to connect to"),
    ("clusters: [{name: c, cluster: 5}]\n", "clusters[0] (c): its cluster is not a mapping "
     "(got int)"),
    ("clusters: {name: c}\n", "clusters is not a list"),
    (json.dumps({"clusters": [{"name": "c", **_SERVER}]}), "sets no current-context"),
    (json.dumps({"clusters": [{"name": "c", **_SERVER}], "current-context": 7}),
     "current-context is not a context's name (got int)"),
    (json.dumps({"clusters": [{"name": "c", **_SERVER}], "current-context": "x"}),
     "current-context 'x' is not one of its contexts (none)"),
    (json.dumps({"clusters": [{"name": "c", **_SERVER}], "current-context": "x",
                 "contexts": [{"name": "x", "context": {"cluster": "d"}}]}),
     "context 'x' names cluster 'd', which it does not define (clusters: c)"),
    (json.dumps({"clusters": [{"name": "c", "cluster": {"server": "ht!tp://["}}],
                 "current-context": "x", "contexts": [{"name": "x", "context": {"cluster": "c"}}]}),
     "cluster 'c' has server 'ht!tp://[', not a URL; give https://HOST[:PORT]"),
    (json.dumps({"clusters": [{"name": "c", "cluster": {
        "server": "https://127.0.0.1:1", "certificate-authority": "/no/such/ca.crt"}}],
                 "current-context": "x", "contexts": [{"name": "x", "context": {"cluster": "c"}}]}),
     "cannot be used: File does not exist: /no/such/ca.crt"),
])
def test_each_kind_of_broken_kubeconfig_is_one_line_naming_the_file(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        text: str, says: str) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(text)
    monkeypatch.setenv("KUBECONFIG", str(broken))
    code, out, err = run_main(Operator("op", [ThingController()]),
                              ["--metrics-bind-address", "0", "--health-probe-bind-address",
                               "0"], capsys)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"error: kubeconfig {broken}" in err and says in err, err


def test_a_bad_name_in_the_environment_stops_apply_environment_naming_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    operator = Operator("op", [ThingController()])
    monkeypatch.setenv("OPERATOR_KIT_NAMESPACE", "Ops")
    with pytest.raises(UsageError, match=r"^OPERATOR_KIT_NAMESPACE='Ops': not a namespace"):
        apply_environment(operator)
    # the command line's own namespace wins over it, so then it is not read
    apply_environment(operator, Settings(namespace="ops"))
    assert operator.namespace == "ops"
    monkeypatch.setenv("OPERATOR_KIT_WEBHOOK_SERVICE", "Svc")
    with pytest.raises(UsageError, match=r"^OPERATOR_KIT_WEBHOOK_SERVICE='Svc'"):
        apply_environment(operator, Settings(namespace="ops"))


def test_the_manifests_flags_are_checked_and_name_this_command(
        capsys: pytest.CaptureFixture[str]) -> None:
    operator = Operator("op", [ThingController()])
    code, out, err = run_main(operator, ["--manifests", "--replicas", "-3"], capsys)
    assert (code, out) == (2, "")
    assert err == "error: --replicas='-3': too small; give the number of replicas (at least 0)\n"
    code, out, err = run_main(operator, ["--manifests", "--bogus"], capsys)
    assert (code, out) == (2, "")
    assert err == (f"error: unrecognized arguments: --bogus; run {cli._program()[0]} "
                   "--manifests --help for the flags\n")


def test_an_address_in_use_exits_2_naming_the_flag_and_the_fix(
        capsys: pytest.CaptureFixture[str], kubeconfig: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, _, err = run_main(Operator("op", [ThingController()]),
                                ["--kubeconfig", str(kubeconfig), "--metrics-bind-address",
                                 f"127.0.0.1:{port}", "--health-probe-bind-address", "0"],
                                capsys)
    assert code == 2
    assert err.count("\n") == 1
    assert (f"error: --metrics-bind-address 127.0.0.1:{port}: the address is already in use; "
            "stop what listens there, choose another port, or give 0 to turn the metrics "
            "server off") in err


def test_a_plain_run_serves_probes_and_metrics_on_their_own_ports(
        capsys: pytest.CaptureFixture[str], kubeconfig: Path) -> None:
    probes, metrics = free_port(), free_port()
    seen: dict[str, tuple[int, str]] = {}

    def run() -> int:
        for name, url in (("livez", f"http://127.0.0.1:{probes}/livez"),
                          ("readyz", f"http://127.0.0.1:{probes}/readyz"),
                          ("metrics", f"http://127.0.0.1:{metrics}/metrics"),
                          ("metrics-on-probes", f"http://127.0.0.1:{probes}/metrics"),
                          ("livez-on-metrics", f"http://127.0.0.1:{metrics}/livez")):
            seen[name] = get(url)
        return 7

    code, _, _ = run_main(Operator("op", [ThingController()]),
                          ["--kubeconfig", str(kubeconfig), "--health-probe-bind-address",
                           f"127.0.0.1:{probes}", "--metrics-bind-address",
                           f"127.0.0.1:{metrics}"], capsys, run=run)
    assert code == 7  # what run returned
    assert seen["livez"] == (200, "ok\n")
    assert seen["readyz"] == (503, "not ready\n")  # its controllers never started
    assert seen["metrics"][0] == 200 and "# TYPE workqueue_depth gauge" in seen["metrics"][1]
    assert seen["metrics-on-probes"][0] == 404
    assert seen["livez-on-metrics"][0] == 404
    with pytest.raises(urllib.error.URLError):  # stopped once run returned
        urllib.request.urlopen(f"http://127.0.0.1:{probes}/livez", timeout=2)


def test_one_address_for_both_serves_all_three_paths(
        capsys: pytest.CaptureFixture[str], kubeconfig: Path) -> None:
    port = free_port()
    seen: list[int] = []

    def run() -> int:
        seen.extend(get(f"http://127.0.0.1:{port}/{p}")[0] for p in ("livez", "metrics"))
        return 0

    address = f"127.0.0.1:{port}"
    run_main(Operator("op", [ThingController()]),
             ["--kubeconfig", str(kubeconfig), "--health-probe-bind-address", address,
              "--metrics-bind-address", address], capsys, run=run)
    assert seen == [200, 200]


def test_namespaces_kubeconfig_and_log_settings_reach_the_operator(
        capsys: pytest.CaptureFixture[str], kubeconfig: Path) -> None:
    pinned = ThingController()
    pinned.name = "pinned"
    pinned.namespace = "elsewhere"
    everywhere, cluster_scoped = ThingController(), ClusterThingController()
    operator = Operator("op", [everywhere, pinned, cluster_scoped])
    seen: dict[str, Any] = {}

    def run() -> int:
        seen["namespace"] = operator.namespace
        seen["kubeconfig"] = operator.kubeconfig
        seen["watched"] = [c.namespace for c in operator.controllers]
        seen["level"] = logging.getLogger().level
        return 0

    run_main(operator, ["--kubeconfig", str(kubeconfig), "--namespace", "ops",
                        "--watch-namespace", "apps", "--log-level", "debug",
                        "--health-probe-bind-address", "0", "--metrics-bind-address", "0"],
             capsys, run=run)
    assert seen == {"namespace": "ops", "kubeconfig": str(kubeconfig),
                    "watched": ["apps", "elsewhere", None], "level": logging.DEBUG}


def test_without_namespace_the_kubeconfig_context_names_it(
        capsys: pytest.CaptureFixture[str], kubeconfig: Path) -> None:
    operator = Operator("op", [ThingController()])
    seen: list[str] = []
    run_main(operator, ["--kubeconfig", str(kubeconfig), "--health-probe-bind-address", "0",
                        "--metrics-bind-address", "0"], capsys,
             run=lambda: seen.append(operator.namespace) or 0)
    assert seen == ["from-context"]


def test_json_log_format_makes_every_line_one_json_object(
        capsys: pytest.CaptureFixture[str], kubeconfig: Path) -> None:
    def run() -> int:
        logging.getLogger("operator_kit.test").warning("hello")
        return 0

    _, _, err = run_main(Operator("op", [ThingController()]),
                         ["--kubeconfig", str(kubeconfig), "--log-format", "json",
                          "--health-probe-bind-address", "0", "--metrics-bind-address", "0"],
                         capsys, run=run)
    lines = [json.loads(line) for line in err.splitlines()]
    assert {"ts", "level", "logger", "msg"} <= set(lines[-1])
    assert lines[-1]["msg"] == "hello"


@pytest.mark.parametrize(("argv", "says"), [
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--log-level", "loud"], "--log-level 'loud' is not a log level"),
    (["--kubeconfig", "/no/such/kubeconfig"], "--kubeconfig /no/such/kubeconfig: no such file"),
    (["--kubeconfig", "/"], "--kubeconfig /: is a directory, not a kubeconfig file"),
    (["--namespace", "Bad_NS"], "--namespace='Bad_NS': not a namespace name"),
])
def test_python_dash_m_operator_with_bad_input_prints_one_line_and_exits_2(
        argv: list[str], says: str) -> None:
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "backup_operator", *argv],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith("python -m backup_operator: error: ")
    assert result.stderr.count("\n") == 1 and says in result.stderr
    assert "Traceback" not in result.stderr


# -- leader election ---------------------------------------------------------------------

@pytest.mark.parametrize(("argv", "environ", "expected"), [
    ([], {}, None),
    (["--leader-elect"], {}, True),
    (["--no-leader-elect"], {}, False),
    ([], {"OPERATOR_KIT_LEADER_ELECT": "yes"}, True),
    ([], {"OPERATOR_KIT_LEADER_ELECT": "off"}, False),
    (["--no-leader-elect"], {"OPERATOR_KIT_LEADER_ELECT": "1"}, False),
])
def test_leader_elect_is_read_from_the_flag_then_the_environment(
        argv: list[str], environ: dict[str, str], expected: bool | None) -> None:
    assert parse(argv, environ=environ).leader_elect is expected


def test_a_bad_leader_elect_variable_names_the_yes_or_no() -> None:
    with pytest.raises(UsageError, match="OPERATOR_KIT_LEADER_ELECT='sometimes': neither "
                                         "yes nor no"):
        parse([], environ={"OPERATOR_KIT_LEADER_ELECT": "sometimes"})


@pytest.mark.parametrize(("declared", "argv", "elects"), [
    (None, [], False),
    (LeaderElection(lease_duration=30), [], True),
    (None, ["--leader-elect"], True),
    (LeaderElection(lease_duration=30), ["--no-leader-elect"], False),
])
def test_leader_elect_overrides_what_the_operator_declares(
        capsys: pytest.CaptureFixture[str], kubeconfig: Path,
        declared: LeaderElection | None, argv: list[str], elects: bool) -> None:
    operator = Operator("op", [ThingController()], leader_election=declared)
    seen: list[LeaderElection | None] = []
    run_main(operator, ["--kubeconfig", str(kubeconfig), "--health-probe-bind-address", "0",
                        "--metrics-bind-address", "0", *argv], capsys,
             run=lambda: seen.append(operator.leader_election) or 0)
    assert (seen[0] is not None) is elects
    if declared is not None and elects:
        assert seen[0] is declared  # its own settings are kept
    if declared is None and elects:
        assert seen[0] == LeaderElection()


def test_no_leader_elect_on_a_sharded_operator_is_a_usage_error(
        capsys: pytest.CaptureFixture[str], kubeconfig: Path) -> None:
    operator = Operator("op", [ThingController()], leader_election=LeaderElection(),
                        sharding=Sharding())
    code, _, err = run_main(operator, ["--kubeconfig", str(kubeconfig), "--no-leader-elect"],
                            capsys)
    assert code == 2 and err.count("\n") == 1
    assert "--no-leader-elect (OPERATOR_KIT_LEADER_ELECT=0): operator op shards" in err
    assert operator.leader_election is not None


# -- --version ---------------------------------------------------------------------------

def checkout(root: Path, project_file: str, text: str, *, src: bool = False) -> Path:
    """A project checkout holding the package my_op (an Operator my-op), not installed;
    returns the folder to put on PYTHONPATH."""
    (root / project_file).write_text(text)
    folder = root / "src" if src else root
    package = folder / "my_op"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "from operator_kit import Operator\n\noperator = Operator('my-op')\n")
    (package / "__main__.py").write_text(
        "import sys\n\nfrom my_op import operator\n\nsys.exit(operator.main())\n")
    return folder


@pytest.mark.parametrize(("project_file", "text", "src"), [
    ("pyproject.toml", '[build-system]\nrequires = ["setuptools"]\n\n[project]\n'
     'name = "my-op"\nversion = "2.3.4"\n\n[tool.x]\nversion = "9"\n', False),
    ("pyproject.toml", "[project]\nname = 'my-op'\nversion = '2.3.4'\n", True),
    ("setup.cfg", "[metadata]\nname = my-op\nversion = 2.3.4\n", False),
])
@pytest.mark.parametrize("how", ["package", "operator_kit"])
def test_version_of_an_operator_run_from_a_checkout_on_pythonpath(
        tmp_path: Path, project_file: str, text: str, src: bool, how: str) -> None:
    import operator_kit

    folder = checkout(tmp_path, project_file, text, src=src)
    root = Path(operator_kit.__file__).parents[1]
    args = ["my_op"] if how == "package" else ["operator_kit", "my_op:operator"]
    result = subprocess.run([sys.executable, "-m", *args, "--version"], cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": f"{folder}:{root}"},
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"my-op 2.3.4 (operator_kit {operator_kit.__version__})\n"


def test_python_dash_m_operator_kit_names_the_app_in_its_messages(tmp_path: Path) -> None:
    import operator_kit

    folder = checkout(tmp_path, "setup.cfg", "[metadata]\nversion = 1\n")
    root = Path(operator_kit.__file__).parents[1]
    result = subprocess.run([sys.executable, "-m", "operator_kit", "my_op:operator", "--bogus"],
                            cwd=tmp_path, env={**os.environ, "PYTHONPATH": f"{folder}:{root}"},
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert result.stderr.startswith("python -m operator_kit my_op:operator: error: "
                                    "unrecognized arguments: --bogus")


def test_without_a_version_anywhere_it_says_unknown(tmp_path: Path) -> None:
    assert cli._checkout_version(str(tmp_path / "pkg" / "__init__.py")) is None
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\ndynamic = ['version']\n")
    assert cli._checkout_version(str(tmp_path / "pkg" / "__init__.py")) is None


# -- several watch namespaces ------------------------------------------------------------

@pytest.mark.parametrize(("argv", "environ", "expected"), [
    ([], {}, ()),
    (["--watch-namespace", "apps"], {}, ("apps",)),
    (["--watch-namespace", "apps,batch", "--watch-namespace", "web"], {},
     ("apps", "batch", "web")),
    (["--watch-namespace", "b,a,b"], {}, ("b", "a")),
    ([], {"OPERATOR_KIT_WATCH_NAMESPACE": "apps, batch"}, ("apps", "batch")),
    (["--watch-namespace", "web"], {"OPERATOR_KIT_WATCH_NAMESPACE": "apps,batch"}, ("web",)),
])
def test_several_watch_namespaces_by_repeating_the_flag_or_joining_with_commas(
        argv: list[str], environ: dict[str, str], expected: tuple[str, ...]) -> None:
    assert parse(argv, environ=environ).watch_namespaces == expected


@pytest.mark.parametrize(("argv", "environ", "message"), [
    (["--watch-namespace", "apps,Bad_NS"], {}, "--watch-namespace='Bad_NS': not a namespace "
     "name"),
    (["--watch-namespace", "apps,,batch"], {}, "--watch-namespace='': empty"),
    ([], {"OPERATOR_KIT_WATCH_NAMESPACE": "apps,-x"}, "OPERATOR_KIT_WATCH_NAMESPACE='-x': "
     "not a namespace name"),
])
def test_each_watch_namespace_is_checked(argv: list[str], environ: dict[str, str],
                                         message: str) -> None:
    with pytest.raises(UsageError) as raised:
        parse(argv, environ=environ)
    assert message in str(raised.value)


def test_several_watch_namespaces_reach_the_controllers_that_watch_everywhere(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pinned = ThingController()
    pinned.name, pinned.namespace = "pinned", "elsewhere"
    everywhere, cluster_scoped = ThingController(), ClusterThingController()
    operator = Operator("op", [everywhere, pinned, cluster_scoped])
    apply_environment(operator, Settings(watch_namespaces=("b", "a")))
    assert [c.watch_namespaces() for c in operator.controllers] == [
        ["a", "b"], ["elsewhere"], [None]]
    # gunicorn's worker: the same from the environment
    other = ThingController()
    monkeypatch.setenv("OPERATOR_KIT_WATCH_NAMESPACE", "x,y")
    apply_environment(Operator("op2", [other]))
    assert other.watch_namespaces() == ["x", "y"]


def test_a_controllers_namespaces_are_none_one_or_several() -> None:
    controller = ThingController()
    assert controller.watch_namespaces() == [None]
    controller.namespace = "apps"
    assert controller.watch_namespaces() == ["apps"]
    controller.namespace = {"web", "apps"}
    assert controller.watch_namespaces() == ["apps", "web"]
    controller.namespace = []
    with pytest.raises(ValueError, match="names no namespace; give None"):
        controller.watch_namespaces()


# -- kubebuilder's --zap-* flags ---------------------------------------------------------

@pytest.mark.parametrize(("argv", "level", "fmt"), [
    (["--zap-log-level", "debug"], "debug", "text"),
    (["--zap-log-level", "warn"], "warning", "text"),
    (["--zap-log-level", "ERROR"], "error", "text"),
    (["--zap-log-level", "panic"], "critical", "text"),
    (["--zap-log-level", "2"], "debug", "text"),
    (["--zap-encoder", "console"], "info", "text"),
    (["--zap-encoder", "json", "--zap-log-level", "info"], "info", "json"),
])
def test_kubebuilder_s_zap_flags_set_the_log_level_and_format(
        argv: list[str], level: str, fmt: str) -> None:
    settings = parse(argv, environ={})
    assert (settings.log_level, settings.log_format) == (level, fmt)


def test_a_zap_flag_wins_over_the_environment_as_its_own_flag_does() -> None:
    settings = parse(["--zap-encoder", "json"], environ={"OPERATOR_KIT_LOG_FORMAT": "text"})
    assert settings.log_format == "json"


# -- --metrics-secure --------------------------------------------------------------------

def test_metrics_secure_is_read_from_the_flag_then_the_environment() -> None:
    assert not parse([], environ={}).metrics_secure
    assert parse(["--metrics-secure"], environ={}).metrics_secure
    assert parse([], environ={"OPERATOR_KIT_METRICS_SECURE": "yes"}).metrics_secure
    assert not parse(["--no-metrics-secure"],
                     environ={"OPERATOR_KIT_METRICS_SECURE": "1"}).metrics_secure


def test_a_certificate_folder_needs_metrics_secure(tmp_path: Path) -> None:
    (tmp_path / "tls.crt").write_text("x")
    (tmp_path / "tls.key").write_text("x")
    with pytest.raises(UsageError, match="only --metrics-secure serves a certificate"):
        parse(["--metrics-cert-dir", str(tmp_path)], environ={})
    assert parse(["--metrics-secure", "--metrics-cert-dir", str(tmp_path)],
                 environ={}).metrics_cert_dir == str(tmp_path)


def https_get(port: int, path: str, *, context: Any = None,
              token: str | None = None) -> tuple[int, str]:
    import ssl

    if context is None:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    request = urllib.request.Request(f"https://127.0.0.1:{port}{path}")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=20, context=context) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_secure_metrics_are_https_only_and_refuse_a_request_without_a_token(
        capsys: pytest.CaptureFixture[str], kubeconfig: Path) -> None:
    probes, metrics = free_port(), free_port()
    seen: dict[str, Any] = {}

    def run() -> int:
        seen["livez"] = get(f"http://127.0.0.1:{probes}/livez")
        seen["no token"] = https_get(metrics, "/metrics")
        # The kubeconfig's API server does not answer: nobody is let in.
        seen["api server down"] = https_get(metrics, "/metrics", token="t0ken")
        try:
            seen["plain http"] = get(f"http://127.0.0.1:{metrics}/metrics")
        except (urllib.error.URLError, ConnectionError, OSError) as err:
            seen["plain http"] = err
        return 0

    code, _, err = run_main(Operator("op", [ThingController()]),
                            ["--kubeconfig", str(kubeconfig), "--health-probe-bind-address",
                             f"127.0.0.1:{probes}", "--metrics-bind-address",
                             f"127.0.0.1:{metrics}", "--metrics-secure"], capsys, run=run)
    assert code == 0
    assert seen["livez"] == (200, "ok\n"), "the kubelet's probes stay plain HTTP"
    assert seen["no token"][0] == 401
    assert "no bearer token" in seen["no token"][1]
    assert seen["api server down"][0] == 503
    assert "# TYPE" not in seen["api server down"][1]
    assert "t0ken" not in err
    assert isinstance(seen["plain http"], Exception), seen["plain http"]


def served_certificate(port: int) -> bytes:
    """The DER certificate the server on 127.0.0.1:`port` presents."""
    import ssl

    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def test_secure_metrics_serve_the_certificate_of_the_folder_and_its_renewal(
        capsys: pytest.CaptureFixture[str], kubeconfig: Path, tmp_path: Path) -> None:
    import ssl
    import time

    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    from operator_kit import _pki

    ca = _pki.new_ca("test-ca")
    first = _pki.issue(ca, "op-metrics", dns_names=("op-metrics.ns.svc",))
    (tmp_path / "tls.crt").write_bytes(first.cert_pem)
    (tmp_path / "tls.key").write_bytes(first.key_pem)
    metrics = free_port()
    seen: list[Any] = []

    def run() -> int:
        context = ssl.create_default_context(cadata=ca.cert_pem.decode())
        context.check_hostname = False  # 127.0.0.1 is not in it; the CA check is the point
        seen.append(https_get(metrics, "/metrics", context=context))
        seen.append(served_certificate(metrics))
        renewed = _pki.issue(ca, "op-metrics", dns_names=("op-metrics.ns.svc",))
        (tmp_path / "tls.key").write_bytes(renewed.key_pem)
        (tmp_path / "tls.crt").write_bytes(renewed.cert_pem)
        seen.append(renewed.cert.public_bytes(Encoding.DER))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and served_certificate(metrics) != seen[-1]:
            time.sleep(0.2)
        seen.append(served_certificate(metrics))
        return 0

    code, _, _ = run_main(Operator("op", [ThingController()]),
                          ["--kubeconfig", str(kubeconfig), "--health-probe-bind-address",
                           "0", "--metrics-bind-address", f"127.0.0.1:{metrics}",
                           "--metrics-secure", "--metrics-cert-dir", str(tmp_path)],
                          capsys, run=run)
    assert code == 0
    assert seen[0][0] == 401, "served over TLS with the folder's certificate"
    assert x509.load_der_x509_certificate(seen[1]) == first.cert
    assert seen[3] == seen[2], "the renewed certificate is served without a restart"


def test_a_certificate_folder_whose_pair_does_not_load_exits_2(
        capsys: pytest.CaptureFixture[str], kubeconfig: Path, tmp_path: Path) -> None:
    from operator_kit import _pki

    ca = _pki.new_ca("test-ca")
    (tmp_path / "tls.crt").write_bytes(_pki.issue(ca, "a").cert_pem)
    (tmp_path / "tls.key").write_bytes(_pki.issue(ca, "b").key_pem)
    code, _, err = run_main(Operator("op", [ThingController()]),
                            ["--kubeconfig", str(kubeconfig), "--health-probe-bind-address",
                             "0", "--metrics-bind-address", f"127.0.0.1:{free_port()}",
                             "--metrics-secure", "--metrics-cert-dir", str(tmp_path)],
                            capsys)
    assert code == 2
    assert f"error: --metrics-cert-dir {tmp_path}: " in err
    assert "do not match" in err
    assert "BEGIN" not in err, "no key material in the message"


def test_secure_metrics_need_an_address_of_their_own(
        capsys: pytest.CaptureFixture[str], kubeconfig: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    code, _, err = run_main(Operator("op", [ThingController()]),
                            ["--kubeconfig", str(kubeconfig), "--health-probe-bind-address",
                             address, "--metrics-bind-address", address, "--metrics-secure"],
                            capsys)
    assert code == 2
    assert "the kubelet probes over plain HTTP; give the metrics an address of their own" \
        in err
