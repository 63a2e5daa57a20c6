"""The starter's templates: what `python -m operator_kit.new` writes, checked without a cluster.

The generated project's own tests, lint and make targets run against a real API server
in tests/cluster/test_starter.py; here: the files, the Dockerfile (BuildKit's parser),
the CI workflow, the Makefile's targets and `make test`'s choice of cluster.
"""

from __future__ import annotations

import fnmatch
import importlib.resources
import os
import stat
import subprocess
from pathlib import Path

import dockerfile
import pytest
import yaml

from operator_kit.new import (
    CONTROLLER_FILES,
    CONVERSION_FILES,
    FILES,
    KIND_FILES,
    VERSION_FILES,
    WEBHOOK_FILES,
    Project,
    generate,
    read_template,
    render,
    source_of,
)
from operator_kit.new.scaffold import FRAGMENTS


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("starter") / "gadget-operator"
    generate("gadget-operator", "gadgets.starter.test", "Gadget", directory)
    return directory


def test_the_project_has_what_a_kubebuilder_user_expects(project: Path) -> None:
    files = {str(p.relative_to(project)) for p in project.rglob("*") if p.is_file()}
    assert {"Makefile", "Dockerfile", ".gitignore", ".dockerignore", "README.md",
            ".github/workflows/ci.yml", "pyproject.toml", "gadget_operator/__init__.py",
            "tests/test_e2e.py", "hack/test.sh", "hack/lint.sh", "PROJECT",
            "gadget_operator/registry.py", "gadget_operator/gadget.py",
            "gadget_operator/gadget_validation.py", "gadget_operator/gadget_defaulting.py",
            "config/default/kustomization.yaml", "config/base/kustomization.yaml",
            "config/base/crds.yaml", "config/samples/gadgets.starter.test_v1_gadget.yaml"} <= files
    assert (project / "hack/test.sh").stat().st_mode & stat.S_IXUSR
    for path in files:
        assert "{{" not in (project / path).read_text().replace("${{ ", ""), path


def test_each_template_is_package_data_and_written_once() -> None:
    # The templates ship as package data (operator_kit/new/templates/): each file written
    # has one, found through importlib.resources as an installed wheel finds it, and none
    # is left over.
    templates = importlib.resources.files("operator_kit.new") / "templates"
    shipped: set[str] = set()
    folders = [(templates, "")]
    while folders:
        folder, prefix = folders.pop()
        for entry in folder.iterdir():
            if entry.is_dir():
                folders.append((entry, f"{prefix}{entry.name}/"))
            else:
                shipped.add(f"{prefix}{entry.name}")
    per_project = list(FILES.values()) + list(KIND_FILES.values()) + [
        template for files in WEBHOOK_FILES.values() for template in files.values()] + list(
        VERSION_FILES.values()) + list(CONVERSION_FILES.values()) + list(
        CONTROLLER_FILES.values()) + list(FRAGMENTS)
    assert shipped == set(per_project)
    assert len(shipped) == len(per_project)  # one template per file written
    # No dotfile (``.gitignore`` is gitignore.tmpl): a glob or a tool may skip hidden names.
    assert all(name.endswith(".tmpl") and "/." not in f"/{name}" for name in shipped)


def test_the_resource_uses_camel_case_and_standard_conditions(project: Path) -> None:
    source = (project / "gadget_operator/gadget.py").read_text()
    assert 'json_names = "camelCase"' in source
    assert "conditions: Conditions" in source and "set_condition(" in source


def test_render_refuses_an_unknown_placeholder() -> None:
    assert render("{{kind}}: ${{ vars.X }}", {"kind": "Gadget"}) == "Gadget: ${{ vars.X }}"
    with pytest.raises(KeyError):
        render("{{unknown}}", {})


