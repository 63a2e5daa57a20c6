"""``python -m operator_kit.new add-kind / add-version / add-webhook``: new files only, the
registry and PROJECT rewritten, and one-line refusals (exit 2) for what cannot be added.

The added kind's and webhook's code passes the project's own make test and lint against a
real API server in tests/cluster/test_starter.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from operator_kit.api.kinds import Kind as KindName
from operator_kit.new import Project, compatible_requirement, generate, main, registry_source
from operator_kit.new.scaffold import Kind


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("adding") / "gadget-operator"
    generate("gadget-operator", "gadgets.starter.test", "Gadget", directory)
    return directory


@pytest.fixture
def project(generated: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "gadget-operator"
    shutil.copytree(generated, copy)
    return copy


def snapshot(project: Path) -> dict[str, str]:
    return {str(p.relative_to(project)): p.read_text() for p in project.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


def test_add_kind_writes_new_files_and_keeps_every_user_edit(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for mine in ("gadget_operator/gadget.py", "gadget_operator/__init__.py",
                 "config/default/kustomization.yaml", "Makefile"):
        (project / mine).write_text((project / mine).read_text() + "# my own line\n")
    before = snapshot(project)
    assert main(["add-kind", "Gizmo", "--group", "gizmos.starter.test", "--version",
                 "v1alpha1", "--validate", "--dir", str(project)]) == 0
    after = snapshot(project)
    changed = {path for path in before if before[path] != after.get(path)}
    assert changed <= {"PROJECT", "gadget_operator/registry.py"} | {
        p for p in before if p.startswith("config/base/")}
    assert set(after) - set(before) >= {
        "gadget_operator/gizmo.py", "gadget_operator/gizmo_validation.py",
        "tests/test_gizmo.py", "tests/test_gizmo_validation.py",
        "config/samples/gizmos.starter.test_v1alpha1_gizmo.yaml"}
    assert "gadget_operator/gizmo_defaulting.py" not in after
    registry = after["gadget_operator/registry.py"]
    assert "gizmo.GizmoController()" in registry and "gadget.GadgetController()" in registry
    assert 'webhooks.validate(gizmo.Gizmo, "/validate-gizmo")(gizmo_validation.validate)' \
        in registry
    crds = [doc["metadata"]["name"] for doc in yaml.safe_load_all(after["config/base/crds.yaml"])]
    assert sorted(crds) == ["gadgets.gadgets.starter.test", "gizmos.gizmos.starter.test"]
    sample = yaml.safe_load(after["config/samples/gizmos.starter.test_v1alpha1_gizmo.yaml"])
    assert (sample["apiVersion"], sample["kind"]) == ("gizmos.starter.test/v1alpha1", "Gizmo")
    assert "wrote" in capsys.readouterr().out


def test_add_webhook_adds_only_the_webhooks_asked_for(project: Path) -> None:
    assert main(["add-kind", "Gizmo", "--dir", str(project)]) == 0
    assert main(["add-webhook", "Gizmo", "--mutate", "--dir", str(project)]) == 0
    assert (project / "gadget_operator/gizmo_defaulting.py").exists()
    assert not (project / "gadget_operator/gizmo_validation.py").exists()
    [gizmo] = [k for k in Project.load(project).kinds if k.kind == "Gizmo"]
    assert gizmo.webhooks == ["mutate"]
    hooks = [doc for doc in yaml.safe_load_all(
        (project / "config/base/webhooks.yaml").read_text())
        if doc["kind"] == "MutatingWebhookConfiguration"]
    paths = {w["clientConfig"]["service"]["path"] for w in hooks[0]["webhooks"]}
    assert paths == {"/mutate-gadget", "/mutate-gizmo"}


def test_add_version_writes_the_version_its_converter_and_a_test_and_the_crd_serves_both(
        project: Path) -> None:
    before = snapshot(project)
    assert main(["add-version", "Gadget", "--version", "v2", "--dir", str(project)]) == 0
    after = snapshot(project)
    assert set(after) - set(before) == {
        "gadget_operator/gadget_v2.py", "gadget_operator/gadget_conversion.py",
        "tests/test_gadget_v2.py", "config/samples/gadgets.starter.test_v2_gadget.yaml"}
    changed = {path for path in before if before[path] != after.get(path)}
    assert changed <= {"PROJECT", "gadget_operator/registry.py"} | {
        p for p in before if p.startswith("config/base/")}
    [gadget] = Project.load(project).kinds
    assert (gadget.version, gadget.versions) == ("v1", ["v2"])
    registry = after["gadget_operator/registry.py"]
    assert "gadget_v2.GadgetV2," in registry
    assert ('webhooks.convert("/convert-gadget", kind=gadget.Gadget)'
            "(gadget_conversion.convert)") in registry
    assert "class GadgetV2(CustomResource, version_of=Gadget):" in after[
        "gadget_operator/gadget_v2.py"]
    [crd] = [d for d in yaml.safe_load_all(after["config/base/crds.yaml"])]
    versions = {v["name"]: (v["served"], v["storage"]) for v in crd["spec"]["versions"]}
    assert versions == {"v1": (True, True), "v2": (True, False)}
    assert crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["path"] == \
        "/convert-gadget"
    # a third version: its class, sample and test; the kind's converter is written once
    assert main(["add-version", "Gadget", "--version", "v3beta1", "--storage", "--dir",
                 str(project)]) == 0
    third = snapshot(project)
    assert set(third) - set(after) == {
        "gadget_operator/gadget_v3beta1.py", "tests/test_gadget_v3beta1.py",
        "config/samples/gadgets.starter.test_v3beta1_gadget.yaml"}
    [crd] = [d for d in yaml.safe_load_all(third["config/base/crds.yaml"])]
    assert {v["name"] for v in crd["spec"]["versions"] if v["storage"]} == {"v3beta1"}


def test_each_kind_has_a_ready_printer_column(project: Path) -> None:
    [crd] = [d for d in yaml.safe_load_all((project / "config/base/crds.yaml").read_text())]
    columns = {c["name"]: c for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]}
    assert columns["Ready"]["jsonPath"] == '.status.conditions[?(@.type=="Ready")].status'
    assert columns["Reason"]["priority"] == 1
    assert "Age" in columns


@pytest.mark.parametrize(("argv", "message"), [
    (["add-version", "Gadget", "--version", "v1"],
     "Gadget has a version v1 already (it has: v1); choose another, e.g. v2"),
    (["add-version", "Gadget", "--version", "2"], "must be a Kubernetes API version"),
    (["add-version", "Gadget", "--version", "v2gamma1"], "must be a Kubernetes API version"),
    (["add-version", "Gizmo", "--version", "v2"], "the project has no kind Gizmo"),
    (["add-kind", "Gadget"], "kind Gadget exists already"),
    (["add-kind", "gizmo"], "must be CamelCase"),
    (["add-kind", "Gizmo", "--group", "nodots"], "must be a DNS name"),
    (["add-kind", "Gizmo", "--version", "1"], "must be a Kubernetes API version"),
    (["add-webhook", "Gadget", "--validate"], "Gadget has a validate webhook already"),
    (["add-webhook", "Gizmo", "--mutate"], "the project has no kind Gizmo"),
    (["add-webhook", "Gadget"], "--validate, --mutate or both"),
])
def test_what_cannot_be_added_is_refused_in_one_line_and_nothing_changes(
        project: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
        message: str) -> None:
    before = snapshot(project)
    assert main([*argv, "--dir", str(project)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err, err
    assert snapshot(project) == before


def test_a_version_added_twice_is_refused_the_second_time_and_nothing_changes(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["add-version", "Gadget", "--version", "v2", "--dir", str(project)]) == 0
    capsys.readouterr()
    before = snapshot(project)
    assert main(["add-version", "Gadget", "--version", "v2", "--dir", str(project)]) == 2
    err = capsys.readouterr().err
    assert err == ("error: Gadget has a version v2 already (it has: v1, v2); choose another, "
                   "e.g. v3\n")
    assert snapshot(project) == before


def test_the_project_depends_on_the_operator_kit_releases_compatible_with_this_one(
        project: Path) -> None:
    from operator_kit._version import __version__

    pyproject = (project / "pyproject.toml").read_text()
    assert f'dependencies = ["{compatible_requirement(__version__)}"]' in pyproject


@pytest.mark.parametrize(("version", "requirement"), [
    ("0.1.0", "operator_kit>=0.1.0,<0.2"), ("0.2.3", "operator_kit>=0.2.3,<0.3"),
    ("0.3.0rc1", "operator_kit>=0.3.0rc1,<0.4"), ("1.4.0", "operator_kit>=1.4.0,<2")])
def test_the_requirement_stops_before_the_next_release_semver_lets_break_it(
        version: str, requirement: str) -> None:
    assert compatible_requirement(version) == requirement


def test_a_folder_that_is_not_a_generated_project_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["add-kind", "Gizmo", "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "is not a project of python -m operator_kit.new (it has no PROJECT file)" in err
    assert list(tmp_path.iterdir()) == []


def test_a_hand_edited_registry_is_refused_rather_than_overwritten(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    registry = project / "gadget_operator/registry.py"
    registry.write_text(registry.read_text() + "# mine\n")
    assert main(["add-kind", "Gizmo", "--dir", str(project)]) == 2
    assert "registry.py was edited by hand" in capsys.readouterr().err
    assert registry.read_text().endswith("# mine\n")
    assert not (project / "gadget_operator/gizmo.py").exists()


def test_an_existing_file_is_never_overwritten(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mine = project / "tests/test_gizmo.py"
    mine.write_text("# mine\n")
    assert main(["add-kind", "Gizmo", "--dir", str(project)]) == 2
    assert "test_gizmo.py exists already" in capsys.readouterr().err
    assert mine.read_text() == "# mine\n"
    assert not (project / "gadget_operator/gizmo.py").exists()
    assert [k.kind for k in Project.load(project).kinds] == ["Gadget"]


def test_the_registry_imports_wrap_as_ruff_formats_them() -> None:
    project = Project(Path("."), "a-rather-long-operator-name", "x.example.com")
    project.kinds = [Kind(f"Kind{n}", "x.example.com", webhooks=["validate", "mutate"])
                     for n in range(4)]
    source = registry_source(project)
    assert "from a_rather_long_operator_name import (\n    kind0,\n" in source
    assert all(len(line) <= 100 for line in source.splitlines())


@pytest.mark.parametrize(("for_kind", "module", "stand_in"), [
    ("apps/v1/Deployment", "deployment_controller", False),
    ("v1/Namespace", "namespace_controller", False),
    ("cert-manager.io/v1/Certificate", "certificate_controller", True),
])
def test_add_controller_writes_a_controller_of_a_kind_the_project_does_not_define(
        project: Path, for_kind: str, module: str, stand_in: bool) -> None:
    main(["add-controller", "--for", for_kind, "--dir", str(project)])
    package = project / "gadget_operator"
    source = (package / f"{module}.py").read_text()
    assert f'resource = "{for_kind}"' in source
    test = (project / "tests" / f"test_{module}.py").read_text()
    assert ("def stand_in_crd(" in test) is stand_in  # another team's CRD: a stand-in
    assert f"{module}." in (package / "registry.py").read_text()
    assert f"for: {for_kind}" in (project / "PROJECT").read_text()
    named = KindName.of(for_kind)
    documents = [d for path in (project / "config" / "base").glob("*.yaml")
                 for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind")]
    [role] = [d for d in documents if d["kind"] == "ClusterRole"
              and d["metadata"]["name"] == "gadget-operator"]
    verbs = [sorted(r["verbs"]) for r in role["rules"]
             if r["resources"] == [named.resource_name] and r["apiGroups"] == [named.group]]
    assert verbs == [["get", "list", "watch"]]  # read-only: no finalizer, no status
    assert not [d for d in documents if d["kind"] == "CustomResourceDefinition"
                and d["spec"]["group"] == named.group]


@pytest.mark.parametrize(("for_kind", "says"), [
    ("bad", "must read 'group/version/Kind'"),
    ("apps/v1/deployment", "must be CamelCase"),
    ("gadgets.starter.test/v1/Gadget", "is a kind of this project"),
])
def test_add_controller_refuses_what_it_cannot_write_in_one_line(
        project: Path, for_kind: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    before = (project / "PROJECT").read_text()
    assert main(["add-controller", "--for", for_kind, "--dir", str(project)]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1, err
    assert (project / "PROJECT").read_text() == before


def test_a_second_controller_of_the_same_kind_is_refused(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["add-controller", "--for", "apps/v1/Deployment", "--dir", str(project)]) == 0
    assert main(["add-controller", "--for", "apps/v1/Deployment", "--dir", str(project)]) == 2
    assert "has a controller of Deployment already" in capsys.readouterr().err
