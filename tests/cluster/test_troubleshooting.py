"""The troubleshooting page's commands (docs/how-to/troubleshooting.md), run as written —
with this test's names in place of the Backup sample's — against the symptom they are
there to show. A command edited on the page no longer matches here, and fails."""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from operator_kit import CustomResource
from operator_kit.localcluster import find_or_build
from operator_kit.testing import Namespace, TestCluster, eventually

PAGE = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "troubleshooting.md"
FINALIZER = "troubleshooting.operator-kit.test/cleanup"


@dataclass
class StuckSpec:
    note: str = ""


class Stuck(CustomResource):
    group = "troubleshooting.operator-kit.test"
    version = "v1"
    kind = "Stuck"
    spec: StuckSpec


def page_command(starts: str) -> str:
    """The page's one command line that starts with `starts`."""
    lines = [line for line in PAGE.read_text().splitlines() if line.startswith(starts)]
    assert len(lines) == 1, f"docs/how-to/troubleshooting.md: {len(lines)} lines start "\
                            f"with {starts!r}"
    return lines[0]


def as_ours(command: str, **names: str) -> list[str]:
    """The command with the sample's names replaced by ours, split as a shell would."""
    for sample, ours in names.items():
        command = re.sub(rf"(?<![\w.-]){re.escape(sample)}(?![\w-])", ours, command)
    return shlex.split(command)


@pytest.fixture(scope="module")
def kubectl(cluster: TestCluster) -> Iterator[list[str]]:
    path = find_or_build(log=False).kubectl
    if path is None:
        pytest.fail("no kubectl next to the control plane's binaries")
    yield [str(path), "--kubeconfig", str(cluster.kubeconfig)]


def run(kubectl: list[str], argv: list[str]) -> subprocess.CompletedProcess[str]:
    assert argv[0] == "kubectl", argv
    return subprocess.run([*kubectl, *argv[1:]], capture_output=True, text=True, timeout=60)


def test_an_object_stuck_terminating_is_shown_with_its_finalizer_and_the_patch_frees_it(
        cluster: TestCluster, namespace: Namespace, kubectl: list[str]) -> None:
    cluster.install_crd(Stuck)
    plural = f"stucks.{Stuck.group}"
    body = Stuck("held", StuckSpec(), namespace=namespace.name).to_dict()
    body["metadata"]["finalizers"] = [FINALIZER]
    path = f"/apis/{Stuck.api_version()}/namespaces/{namespace.name}/stucks"
    namespace.api.request("POST", path, body=body)
    namespace.api.request("DELETE", f"{path}/held")  # no operator: its finalizer stays

    shown = run(kubectl, as_ours(page_command("kubectl get backups.example.com -A"),
                                 **{"backups.example.com": plural}))

    assert shown.returncode == 0, shown.stderr
    row = next(line.split() for line in shown.stdout.splitlines()
               if line.startswith(namespace.name))
    assert row[1] == "held"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:]+Z", row[2]), row  # being deleted
    assert FINALIZER in row[3], row

    freed = run(kubectl, as_ours(page_command("kubectl patch backups.example.com NAME"),
                                 **{"backups.example.com": plural, "NAME": "held",
                                    "NS": namespace.name}))

    assert freed.returncode == 0, freed.stderr
    eventually(30, lambda: namespace.api.get_or_none(f"{path}/held") is None,
               message="the object gone once its finalizer is dropped")


def test_the_can_i_command_says_no_for_a_missing_rule_and_yes_once_it_is_granted(
        cluster: TestCluster, namespace: Namespace, kubectl: list[str]) -> None:
    namespace.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                     "metadata": {"name": "an-operator"}})
    command = page_command("kubectl auth can-i list secrets")

    def can_i() -> subprocess.CompletedProcess[str]:
        return run(kubectl, as_ours(command, **{
            "backup-operator:backup-operator": f"{namespace.name}:an-operator",
            "NS": namespace.name}))

    denied = can_i()
    assert (denied.returncode, denied.stdout.strip()) == (1, "no"), denied.stderr

    namespace.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                     "metadata": {"name": "read-secrets"},
                     "rules": [{"apiGroups": [""], "resources": ["secrets"],
                                "verbs": ["list"]}]})
    namespace.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                     "metadata": {"name": "read-secrets"},
                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                 "name": "read-secrets"},
                     "subjects": [{"kind": "ServiceAccount", "name": "an-operator",
                                   "namespace": namespace.name}]})
    eventually(30, lambda: can_i().stdout.strip() == "yes",
               message="kubectl auth can-i says yes once the rule is granted")
