"""The checks of every environment variable and flag (`operator_kit.settings`): each bad
value is one line naming the variable, the value and what is accepted; gunicorn started
with a bad variable ends with that line and exit code 2; and the docs list every
variable the code reads.
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import operator_kit
from operator_kit import settings
from operator_kit.settings import (
    ArgumentParser,
    UsageError,
    check_bind,
    check_image,
    check_name,
    env_bool,
    env_choice,
    env_float,
    env_int,
    env_names,
    env_text,
    is_label_value,
    number,
    whole_number,
)

PACKAGE = Path(operator_kit.__file__).parent
DOCS_PAGE = PACKAGE.parent / "docs" / "reference" / "configuration.md"


def refused(call: object, *args: object, **kwargs: object) -> str:
    """The message of the `UsageError` that `call(*args, **kwargs)` raises (one line)."""
    assert callable(call)
    with pytest.raises(UsageError) as raised:
        call(*args, **kwargs)
    message = str(raised.value)
    assert "\n" not in message
    return message


# -- numbers -----------------------------------------------------------------------------

def test_env_int_reads_a_whole_number_and_defaults_when_unset_or_blank() -> None:
    read = lambda **env: env_int("N", 8, minimum=1, what="the number", environ=env)  # noqa: E731
    assert read() == 8
    assert read(N="") == 8 and read(N="  ") == 8
    assert read(N="12") == 12 and read(N=" 3 ") == 3


def test_env_int_names_the_variable_the_value_and_what_it_accepts() -> None:
    def threads(value: str) -> str:
        return refused(env_int, "OPERATOR_KIT_THREADS", 8, minimum=1,
                       what="the number of threads per worker",
                       environ={"OPERATOR_KIT_THREADS": value})

    assert threads("many") == ("OPERATOR_KIT_THREADS='many': not a whole number; give the "
                               "number of threads per worker (at least 1)")
    assert threads("0") == ("OPERATOR_KIT_THREADS='0': too small; give the number of "
                            "threads per worker (at least 1)")
    assert threads("-2").startswith("OPERATOR_KIT_THREADS='-2': too small")
    assert threads("1.5").startswith("OPERATOR_KIT_THREADS='1.5': not a whole number")


def test_env_float_refuses_what_is_not_a_finite_number_above_its_bound() -> None:
    def timeout(value: str) -> float:
        return env_float("T", 5.0, above=0, what="seconds", environ={"T": value})

    assert timeout("") == 5.0 and timeout(" 0.5 ") == 0.5 and timeout("2") == 2.0
    for value, problem in (("soon", "not a number"), ("0", "too small"), ("-1", "too small"),
                           ("inf", "not a finite number"), ("nan", "not a finite number")):
        assert refused(timeout, value) == f"T={value!r}: {problem}; give seconds (more than 0)"
    assert number("3", "--x", minimum=3, what="it") == 3.0
    assert refused(number, "2", "--x", minimum=3, what="it") == "--x='2': too small; give it " \
        "(at least 3)"


def test_a_flag_is_checked_by_the_same_rules() -> None:
    assert whole_number("0", "--replicas", minimum=0, what="the number of replicas") == 0
    assert refused(whole_number, "-3", "--replicas", minimum=0,
                   what="the number of replicas") == (
        "--replicas='-3': too small; give the number of replicas (at least 0)")


# -- yes or no, choices, text ------------------------------------------------------------

@pytest.mark.parametrize("value", ["1", "true", "True", "YES", "yes", "on", " On "])
def test_env_bool_takes_the_usual_yes(value: str) -> None:
    assert env_bool("B", False, environ={"B": value}) is True


@pytest.mark.parametrize("value", ["0", "false", "FALSE", "no", "No", "off", "OFF "])
def test_env_bool_takes_the_usual_no(value: str) -> None:
    assert env_bool("B", True, environ={"B": value}) is False


def test_env_bool_defaults_when_unset_or_blank_and_refuses_anything_else() -> None:
    assert env_bool("B", True, environ={}) is True
    assert env_bool("B", False, environ={"B": " "}) is False
    assert refused(env_bool, "OPERATOR_KIT_MANAGE_TLS", True,
                   environ={"OPERATOR_KIT_MANAGE_TLS": "maybe"}) == (
        "OPERATOR_KIT_MANAGE_TLS='maybe': neither yes nor no; use 1, true, yes or on to turn "
        "it on, 0, false, no or off to turn it off (unset: on)")
    assert refused(env_bool, "X", False, environ={"X": "2"}).endswith("(unset: off)")


def test_env_choice_is_any_case_and_names_the_choices() -> None:
    def fmt(value: str) -> str:
        return env_choice("F", "text", ("text", "json"), what="a log format",
                          environ={"F": value})

    assert fmt("") == "text" and fmt(" JSON ") == "json"
    assert refused(fmt, "xml") == "F='xml': not a log format; use one of text, json"


def test_env_text_is_stripped_and_none_when_blank() -> None:
    assert env_text("A", {"A": " x "}) == "x"
    assert env_text("A", {"A": "  "}) is None and env_text("A", {}) is None


# -- names -------------------------------------------------------------------------------

@pytest.mark.parametrize(("value", "rule"), [
    ("ops", "label"), ("a", "label"), ("0ops-1", "label"), ("a" * 63, "label"),
    ("my.tls-secret", "subdomain"), ("a" * 253, "subdomain"), ("x1.y2", "subdomain"),
    ("svc", "service"), ("s-1", "service"),
])
def test_valid_names_pass(value: str, rule: str) -> None:
    assert check_name(value, "--x", what="a name", rule=rule) == value


@pytest.mark.parametrize(("value", "rule", "problem"), [
    ("Bad_NS", "label", "not a namespace name"),
    ("UPPER", "label", "not a namespace name"),
    ("-ops", "label", "not a namespace name"),
    ("ops-", "label", "not a namespace name"),
    ("a.b", "label", "not a namespace name"),
    ("a" * 64, "label", "64 characters, more than 63"),
    ("", "label", "empty"),
    ("a..b", "subdomain", "not a namespace name"),
    ("a" * 254, "subdomain", "254 characters, more than 253"),
    ("1svc", "service", "not a namespace name"),
    ("my.svc", "service", "not a namespace name"),
])
def test_names_kubernetes_would_refuse_are_refused_naming_the_rule(
        value: str, rule: str, problem: str) -> None:
    message = refused(check_name, value, "--namespace", what="a namespace name", rule=rule)
    assert message.startswith(f"--namespace={value!r}: {problem}; use at most ")
    assert {"label": "(a DNS-1123 label)", "subdomain": "(a DNS-1123 subdomain)",
            "service": "(a DNS-1035 label)"}[rule] in message


def test_env_names_checks_the_namespaces_and_the_renamed_objects() -> None:
    environ = {"OPERATOR_KIT_NAMESPACE": "ops", "OPERATOR_KIT_WATCH_NAMESPACE": "",
               "OPERATOR_KIT_WEBHOOK_SERVICE": "prod-op",
               "OPERATOR_KIT_VALIDATING_WEBHOOK_CONFIGURATION": "prod-op.example.com"}
    assert env_names(environ) == {"namespace": "ops", "webhook_service": "prod-op",
                                  "validating_configuration": "prod-op.example.com"}
    assert "namespace" not in env_names(environ, namespaces=False)
    for variable, value in (("OPERATOR_KIT_NAMESPACE", "Bad_NS"),
                            ("OPERATOR_KIT_WATCH_NAMESPACE", "x_y"),
                            ("OPERATOR_KIT_WEBHOOK_SERVICE", "1svc"),
                            ("OPERATOR_KIT_VALIDATING_WEBHOOK_CONFIGURATION", "A"),
                            ("OPERATOR_KIT_MUTATING_WEBHOOK_CONFIGURATION", "a_b")):
        assert refused(env_names, {variable: value}).startswith(f"{variable}={value!r}: not a")


def test_label_values() -> None:
    assert all(map(is_label_value, ["", "0.1.0", "v1_2-3", "A" * 63]))
    assert not any(map(is_label_value, ["not valid", "-1", "1.", "a" * 64, "é"]))


@pytest.mark.parametrize("image", [
    "backup-operator", "backup-operator:latest", "registry.example.com/team/op:0.1.0",
    "localhost:5000/op", "registry.example.com:5000/a/b/c:v1.2_3",
    "op@sha256:" + "0" * 64, "ghcr.io/o/op:1.0@sha256:" + "a" * 64, "[::1]:5000/op:1",
    "a__b/c.d-e---f",
])
def test_image_references_the_kubelet_parses_pass(image: str) -> None:
    assert check_image(image, "--image") == image


@pytest.mark.parametrize("image", [
    "", " op", "op ", "Bad Image", "team/Op", "op:", "op:-tag", ":tag", "op@sha256:abc",
    "op//x", "-op", "op:" + "t" * 129, "a" * 256,
])
def test_image_references_the_kubelet_refuses_are_refused(image: str) -> None:
    assert refused(check_image, image, "--image").startswith(
        f"--image={image!r}: not an image reference; give [REGISTRY/]NAME[:TAG][@DIGEST]")


# -- gunicorn's bind ---------------------------------------------------------------------

@pytest.mark.parametrize("bind", [
    "127.0.0.1:8443", "0.0.0.0:0", ":8443", "[::1]:8443", "[::]:8443", "localhost",
    "my-host.example.com:443", "tcp://127.0.0.1:80", "unix:/run/op.sock", "unix:///s",
    "fd://3", " 127.0.0.1:8443 ",
])
def test_bind_addresses_gunicorn_takes_pass(bind: str) -> None:
    assert check_bind(bind, "OPERATOR_KIT_BIND") == bind.strip()


@pytest.mark.parametrize("bind", [
    "127.0.0.1:abc", "1.2.3.4.5:80", "::1:8443", "[zz]:80", "host:70000", "host:",
    "unix:", "fd://x", "-host:80", "a b:80", "[::1]:x",
])
def test_bind_addresses_gunicorn_cannot_use_are_refused(bind: str) -> None:
    assert refused(check_bind, bind, "OPERATOR_KIT_BIND") == (
        f"OPERATOR_KIT_BIND={bind!r}: not an address to bind; give HOST:PORT (for example "
        "0.0.0.0:8443), [V6]:PORT, unix:PATH or fd://N")


# -- argparse ----------------------------------------------------------------------------

def test_the_parser_reports_one_line_instead_of_exiting() -> None:
    parser = ArgumentParser(prog="tool")
    parser.add_argument("--n", type=int)
    assert refused(parser.parse_args, ["--bogus"]) == (
        "unrecognized arguments: --bogus; run tool --help for the flags")
    assert refused(parser.parse_args, ["--n", "x"]).startswith(
        "argument --n: invalid int value: 'x'")


def test_settings_stays_a_leaf() -> None:
    tree = ast.parse(Path(settings.__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom)}
    assert not {name for name in imported if name.startswith("operator_kit")}


# -- gunicorn, for real ------------------------------------------------------------------

GUNICORN_CASES = [
    ("OPERATOR_KIT_THREADS", "many", "OPERATOR_KIT_THREADS='many': not a whole number; give "
     "the number of threads per worker (at least 1)"),
    ("OPERATOR_KIT_THREADS", "0", "OPERATOR_KIT_THREADS='0': too small"),
    ("OPERATOR_KIT_READ_TIMEOUT", "0", "OPERATOR_KIT_READ_TIMEOUT='0': too small"),
    ("OPERATOR_KIT_READ_TIMEOUT", "soon", "OPERATOR_KIT_READ_TIMEOUT='soon': not a number"),
    ("OPERATOR_KIT_BIND", "127.0.0.1:abc", "OPERATOR_KIT_BIND='127.0.0.1:abc': not an address"),
    ("OPERATOR_KIT_ACCESS_LOG", "maybe", "OPERATOR_KIT_ACCESS_LOG='maybe': neither yes nor no"),
    ("OPERATOR_KIT_INSECURE_HTTP", "sure", "OPERATOR_KIT_INSECURE_HTTP='sure': neither yes"),
    ("OPERATOR_KIT_MANAGE_TLS", "maybe", "OPERATOR_KIT_MANAGE_TLS='maybe': neither yes nor no"),
    ("OPERATOR_KIT_METRICS_SECURE", "maybe", "OPERATOR_KIT_METRICS_SECURE='maybe': neither "
     "yes nor no"),
    ("OPERATOR_KIT_METRICS_SECURE", "1", "OPERATOR_KIT_METRICS_SECURE=1 with "
     "OPERATOR_KIT_INSECURE_HTTP=1 would take bearer tokens over plain HTTP; unset one"),
    ("OPERATOR_KIT_LOG_LEVEL", "loud", "OPERATOR_KIT_LOG_LEVEL='loud': not a log level; use "
     "one of debug, info, warning, error, critical"),
    ("OPERATOR_KIT_LOG_FORMAT", "xml", "OPERATOR_KIT_LOG_FORMAT='xml': not a log format"),
    ("OPERATOR_KIT_APP", "no_colon", "OPERATOR_KIT_APP='no_colon': not MODULE:ATTR"),
    ("OPERATOR_KIT_NAMESPACE", "Bad_NS", "OPERATOR_KIT_NAMESPACE='Bad_NS': not a namespace"),
    ("OPERATOR_KIT_WATCH_NAMESPACE", "-x", "OPERATOR_KIT_WATCH_NAMESPACE='-x': not a namespace"),
    ("OPERATOR_KIT_WEBHOOK_SERVICE", "1svc", "OPERATOR_KIT_WEBHOOK_SERVICE='1svc': not a "
     "Service name"),
    ("OPERATOR_KIT_VALIDATING_WEBHOOK_CONFIGURATION", "A_B",
     "OPERATOR_KIT_VALIDATING_WEBHOOK_CONFIGURATION='A_B': not a webhook configuration name"),
    ("OPERATOR_KIT_MUTATING_WEBHOOK_CONFIGURATION", "a..b",
     "OPERATOR_KIT_MUTATING_WEBHOOK_CONFIGURATION='a..b': not a webhook configuration name"),
    ("OPERATOR_KIT_INSECURE_KUBECONFIG", "exec,all", "OPERATOR_KIT_INSECURE_KUBECONFIG: "
     "'all' is not a kind of kubeconfig content to allow"),
    ("OPERATOR_KIT_CERT_LIFETIME", "soon", "OPERATOR_KIT_CERT_LIFETIME must be a positive "
     "duration"),
    ("OPERATOR_KIT_CERT_POLL_INTERVAL", "0", "OPERATOR_KIT_CERT_POLL_INTERVAL must be a "
     "positive duration"),
    ("OPERATOR_KIT_CERT_SETTLE", "x", "OPERATOR_KIT_CERT_SETTLE must be a positive duration"),
    ("OPERATOR_KIT_CA_LIFETIME", "1d", "OPERATOR_KIT_CA_LIFETIME: the CA lifetime (1 day, "
     "0:00:00) must be at least 3 times the serving certificate's"),
]


def gunicorn(config: str, **env: str) -> subprocess.CompletedProcess[str]:
    """gunicorn -c `config` with `env` over a plain-HTTP, loopback environment."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OPERATOR_KIT_")
               and k not in ("KUBERNETES_SERVICE_HOST", "GUNICORN_CMD_ARGS")}
    environ.update({"OPERATOR_KIT_APP": "no_such_module:app",
                    "OPERATOR_KIT_INSECURE_HTTP": "1", "OPERATOR_KIT_BIND": "127.0.0.1:0",
                    **env})
    return subprocess.run([sys.executable, "-m", "gunicorn", "-c", config,
                           "operator_kit.webhooks:app"], env=environ, capture_output=True,
                          text=True, timeout=60, check=False)


