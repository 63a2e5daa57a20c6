"""``python -m operator_kit.new`` writes a project whose own make test, lint and manifests pass.

The generated project runs against the suite's cluster (OPERATOR_KIT_TEST_KUBECONFIG),
so no second control plane starts; `make deploy` uses the plane's kubectl.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import dockerfile
import pytest
import yaml

from operator_kit.localcluster import find_or_build
from operator_kit.new import generate
from operator_kit.testing import Namespace, TestCluster, eventually


def new_project(tmp_path: Path, name: str, group: str, kind: str) -> Path:
    project = tmp_path / name
    result = subprocess.run(
        [sys.executable, "-m", "operator_kit.new", name, "--group", group, "--kind", kind,
         "--dir", str(project)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    return project


def project_env(project: Path, cluster: TestCluster | None = None) -> dict[str, str]:
    """The environment of a user who installed the project (here: it is on PYTHONPATH)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(project), os.environ.get("PYTHONPATH")])))
    env.pop("OPERATOR_KIT_TEST_KUBECONFIG", None)
    if cluster is not None:
        env["OPERATOR_KIT_TEST_KUBECONFIG"] = cluster.kubeconfig
    return env


def make(project: Path, *args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(["make", f"PYTHON={sys.executable}", *args], cwd=project, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(process: subprocess.Popen[str], timeout: float = 420) -> str:
    output, _ = process.communicate(timeout=timeout)
    assert process.returncode == 0, f"{process.args}:\n{output[-6000:]}"
    return output


def add(project: Path, *args: str) -> None:
    result = subprocess.run([sys.executable, "-m", "operator_kit.new", *args, "--dir",
                             str(project)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_generated_project_with_an_added_kind_and_webhook_passes_its_make_targets(
        cluster: TestCluster, tmp_path: Path) -> None:
    """make test lint manifests deploy undeploy of a project that grew a second kind
    (add-kind) and a webhook of it (add-webhook), against the suite's API server."""
    project = new_project(tmp_path, "gadget-operator", "gadgets.starter.test", "Gadget")
    add(project, "add-kind", "Gizmo", "--group", "gizmos.starter.test")
    add(project, "add-webhook", "Gizmo", "--validate")
    env = project_env(project, cluster)
    # lint and test at once: the machine waits on the API server more than it computes.
    lint = make(project, "lint", env=env)
    tests = make(project, "test", "PYTEST_ARGS=-q -p no:cacheprovider -rs", env=env)
    test_output = finish(tests)
    # Gadget: controller 2, webhooks 3; Gizmo: controller 2, webhook 2; manifests and
    # samples 2; end to end (every sample admitted by the webhooks and Ready) 1.
    assert "12 passed" in test_output and "skipped" not in test_output, test_output
    lint_output = finish(lint)
    assert "Success: no issues found" in lint_output

    kubectl = find_or_build(log=False).kubectl
    assert kubectl is not None, "the local plane's binaries include kubectl"
    namespace = f"gadgets-{os.getpid()}"
    args = (f"KUBECTL={kubectl}", f"NAMESPACE={namespace}", "IMG=registry.test/gadget:1")
    env = dict(env, KUBECONFIG=cluster.kubeconfig)
    finish(make(project, "manifests", *args, env=env))
    base = project / "config/base"
    [deployment] = [
        doc for doc in yaml.safe_load_all((base / "deployment.yaml").read_text())
        if doc["kind"] == "Deployment"]
    assert deployment["metadata"]["namespace"] == namespace
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == \
        "registry.test/gadget:1"
    crds = {doc["metadata"]["name"]: doc for doc in
            yaml.safe_load_all((base / "crds.yaml").read_text())}
    assert set(crds) == {"gadgets.gadgets.starter.test", "gizmos.gizmos.starter.test"}
    status = crds["gadgets.gadgets.starter.test"]["spec"]["versions"][0]["schema"][
        "openAPIV3Schema"]["properties"]["status"]
    assert {"observedGeneration", "configMapName", "conditions"} <= set(status["properties"])
    assert status["properties"]["conditions"]["x-kubernetes-list-type"] == "map"

    crd_paths = [f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
                 for name in crds]
    deployment_path = f"/apis/apps/v1/namespaces/{namespace}/deployments/gadget-operator"
    samples = [f"/apis/gadgets.starter.test/v1/namespaces/{namespace}/gadgets/gadget-sample",
               f"/apis/gizmos.starter.test/v1/namespaces/{namespace}/gizmos/gizmo-sample"]
    try:
        # The first kubectl apply -f config/samples/ works: the CRDs (make install) accept
        # the samples as written (the webhooks admit them too: the project's test_e2e).
        finish(make(project, "install", *args, env=env))
        cluster.api.request("POST", "/api/v1/namespaces",
                            body={"metadata": {"name": namespace}})
        applied_samples = subprocess.run(
            [kubectl, "apply", "-n", namespace, "-f", "config/samples/"], cwd=project, env=env,
            capture_output=True, text=True, check=False)
        assert applied_samples.returncode == 0, applied_samples.stderr
        assert all(cluster.exists(path) for path in samples)
        finish(make(project, "deploy", *args, env=env))  # kubectl apply -k config/default
        applied = cluster.api.get(deployment_path)
        assert applied["spec"]["template"]["spec"]["containers"][0]["image"] == \
            "registry.test/gadget:1"
        assert all(cluster.exists(path) for path in crd_paths)
        webhooks = cluster.api.get("/apis/admissionregistration.k8s.io/v1/"
                                   "validatingwebhookconfigurations/gadget-operator")
        assert {"/validate-gadget", "/validate-gizmo"} <= {
            w["clientConfig"]["service"]["path"] for w in webhooks["webhooks"]}
        undeployed = finish(make(project, "undeploy", *args, env=env))
        # the custom objects went first, while the operator would still run their cleanups
        assert undeployed.index("deleting every gadgets.gadgets.starter.test") < \
            undeployed.index("delete --ignore-not-found -k config/default"), undeployed
        assert not any(cluster.exists(path) for path in samples)
        assert not cluster.exists(deployment_path)
        eventually(60, lambda: not any(cluster.exists(path) for path in crd_paths),
                   message="the CRDs deleted")
    finally:
        Namespace(namespace, cluster).delete()


def test_image_stages_install_the_operator_from_wheels_alone(tmp_path: Path) -> None:
    """The Dockerfile's own RUN steps, outside Docker: `make wheels`, the builder's `pip
    wheel` of the project with operator_kit found in wheels/, then the runtime's
    `pip install --no-index` from those wheels only (resolved with --dry-run: a fresh
    Python would install exactly that list)."""
    project = new_project(tmp_path, "gizmo-operator", "gizmos.starter.test", "Gizmo")
    finish(make(project, "wheels", env=project_env(project)))
    assert list((project / "wheels").glob("operator_kit-*.whl"))
    stages: list[list[dockerfile.Command]] = []
    for command in dockerfile.parse_file(str(project / "Dockerfile")):
        if command.cmd == "FROM":
            stages.append([])
        if stages:  # the ARGs before the first FROM belong to no stage
            stages[-1].append(command)
    [builder], [runtime] = ([c.value[0] for c in stage if c.cmd == "RUN"] for stage in stages)
    # The builder's context: what its COPY lines bring; the local pip cache may serve the
    # downloads.
    source, dist = tmp_path / "src", tmp_path / "dist"
    source.mkdir()
    for command in stages[0]:
        if command.cmd == "COPY":
            *sources, _target = command.value
            for item in sources:
                copy = shutil.copytree if (project / item).is_dir() else shutil.copy
                copy(project / item, source / item)
    report = tmp_path / "report.json"
    runtime += f" --dry-run --ignore-installed --report {report}"
    for step, cwd in ((builder, source), (runtime, tmp_path)):
        step = step.replace("--no-cache-dir ", "").replace("/dist", str(dist))
        result = subprocess.run(
            ["bash", "-c", step], cwd=cwd, capture_output=True, text=True, timeout=420,
            env=dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}"
                                      f"{os.environ['PATH']}"), check=False)
        assert result.returncode == 0, f"{step}:\n{result.stdout}\n{result.stderr}"
    installs = {item["metadata"]["name"].lower().replace("_", "-")
                for item in json.loads(report.read_text())["install"]}
    assert {"gizmo-operator", "operator-kit", "gunicorn", "kubernetes"} <= installs
    [wheel] = dist.glob("gizmo_operator-*.whl")
    assert "gizmo_operator/__init__.py" in zipfile.ZipFile(wheel).namelist()


@pytest.mark.parametrize(("name", "group", "kind", "message"), [
    ("My_Operator", "my.example.com", "Widget", "project name"),
    ("my-operator", "nodots", "Widget", "group"),
    ("my-operator", "my.example.com", "widget", "kind"),
])
def test_bad_names_are_refused_with_what_to_write(tmp_path: Path, name: str, group: str,
                                                 kind: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        generate(name, group, kind, tmp_path / "x")
