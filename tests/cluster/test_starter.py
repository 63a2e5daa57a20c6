"""``python -m operator_kit.new`` writes a project whose own tests pass at once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from operator_kit.new import generate
from operator_kit.testing import TestCluster


def test_generated_project_passes_its_own_tests(cluster: TestCluster, tmp_path: Path) -> None:
    project = tmp_path / "gadget-operator"
    result = subprocess.run(
        [sys.executable, "-m", "operator_kit.new", "gadget-operator",
         "--group", "gadgets.starter.test", "--kind", "Gadget", "--dir", str(project)],
        capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert (project / "Dockerfile").exists() and (project / "README.md").exists()
    env = dict(os.environ, OPERATOR_KIT_TEST_KUBECONFIG=cluster.kubeconfig,
               OPERATOR_KIT_TEST_REQUIRE_KUBERNETES="1",
               PYTHONPATH=os.pathsep.join([str(project), os.environ.get("PYTHONPATH", "")]))
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                           cwd=project, env=env, capture_output=True, text=True, timeout=300,
                           check=False)
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "4 passed" in tests.stdout
    lint = subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=project,
                          capture_output=True, text=True, check=False)
    assert lint.returncode == 0, lint.stdout


@pytest.mark.parametrize(("name", "group", "kind", "message"), [
    ("My_Operator", "my.example.com", "Widget", "project name"),
    ("my-operator", "nodots", "Widget", "group"),
    ("my-operator", "my.example.com", "widget", "kind"),
])
def test_bad_names_are_refused_with_what_to_write(tmp_path: Path, name: str, group: str,
                                                 kind: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        generate(name, group, kind, tmp_path / "x")