@pytest.mark.parametrize(("variable", "value", "says"), GUNICORN_CASES,
                         ids=[f"{v}={x}" for v, x, _ in GUNICORN_CASES])
def test_gunicorn_conf_with_a_bad_variable_exits_2_after_one_line(
        variable: str, value: str, says: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Each variable, in this process: importing the configuration (what gunicorn does)."""
    for name in [n for n in os.environ if n.startswith("OPERATOR_KIT_")]:
        monkeypatch.delenv(name)
    for name, given in (("OPERATOR_KIT_APP", "no_such_module:app"),
                        ("OPERATOR_KIT_INSECURE_HTTP", "1"), (variable, value)):
        monkeypatch.setenv(name, given)
    monkeypatch.delitem(sys.modules, "operator_kit.gunicorn_conf", raising=False)
    with pytest.raises(SystemExit) as exited:
        importlib.import_module("operator_kit.gunicorn_conf")
    assert exited.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"operator_kit.gunicorn_conf: error: {says}")
    assert err.count("\n") == 1, err


@pytest.mark.parametrize("config", ["python:operator_kit.gunicorn_conf",
                                    str(PACKAGE / "gunicorn_conf.py")])
def test_gunicorn_with_a_bad_variable_ends_with_one_line_and_exit_code_2(config: str) -> None:
    """The real gunicorn, given the configuration as a module or as a file (where it
    prints a traceback for any other exception)."""
    result = gunicorn(config, OPERATOR_KIT_THREADS="many")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == ("operator_kit.gunicorn_conf: error: OPERATOR_KIT_THREADS='many': "
                             "not a whole number; give the number of threads per worker "
                             "(at least 1)\n")
    result = gunicorn(config, OPERATOR_KIT_MANAGE_TLS="maybe")
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "OPERATOR_KIT_MANAGE_TLS='maybe': neither yes nor no" in result.stderr


@pytest.mark.parametrize(("kubeconfig", "app", "says"), [
    ("garbage: [\n", "backup_operator:operator", "kubeconfig {path} is not valid YAML"),
    (None, "backup_operator:operator", "kubeconfig {path} cannot be read: it is a directory"),
    ("", "no_such_module:operator", "OPERATOR_KIT_APP=no_such_module:operator: cannot import"),
], ids=["garbage kubeconfig", "kubeconfig is a directory", "app not importable"])
def test_gunicorn_that_cannot_prepare_its_certificate_ends_with_one_line_and_exit_code_2(
        tmp_path: Path, kubeconfig: str | None, app: str, says: str) -> None:
    """The master prepares the certificate of the Operator it serves, which needs the app
    and a cluster: a bad kubeconfig or app is one line, not gunicorn's traceback."""
    path = tmp_path / "kubeconfig"
    if kubeconfig is None:
        path.mkdir()
    else:
        path.write_text(kubeconfig)
    (tmp_path / "tls").mkdir()
    result = gunicorn("python:operator_kit.gunicorn_conf", OPERATOR_KIT_APP=app,
                      OPERATOR_KIT_TLS_DIR=str(tmp_path / "tls"), KUBECONFIG=str(path))
    assert (result.returncode, result.stdout) == (2, ""), result.stderr
    assert result.stderr.startswith(
        "operator_kit.gunicorn_conf: error: " + says.format(path=path)), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr


# -- the docs list every variable ------------------------------------------------------

_PREFIXED = re.compile(r"\bOPERATOR_KIT_[A-Z0-9_]*[A-Z0-9]\b")
_READ = re.compile(r"environ(?:\.get\(|\[)\s*\"([A-Z][A-Z0-9_]*)\"")


def variables_in_the_code() -> set[str]:
    """Every ``OPERATOR_KIT_*`` name in the package (code, docstrings, templates), and
    every other variable it reads by a literal name (``os.environ.get("POD_NAME")``)."""
    found = {settings.ENV["kubeconfig"]}
    for path in PACKAGE.rglob("*"):
        if path.is_file() and path.suffix in (".py", ".tmpl"):
            text = path.read_text()
            found |= set(_PREFIXED.findall(text)) | set(_READ.findall(text))
    return found


def test_the_configuration_page_lists_every_variable_the_code_reads() -> None:
    listed = set(re.findall(r"`([A-Z][A-Z0-9_]+)`", DOCS_PAGE.read_text()))
    code = variables_in_the_code()
    missing = sorted(code - listed)
    assert not missing, f"docs/reference/configuration.md does not list {', '.join(missing)}"
    stale = sorted(name for name in listed - code if name.startswith("OPERATOR_KIT_"))
    assert not stale, f"docs/reference/configuration.md lists unread {', '.join(stale)}"


def test_the_code_reads_every_variable_the_settings_name() -> None:
    code = variables_in_the_code()
    assert set(settings.ENV.values()) <= code and set(settings.NAME_ENV.values()) <= code
    assert len({name for name in code if name.startswith("OPERATOR_KIT_")}) >= 28
