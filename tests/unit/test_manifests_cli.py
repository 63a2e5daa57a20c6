"""The flags of ``python -m operator_kit.manifests``: a value Kubernetes would refuse is
one line on stderr naming the flag, exit code 2, and nothing on stdout."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from operator_kit import Action, Context, Controller, CustomResource, Operator
from operator_kit.manifests.__main__ import main as manifests_main


@dataclass
class WidgetSpec:
    size: int = 0


class Widget(CustomResource):
    group = "flags.operator-kit.test"
    version = "v1"
    kind = "Widget"
    spec: WidgetSpec


class WidgetController(Controller[Widget]):
    resource = Widget

    def reconcile(self, obj: Widget, ctx: Context) -> Action:
        return Action.await_change()


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = manifests_main(argv, operator=Operator("widget-operator", [WidgetController()]),
                          app="widgets:operator")
    out, err = capsys.readouterr()
    return code, out, err


RULE_LABEL = ("use at most 63 lowercase letters, digits and '-', beginning and ending with a "
              "letter or digit (a DNS-1123 label)")


@pytest.mark.parametrize(("argv", "line"), [
    (["--replicas", "-3"], "--replicas='-3': too small; give the number of replicas "
     "(at least 0)"),
    (["--replicas", "x"], "argument --replicas: invalid int value: 'x'; run python -m "
     "operator_kit.manifests --help for the flags"),
    (["--namespace", "Bad_NS"], f"--namespace='Bad_NS': not a namespace name; {RULE_LABEL}"),
    (["--namespace", "ops-"], f"--namespace='ops-': not a namespace name; {RULE_LABEL}"),
    (["--namespace", "a.b"], f"--namespace='a.b': not a namespace name; {RULE_LABEL}"),
    (["--namespace", "n" * 64], f"--namespace='{'n' * 64}': 64 characters, more than 63; "
     f"{RULE_LABEL}"),
    (["--namespace", ""], f"--namespace='': empty; {RULE_LABEL}"),
    (["--certificate-secret", "Webhook_TLS"], "--certificate-secret='Webhook_TLS': not a "
     "Secret name; use at most 253 lowercase letters, digits, '-' and '.', each part between "
     "dots beginning and ending with a letter or digit (a DNS-1123 subdomain)"),
    (["--image", "my operator"], "--image='my operator': not an image reference; give "
     "[REGISTRY/]NAME[:TAG][@DIGEST] with a lowercase name, for example "
     "registry.example.com/my-operator:0.1.0"),
    (["--image", "example.com/My-Operator:1"], "--image='example.com/My-Operator:1': not an "
     "image reference"),
    (["--image", ""], "--image='': not an image reference"),
    (["--app-version", "not valid"], "app.kubernetes.io/version 'not valid' is not a valid "
     "label value: give --app-version at most 63 letters, digits, '-', '_' or '.', "
     "beginning and ending with a letter or digit"),
    (["--bogus"], "unrecognized arguments: --bogus; run python -m operator_kit.manifests "
     "--help for the flags"),
    (["--namespace"], "argument --namespace: expected one argument"),
])
def test_a_bad_flag_is_one_line_naming_it_and_exit_code_2(
        argv: list[str], line: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(argv, capsys)
    assert (code, out) == (2, "")
    assert err.startswith(f"error: {line}") and err.count("\n") == 1, err


def test_kustomize_into_a_file_is_refused(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    taken = tmp_path / "a-file"
    taken.write_text("")
    code, out, err = run(["--kustomize", str(taken)], capsys)
    assert (code, out) == (2, "")
    assert err == (f"error: --kustomize={str(taken)!r}: not a directory; give the directory "
                   "to write the kustomize base into\n")


def test_values_kubernetes_takes_pass(capsys: pytest.CaptureFixture[str]) -> None:
    image = "registry.example.com:5000/team/widget-operator:0.1.0@sha256:" + "0" * 64
    code, out, err = run(["--namespace", "team-7", "--image", image, "--replicas", "0",
                          "--certificate-secret", "widget.tls", "--app-version", "0.1.0"],
                         capsys)
    assert (code, err) == (0, "")
    deployment = next(d for d in yaml.safe_load_all(out) if d["kind"] == "Deployment")
    assert deployment["metadata"]["namespace"] == "team-7"
    assert deployment["spec"]["replicas"] == 0
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == image


def test_python_dash_m_operator_kit_manifests_refuses_negative_replicas() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "operator_kit.manifests", "backup_operator:operator",
         "--replicas", "-3"], capture_output=True, text=True, timeout=60, check=False)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == ("error: --replicas='-3': too small; give the number of "
                             "replicas (at least 0)\n")
    result = subprocess.run(
        [sys.executable, "-m", "operator_kit.manifests", "backup_operator:operator",
         "--namespace", "Bad_NS"], capture_output=True, text=True, timeout=60, check=False)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith("error: --namespace='Bad_NS': not a namespace name")