@pytest.mark.parametrize(("direct_url", "source"), [
    ({"url": "file:///src/operator%20kit", "dir_info": {"editable": True}}, "/src/operator kit"),
    ({"url": "file:///w/operator_kit-0.1.0-py3-none-any.whl", "archive_info": {}},
     "/w/operator_kit-0.1.0-py3-none-any.whl"),
    ({"url": "https://example.test/ok.git", "vcs_info": {"vcs": "git", "commit_id": "abc1"}},
     "operator_kit @ git+https://example.test/ok.git@abc1"),
    ({"url": "https://example.test/operator_kit-0.1.0.tar.gz", "archive_info": {}},
     "operator_kit @ https://example.test/operator_kit-0.1.0.tar.gz"),
])
def test_make_wheels_builds_operator_kit_from_where_it_was_installed_from(
        direct_url: dict[str, object], source: str) -> None:
    assert source_of(direct_url) == source


def _dockerignored(project: Path, path: str) -> bool:
    patterns = [line.strip().rstrip("/") for line in
                (project / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    return any(fnmatch.fnmatch(path.rstrip("/"), pattern) for pattern in patterns)


def test_dockerfile_is_multi_stage_non_root_and_copies_only_what_exists(project: Path) -> None:
    commands = dockerfile.parse_file(str(project / "Dockerfile"))
    stages = [c.value for c in commands if c.cmd == "FROM"]
    assert len(stages) == 2 and [s.lower() for s in stages[0][1:]] == ["as", "builder"]
    last_from = max(i for i, c in enumerate(commands) if c.cmd == "FROM")
    runtime = commands[last_from:]
    for command in commands:
        if command.cmd == "COPY" and not any(f.startswith("--from") for f in command.flags):
            assert command.start_line < commands[last_from].start_line, "COPY in the runtime"
            for item in command.value[:-1]:
                assert (project / item).exists(), f"COPY {item}: not in the project"
                assert not _dockerignored(project, item), f"COPY {item}: .dockerignore'd"
    [user] = [c.value[0] for c in runtime if c.cmd == "USER"]
    assert user.split(":")[0].isdigit() and int(user.split(":")[0]) != 0
    [install] = [c for c in runtime if c.cmd == "RUN"]
    assert "--no-index" in install.value[0] and "gadget-operator" in install.value[0]
    assert any(f.startswith("--mount=type=bind,from=builder") for f in install.flags)
    env = [c.value for c in runtime if c.cmd == "ENV"]
    settings = {value[i]: value[i + 1] for value in env for i in range(0, len(value), 2)}
    assert settings["PYTHONDONTWRITEBYTECODE"] == "1"  # a read-only root filesystem


def test_ci_workflow_runs_lint_and_test(project: Path) -> None:
    workflow = yaml.safe_load((project / ".github/workflows/ci.yml").read_text())
    runs = {job: [step.get("run", "") for step in spec["steps"]]
            for job, spec in workflow["jobs"].items()}
    assert "make lint" in runs["lint"] and "make test" in runs["test"]
    assert all("bash hack/ci-install.sh" in job_runs for job_runs in runs.values())


def test_ci_caches_the_plane_binaries_per_kubernetes_version(project: Path) -> None:
    steps = yaml.safe_load((project / ".github/workflows/ci.yml").read_text())["jobs"][
        "test"]["steps"]
    [cache] = [step for step in steps if step.get("uses", "").startswith("actions/cache")]
    assert cache["with"]["key"].endswith("-kubernetes-${{ env.KUBERNETES_VERSION }}")
    # The step before it writes KUBERNETES_VERSION: the plane's version, run as CI runs it.
    [version] = [s["run"] for s in steps if "KUBERNETES_VERSION=" in s.get("run", "")]
    assert steps.index(cache) > [s.get("run") for s in steps].index(version)
    for asked, expected in (("", None), ("1.35", "1.35")):
        out = subprocess.run(["bash", "-c", version], capture_output=True, text=True,
                             env=dict(os.environ, GITHUB_ENV="/dev/stdout",
                                      OPERATOR_KIT_KUBERNETES_VERSION=asked), check=True)
        [line] = out.stdout.splitlines()
        assert line.startswith("KUBERNETES_VERSION=")
        value = line.split("=", 1)[1]
        assert value == expected if expected else value.startswith("v1.")


def test_ci_install_without_a_wheel_or_a_requirement_says_what_to_do(project: Path) -> None:
    result = subprocess.run(["bash", "hack/ci-install.sh"], cwd=project, capture_output=True,
                            text=True, env=dict(os.environ, OPERATOR_KIT=""), check=False)
    assert result.returncode == 1
    assert "set the repository variable OPERATOR_KIT" in result.stderr
    assert "git add -f wheels/operator_kit-*.whl" in result.stderr


@pytest.mark.parametrize(("source", "ci_default"), [
    ("operator_kit @ git+https://example.test/ok.git@v1",
     "operator_kit @ git+https://example.test/ok.git@v1"),
    ("/home/me/operator_kit", ""),  # a path on this machine: CI cannot reach it
])
def test_ci_defaults_to_where_operator_kit_came_from_only_when_ci_can_fetch_it(
        monkeypatch: pytest.MonkeyPatch, source: str, ci_default: str) -> None:
    import operator_kit.new.source

    monkeypatch.setattr(operator_kit.new.source, "operator_kit_source", lambda: source)
    values = Project(Path("x"), "x-operator", "x.example.com").values()
    assert values["operator_kit_ci"] == ci_default
    workflow = render(read_template("github/workflows/ci.yml.tmpl"), values)
    assert yaml.safe_load(workflow)["env"]["OPERATOR_KIT"] == \
        f"${{{{ vars.OPERATOR_KIT || '{ci_default}' }}}}"


def test_make_lists_the_targets_by_default(project: Path) -> None:
    shown = subprocess.run(["make"], cwd=project, capture_output=True, text=True, check=True)
    listed = {line.split()[0] for line in shown.stdout.splitlines()}
    assert {"help", "manifests", "test", "lint", "run", "docker-build", "deploy",
            "undeploy"} <= listed
    deploy = subprocess.run(["make", "-n", "deploy", "NAMESPACE=ns", "KUBECTL=kc"],
                            cwd=project, capture_output=True, text=True, check=True).stdout
    assert "--kustomize config/base" in deploy  # make manifests first
    assert "kc apply --server-side -k config/default" in deploy
    build = subprocess.run(["make", "-n", "docker-build", "IMG=img:1", "OPERATOR_KIT=/ok"],
                           cwd=project, capture_output=True, text=True, check=True).stdout
    assert 'pip wheel --quiet --no-deps --wheel-dir wheels "/ok"' in build
    assert "docker build -t img:1 ." in build


FAKE_PYTHON = """#!/usr/bin/env bash
echo "$*" >> "$CALLS"
if [ "$1 $2 $3" = "-m operator_kit.localcluster up" ]; then echo "$5/kubeconfig"; fi
if [ "$2" = pytest ]; then
  required="$OPERATOR_KIT_TEST_REQUIRE_KUBERNETES"
  echo "pytest kubeconfig=$OPERATOR_KIT_TEST_KUBECONFIG required=$required" >> "$CALLS"
  exit "${PYTEST_EXIT:-0}"
fi
"""


def _make_test(project: Path, tmp_path: Path, **env: str) -> tuple[int, list[str]]:
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    calls = tmp_path / "calls"
    environment = {k: v for k, v in os.environ.items() if k != "OPERATOR_KIT_TEST_KUBECONFIG"}
    result = subprocess.run(["bash", "hack/test.sh", "-x"], cwd=project, check=False,
                            env=dict(environment, PYTHON=str(fake), CALLS=str(calls), **env))
    return result.returncode, calls.read_text().splitlines()


def test_make_test_starts_and_stops_a_local_plane_when_no_cluster_is_given(
        project: Path, tmp_path: Path) -> None:
    code, calls = _make_test(project, tmp_path, PYTEST_EXIT="3")
    assert code == 3  # pytest's failure is make test's
    up, pytest_call, seen, down = calls
    assert up.startswith("-m operator_kit.localcluster up --dir ")
    plane = up.split("--dir ")[1]
    assert pytest_call == "-m pytest -x"
    assert seen == f"pytest kubeconfig={plane}/kubeconfig required=1"
    assert down == f"-m operator_kit.localcluster down --dir {plane}"


def test_make_test_uses_the_cluster_it_is_given(project: Path, tmp_path: Path) -> None:
    code, calls = _make_test(project, tmp_path, OPERATOR_KIT_TEST_KUBECONFIG="/k/config")
    assert code == 0
    assert calls == ["-m pytest -x", "pytest kubeconfig=/k/config required=1"]
