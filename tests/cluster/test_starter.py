"""``python -m operator_kit.new`` writes a project whose own make test, lint and manifests pass.

The generated project runs against the suite's cluster (OPERATOR_KIT_TEST_KUBECONFIG),
so no second control plane starts; `make deploy` uses the plane's kubectl.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import dockerfile
import pytest
import yaml

from operator_kit.client.uninstall import uninstall
from operator_kit.localcluster import find_or_build
from operator_kit.new import generate
from operator_kit.testing import TEST_LABEL, Namespace, TestCluster, eventually, stop_process
from operator_kit.testing.plugin import namespace_prefix
from tests.unit.test_helm import helm, run_helm


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


FINALIZER = """\
    finalizer = "gizmos.starter.test/cleanup"

    def cleanup(self, obj: Gizmo, ctx: Context) -> None:
        \"\"\"Nothing outside the cluster: the finalizer holds each Gizmo until this ran.\"\"\"
"""


def with_a_finalizer(project: Path) -> None:
    """What a user does to give Gizmo a cleanup: the line the kind's module suggests."""
    module = project / "gadget_operator/gizmo.py"
    text = module.read_text()
    assert '    # finalizer = "gizmos.starter.test/cleanup"\n' in text
    module.write_text(text.replace('    # finalizer = "gizmos.starter.test/cleanup"\n',
                                   FINALIZER))


