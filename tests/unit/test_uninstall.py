"""The uninstall order (`operator_kit.client.uninstall`): pure parts. Its cluster test
(tests/cluster/test_uninstall.py) runs it against the real API server."""

from __future__ import annotations

import shlex

from operator_kit.client.uninstall import (
    Leftover,
    custom_kinds,
    deletion_order,
    finalizer_patch_command,
)
from operator_kit.manifests._deploy import operator_manifests
from tests.cluster.uninstall_operator import operator


def stream() -> list[dict[str, object]]:
    return operator_manifests(operator, app="tests.cluster.uninstall_operator:operator",
                              namespace="keepsakes", image="keepsake:1")


def test_the_namespace_goes_last_and_the_crds_after_the_deployment() -> None:
    order = [d["kind"] for d in deletion_order(stream())]  # type: ignore[index]
    assert order[-1] == "Namespace"
    assert order.index("Deployment") < order.index("CustomResourceDefinition")
    assert order.index("ServiceAccount") > order.index("Deployment")


def test_the_custom_kinds_are_read_from_the_crds_in_the_stream() -> None:
    assert custom_kinds(stream()) == [  # type: ignore[arg-type]
        ("uninstall.operator-kit.test", "v1", "keepsakes", "Keepsake")]


def test_the_finalizer_command_names_the_object_and_parses_as_a_shell_line() -> None:
    left = Leftover("Keepsake", "keepsakes", "uninstall.operator-kit.test", "prod", "one",
                    ("uninstall.operator-kit.test/cleanup",))
    argv = shlex.split(finalizer_patch_command(left))
    assert argv[:4] == ["kubectl", "patch", "keepsakes.uninstall.operator-kit.test", "one"]
    assert argv[argv.index("-n") + 1] == "prod"
    assert argv[-1] == '{"metadata":{"finalizers":null}}'
    assert left.describe() == ("Keepsake prod/one is still there (finalizers "
                               "uninstall.operator-kit.test/cleanup)")