def test_a_project_with_a_finalizer_and_a_second_version_passes_its_make_targets(
        cluster: TestCluster, tmp_path: Path) -> None:
    """make test lint manifests deploy undeploy of a project that grew a second kind with
    a finalizer (add-kind, then the user's cleanup), a second version of it (add-version)
    and a controller of Deployments (add-controller --for), against the suite's API
    server: its own tests delete the finalizer's objects while their operator runs and
    wait for every namespace; undeploy (--uninstall) leaves nothing behind."""
    project = new_project(tmp_path, "gadget-operator", "gadgets.starter.test", "Gadget")
    add(project, "add-kind", "Gizmo", "--group", "gizmos.starter.test")
    with_a_finalizer(project)
    add(project, "add-version", "Gizmo", "--version", "v2")
    # A controller of a built-in kind: its test runs in make test, its RBAC in the deploy.
    add(project, "add-controller", "--for", "apps/v1/Deployment")
    env = project_env(project, cluster)
    started = time.monotonic()
    # lint and test at once: the machine waits on the API server more than it computes.
    lint = make(project, "lint", env=env)
    tests = make(project, "test", "PYTEST_ARGS=-q -p no:cacheprovider -rs", env=env)
    test_output = finish(tests)
    # Gadget: controller 2, webhooks 3; Gizmo: controller 2, v1 <-> v2 through the
    # conversion webhook 2; manifests and samples 2; end to end (every sample, of both
    # Gizmo versions, admitted and Ready, then deleted while the operator runs) 1; the
    # Deployment controller's one reconcile 1.
    assert "13 passed" in test_output and "skipped" not in test_output, test_output
    lint_output = finish(lint)
    assert "Success: no issues found" in lint_output
    print(f"make test and lint: {time.monotonic() - started:.0f}s")
    # Its tests' namespaces (named after each test) are gone: each was awaited.
    prefixes = tuple(f"{namespace_prefix(name)}-" for path in (project / "tests").glob("*.py")
                     for name in re.findall(r"^def (test_\w+)", path.read_text(), re.M))
    listed = cluster.api.get("/api/v1/namespaces", labelSelector=f"{TEST_LABEL}=true")
    left = [ns["metadata"]["name"] for ns in listed["items"]
            if ns["metadata"]["name"].startswith(prefixes)]
    assert not left, f"the project's test namespaces {left} were not awaited"

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
    assert [v["name"] for v in crds["gizmos.gizmos.starter.test"]["spec"]["versions"]] == \
        ["v1", "v2"]

    finish(make(project, "chart", *args, env=env))
    chart = yaml.safe_load((project / "chart/Chart.yaml").read_text())
    assert (chart["name"], chart["appVersion"]) == ("gadget-operator", "1")
    if helm() is not None:  # CI has it (HELM)
        run_helm("lint", "--strict", str(project / "chart"), home=tmp_path)

    crd_paths = [f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
                 for name in crds]
    deployment_path = f"/apis/apps/v1/namespaces/{namespace}/deployments/gadget-operator"
    samples = [f"/apis/gadgets.starter.test/v1/namespaces/{namespace}/gadgets/gadget-sample",
               f"/apis/gizmos.starter.test/v1/namespaces/{namespace}/gizmos/gizmo-sample"]
    operator: subprocess.Popen[str] | None = None
    try:
        # The CRDs (make install) accept the samples as written (the webhooks admit them
        # too: the project's test_e2e). v2's sample needs the conversion webhook, which
        # only a deployed replica serves (this plane has no kubelet): the v1 ones here.
        finish(make(project, "install", *args, env=env))
        cluster.api.request("POST", "/api/v1/namespaces",
                            body={"metadata": {"name": namespace}})
        applied_samples = subprocess.run(
            [kubectl, "apply", "-n", namespace, "-f", "config/samples/gadgets.starter.test_"
             "v1_gadget.yaml", "-f", "config/samples/gizmos.starter.test_v1_gizmo.yaml"],
            cwd=project, env=env, capture_output=True, text=True, check=False)
        assert applied_samples.returncode == 0, applied_samples.stderr
        # The operator runs here (make run's command), as its Deployment's pod would.
        log = tmp_path / "operator.log"
        with log.open("w") as out:
            operator = subprocess.Popen(
                [sys.executable, "-m", "gadget_operator", "--namespace", namespace,
                 "--no-leader-elect", "--health-probe-bind-address", "0",
                 "--metrics-bind-address", "0"], cwd=project, env=env, stdout=out,
                stderr=subprocess.STDOUT, text=True)
        # Through v1: kubectl prefers v2, which needs the conversion webhook.
        listing = eventually(60, lambda: "True" in (got := subprocess.run(
            [kubectl, "get", "gizmos.v1.gizmos.starter.test", "-n", namespace], env=env,
            capture_output=True, text=True, check=True).stdout) and got,
            message="the sample Gizmo Ready")
        assert listing.split()[:3] == ["NAME", "READY", "AGE"], listing  # REASON: -o wide
        gizmo = cluster.api.get(samples[1])
        assert gizmo["metadata"]["finalizers"] == ["gizmos.starter.test/cleanup"]
        finish(make(project, "deploy", *args, env=env))  # kubectl apply -k config/default
        applied = cluster.api.get(deployment_path)
        assert applied["spec"]["template"]["spec"]["containers"][0]["image"] == \
            "registry.test/gadget:1"
        assert all(cluster.exists(path) for path in crd_paths)
        webhooks = cluster.api.get("/apis/admissionregistration.k8s.io/v1/"
                                   "validatingwebhookconfigurations/gadget-operator")
        assert "/validate-gadget" in {w["clientConfig"]["service"]["path"]
                                      for w in webhooks["webhooks"]}
        undeployed = finish(make(project, "undeploy", *args, "UNDEPLOY_TIMEOUT=60", env=env))
        # the custom objects went first, while the operator ran their cleanups; then the
        # documents, the CRDs and the Namespace among them
        assert "deleted 2 custom object(s); waiting up to 60s" in undeployed, undeployed
        assert "deleted CustomResourceDefinition gizmos.gizmos.starter.test" in undeployed
        assert f"uninstalled gadget-operator from namespace {namespace}" in undeployed
        assert not any(cluster.exists(path) for path in samples)
        assert not cluster.exists(deployment_path)
        eventually(60, lambda: not any(cluster.exists(path) for path in crd_paths),
                   message="the CRDs deleted")
        eventually(120, lambda: not cluster.exists(f"/api/v1/namespaces/{namespace}"),
                   message="the namespace deleted")
    except AssertionError:
        if operator is not None:
            print(f"--- the operator's log\n{(tmp_path / 'operator.log').read_text()[-6000:]}")
        raise
    finally:
        # On a failure, what make undeploy would have done, in its order: nothing a
        # finalizer holds, no CRD whose conversion webhook is gone, is left to the next test.
        uninstall(cluster.api, list(crds.values()), timeout=30)
        if operator is not None:
            stop_process(operator)
        Namespace(namespace, cluster).delete()
    print(f"the whole test: {time.monotonic() - started:.0f}s")


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
