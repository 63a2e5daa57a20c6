"""What the starter writes: a project (`generate`), a kind (`add_kind`), a webhook
(`add_webhook`), each from the templates under ``templates/``.

A generated project records what it holds in ``PROJECT`` (YAML, as kubebuilder's file of
that name): its name, package and group, and each kind with its webhooks. Adding reads it
and refuses (`ScaffoldError`) a folder without one, a kind it holds already, or a webhook
the kind has. The generator owns two things only, and rewrites them from ``PROJECT``:

- ``PACKAGE/registry.py``: the kinds, a controller of each and the webhooks, which the
  user's ``PACKAGE/__init__.py`` hands to its Operator. Adding refuses when it was edited
  by hand (it no longer reads as ``PROJECT`` says), so no user edit is ever overwritten.
- ``config/base/``: the manifests, written by the project's own ``python -m PACKAGE
  --manifests --kustomize config/base`` (what ``make manifests`` runs).

Every other file is written once, new, and is the user's from then on.
"""

from __future__ import annotations

import importlib.resources
import keyword
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from operator_kit.api.names import GROUP as GROUP_PATTERN
from operator_kit.api.rbac import guess_plural

__all__ = ["CONTROLLER_FILES", "CONVERSION_FILES", "FILES", "FRAGMENTS", "KIND_FILES", "LAYOUT",
           "SAMPLE_BODIES", "VERSION_FILES", "WEBHOOK_FILES", "Kind", "Primary", "Project",
           "ScaffoldError", "add_controller", "add_kind", "add_version", "add_webhook",
           "generate", "read_template", "registry_source", "render"]

LAYOUT = "operator_kit.new/v1"
"""The ``layout`` of a ``PROJECT`` file this starter can add to."""

# Each file written once per project (a path template, relative to the project) and its
# template, relative to templates/; written in this order.
FILES = {
    "pyproject.toml": "pyproject.toml.tmpl",
    "README.md": "README.md.tmpl",
    "Makefile": "Makefile.tmpl",
    "Dockerfile": "Dockerfile.tmpl",
    ".gitignore": "gitignore.tmpl",
    ".dockerignore": "dockerignore.tmpl",
    ".github/workflows/ci.yml": "github/workflows/ci.yml.tmpl",
    "hack/test.sh": "hack/test.sh.tmpl",
    "hack/lint.sh": "hack/lint.sh.tmpl",
    "hack/ci-install.sh": "hack/ci-install.sh.tmpl",
    "wheels/README.md": "wheels/README.md.tmpl",
    "config/default/kustomization.yaml": "config/default/kustomization.yaml.tmpl",
    "{{package}}/__init__.py": "package/__init__.py.tmpl",
    "{{package}}/__main__.py": "package/__main__.py.tmpl",
    "tests/conftest.py": "tests/conftest.py.tmpl",
    "tests/test_manifests.py": "tests/test_manifests.py.tmpl",
    "tests/test_e2e.py": "tests/test_e2e.py.tmpl",
}
# Per kind: its type and controller, their test, a sample custom resource.
KIND_FILES = {
    "{{package}}/{{module}}.py": "kind/kind.py.tmpl",
    "tests/test_{{module}}.py": "kind/test_kind.py.tmpl",
    "config/samples/{{group}}_{{version}}_{{singular}}.yaml": "kind/sample.yaml.tmpl",
}
# Per added version of a kind: its class, the test converting both ways, a sample.
VERSION_FILES = {
    "{{package}}/{{module}}_{{new_version}}.py": "kind/version.py.tmpl",
    "tests/test_{{module}}_{{new_version}}.py": "kind/test_version.py.tmpl",
    "config/samples/{{group}}_{{new_version}}_{{singular}}.yaml": "kind/version_sample.yaml.tmpl",
}
# Per kind with more than one version (written with its first added one): its converter.
CONVERSION_FILES = {"{{package}}/{{module}}_conversion.py": "webhook/conversion.py.tmpl"}
# Per controller of a kind the project does not define (``add-controller --for``).
CONTROLLER_FILES = {
    "{{package}}/{{module}}.py": "controller/controller.py.tmpl",
    "tests/test_{{module}}.py": "controller/test_controller.py.tmpl",
}
# Templates rendered into another file, not written alone: another team's stand-in CRD.
FRAGMENTS = ("controller/stand_in_crd.py.tmpl",)
# Per webhook (``validate`` or ``mutate``) of a kind: its handler and their test.
WEBHOOK_FILES = {
    "validate": {"{{package}}/{{module}}_validation.py": "webhook/validation.py.tmpl",
                 "tests/test_{{module}}_validation.py": "webhook/test_validation.py.tmpl"},
    "mutate": {"{{package}}/{{module}}_defaulting.py": "webhook/defaulting.py.tmpl",
               "tests/test_{{module}}_defaulting.py": "webhook/test_defaulting.py.tmpl"},
}
_HANDLERS = {"validate": ("validation", "validate"), "mutate": ("defaulting", "default")}

_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")
_VERSION = re.compile(r"v[1-9]\d*((alpha|beta)[1-9]\d*)?")
_EXECUTABLE = (".sh",)
_LINE = 100  # the generated project's ruff line-length


class ScaffoldError(ValueError):
    """A request the starter refuses: the message says what is wrong and what to do."""


@dataclass
class Kind:
    """One kind of a generated project, as ``PROJECT`` lists it."""

    kind: str
    group: str
    version: str = "v1"
    webhooks: list[str] = field(default_factory=list)
    versions: list[str] = field(default_factory=list)
    """The versions added to it (``add-version``), besides `version`."""

    @property
    def module(self) -> str:
        """The module of its type and controller (``Widget`` -> ``widget``)."""
        return re.sub(r"(?<!^)(?=[A-Z])", "_", self.kind).lower()


@dataclass
class Primary:
    """A controller of a kind the project does not define (``add-controller --for``): a
    built-in kind or another team's custom resource, as ``PROJECT`` lists it."""

    for_kind: str
    """``group/version/Kind``, e.g. ``apps/v1/Deployment``."""

    @property
    def kind(self) -> str:
        return self.for_kind.rpartition("/")[2]

    @property
    def module(self) -> str:
        """Its module (``apps/v1/Deployment`` -> ``deployment_controller``)."""
        return re.sub(r"(?<!^)(?=[A-Z])", "_", self.kind).lower() + "_controller"


@dataclass
class Project:
    """A generated project: what its ``PROJECT`` file says, and where it is."""

    directory: Path
    name: str
    group: str
    kinds: list[Kind] = field(default_factory=list)
    primaries: list[Primary] = field(default_factory=list)

    @property
    def package(self) -> str:
        """The Python package (``my-operator`` -> ``my_operator``)."""
        return self.name.replace("-", "_")

    def values(self, kind: Kind | None = None) -> dict[str, str]:
        """The placeholders' values, for the project and (given) one of its kinds."""
        from operator_kit.new.source import compatible_requirement, operator_kit_source

        source = operator_kit_source()
        values = {"name": self.name, "package": self.package, "group": self.group,
                  "operator_kit": source, "operator_kit_requirement": compatible_requirement(),
                  # CI can fetch only a URL (git+https://..., https://...whl), no local path
                  "operator_kit_ci": source if source.startswith("operator_kit @ ") else ""}
        if kind is not None:
            values.update(kind=kind.kind, group=kind.group, version=kind.version,
                          module=kind.module, plural=guess_plural(kind.kind),
                          singular=kind.kind.lower())
        else:
            values.update(module=self.kinds[0].module if self.kinds else "")
        return values

    def save(self) -> None:
        """Write ``PROJECT``."""
        data = {"layout": LAYOUT, "projectName": self.name, "group": self.group,
                "resources": [{"kind": k.kind, "group": k.group, "version": k.version,
                               "webhooks": list(k.webhooks),
                               **({"versions": list(k.versions)} if k.versions else {})}
                              for k in self.kinds]}
        if self.primaries:
            data["controllers"] = [{"for": p.for_kind} for p in self.primaries]
        text = ("# Written by python -m operator_kit.new; its add-kind and add-webhook "
                "read and extend it.\n" + yaml.safe_dump(data, sort_keys=False))
        (self.directory / "PROJECT").write_text(text)

    @classmethod
    def load(cls, directory: Path) -> Project:
        """The project in `directory`; `ScaffoldError` if none was generated there."""
        path = directory / "PROJECT"
        hint = ("run this in the folder `python -m operator_kit.new NAME` created, or "
                "give it with --dir")
        if not path.is_file():
            raise ScaffoldError(f"{directory} is not a project of python -m operator_kit.new "
                                f"(it has no PROJECT file): {hint}")
        try:
            data: Any = yaml.safe_load(path.read_text())
            if data.get("layout") != LAYOUT:
                raise ScaffoldError(f"{path} has layout {data.get('layout')!r}, not "
                                    f"{LAYOUT!r}: {hint}")
            kinds = [Kind(r["kind"], r["group"], r["version"], list(r.get("webhooks", [])),
                          list(r.get("versions", [])))
                     for r in data.get("resources") or []]
            primaries = [Primary(str(c["for"])) for c in data.get("controllers") or []]
            return cls(directory, data["projectName"], data["group"], kinds, primaries)
        except (yaml.YAMLError, AttributeError, KeyError, TypeError) as err:
            raise ScaffoldError(f"{path} does not read as a PROJECT file ({err!r}); "
                                "restore it from version control") from None

    def find(self, kind: str) -> Kind | None:
        """The kind named `kind` (e.g. ``Widget``), or None."""
        return next((k for k in self.kinds if k.kind == kind), None)


def read_template(name: str) -> str:
    """The text of the template `name` (e.g. ``"hack/test.sh.tmpl"``), read from this
    package's data (``templates/``) wherever it is installed."""
    resource = importlib.resources.files("operator_kit.new") / "templates"
    for part in name.split("/"):
        resource = resource / part
    return resource.read_text(encoding="utf-8")


def render(template: str, values: dict[str, str]) -> str:
    """`template` with each ``{{key}}`` replaced by ``values[key]``."""
    return _PLACEHOLDER.sub(lambda match: values[match.group(1)], template.removeprefix("\n"))


def registry_source(project: Project) -> str:
    """The text of ``PACKAGE/registry.py`` for what `project` holds."""
    package = project.package
    modules = sorted({k.module for k in project.kinds}
                     | {f"{k.module}_{_HANDLERS[w][0]}" for k in project.kinds
                        for w in k.webhooks}
                     | {f"{k.module}_{v}" for k in project.kinds for v in k.versions}
                     | {f"{k.module}_conversion" for k in project.kinds if k.versions}
                     | {p.module for p in project.primaries})
    imports = f"from {package} import {', '.join(modules)}"
    if len(imports) > _LINE:
        imports = f"from {package} import (\n" + "".join(f"    {m},\n" for m in modules) + ")"
    kinds = "".join(f"    {k.module}.{k.kind},\n" for k in project.kinds)
    controllers = "".join(f"        {k.module}.{k.kind}Controller(),\n" for k in project.kinds)
    controllers += "".join(f"        {p.module}.{p.kind}Controller(),\n"
                           for p in project.primaries)
    versions = "".join(f"    {k.module}_{v}.{k.kind}{v.capitalize()},\n"
                       for k in project.kinds for v in k.versions)
    registrations = "".join(
        f"    webhooks.{hook}({k.module}.{k.kind}, \"/{hook}-{k.kind.lower()}\")"
        f"({k.module}_{_HANDLERS[hook][0]}.{_HANDLERS[hook][1]})\n"
        for k in project.kinds for hook in ("validate", "mutate") if hook in k.webhooks)
    registrations += "".join(
        f"    webhooks.convert(\"/convert-{k.kind.lower()}\", kind={k.module}.{k.kind})"
        f"({k.module}_conversion.convert)\n" for k in project.kinds if k.versions)
    return (
        '"""The kinds, controllers and webhooks `python -m operator_kit.new` wrote.\n\n'
        "Written from PROJECT by the starter: do not edit. ``add-kind`` and ``add-webhook``\n"
        "rewrite it (and refuse to once it was edited); add your own controllers and\n"
        'webhooks in __init__.py instead.\n"""\n\n'
        "from __future__ import annotations\n\n"
        "from typing import Any\n\n"
        "from operator_kit import Controller, CustomResource, Webhooks\n\n"
        f"{imports}\n\n"
        f"KINDS: list[type[CustomResource]] = [\n{kinds}]\n"
        + ("# The versions add-version added (each a class of the kind's): the CRDs hold "
           f"them.\nVERSIONS: list[type[CustomResource]] = [\n{versions}]\n" if versions
           else "")
        + "\n\n"
        "def controllers() -> list[Controller[Any]]:\n"
        '    """A new controller of each kind."""\n'
        f"    return [\n{controllers}    ]\n\n\n"
        "def register_webhooks(webhooks: Webhooks) -> None:\n"
        '    """Register each webhook on `webhooks` (the Operator\'s)."""\n'
        + (registrations or "    del webhooks  # none yet: add-webhook KIND adds one\n"))


def _write(project: Project, files: dict[str, str], values: dict[str, str]) -> list[Path]:
    """Write `files` (path template -> template); refuse, writing nothing, if one exists."""
    paths = {project.directory / render(p, values): t for p, t in files.items()}
    for path in paths:
        if path.exists():
            raise ScaffoldError(f"{path} exists already; the starter writes only new files: "
                                "move it aside and run this again")
    for path, template in paths.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render(read_template(template), values))
        if path.suffix in _EXECUTABLE:
            path.chmod(0o755)
    return list(paths)


def _check_registry(project: Project) -> Path:
    path = project.directory / project.package / "registry.py"
    if path.exists() and path.read_text() != registry_source(project):
        raise ScaffoldError(f"{path} was edited by hand; the starter owns it and would lose "
                            "the edit: move your change to __init__.py and restore the file "
                            "from version control, then run this again")
    return path


def _update(project: Project, registry: Path) -> list[Path]:
    """Save PROJECT, rewrite the registry and regenerate config/base."""
    project.save()
    registry.write_text(registry_source(project))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(project.directory.resolve()), os.environ.get("PYTHONPATH")])))
    result = subprocess.run(
        [sys.executable, "-m", project.package, "--manifests", "--kustomize", "config/base"],
        cwd=project.directory, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"`make manifests` failed after the files were written; fix the "
                           f"error and run it:\n{result.stderr.strip()[-3000:]}")
    return [project.directory / "PROJECT", registry, project.directory / "config/base"]


def check_kind(kind: str) -> None:
    """`ScaffoldError` unless `kind` is a CamelCase kind name."""
    if not re.fullmatch(r"[A-Z][A-Za-z0-9]*", kind) or keyword.iskeyword(kind):
        raise ScaffoldError(f"kind {kind!r} must be CamelCase, e.g. Widget")


def check_group(group: str) -> None:
    """`ScaffoldError` unless `group` is an API group a CustomResource accepts."""
    if not GROUP_PATTERN.fullmatch(group):
        raise ScaffoldError(f"group {group!r} must be a DNS name with a dot, e.g. "
                            "my.example.com")


def check_version(version: str) -> None:
    """`ScaffoldError` unless `version` is a Kubernetes API version name."""
    if not _VERSION.fullmatch(version):
        raise ScaffoldError(f"version {version!r} must be a Kubernetes API version: v, a "
                            "number, then alpha or beta and a number, e.g. v2 or v2beta1")


def add_version(directory: Path, kind: str, version: str, *,
                storage: bool = False) -> list[Path]:
    """Add `version` to `kind` of the project in `directory`: its class (served; the
    storage version if `storage`), a sample, a test converting both ways, and the first
    time the kind's converter, registered as a conversion webhook; the paths written."""
    project = Project.load(directory)
    check_version(version)
    target = project.find(kind)
    if target is None:
        known = ", ".join(k.kind for k in project.kinds) or "none"
        raise ScaffoldError(f"the project has no kind {kind} (it has: {known}); add it first "
                            f"with add-kind {kind}")
    if version == target.version or version in target.versions:
        have = [target.version, *target.versions]
        following = max(int(re.sub(r"\D.*", "", v[1:]) or 0) for v in have) + 1
        raise ScaffoldError(f"{kind} has a version {version} already (it has: "
                            f"{', '.join(have)}); choose another, e.g. v{following}")
    registry = _check_registry(project)
    storage_note = ("this one (add-version --storage)." if storage else
                    f"{target.version}, the kind's first. Set True here to store\n    # this "
                    "one instead, then migrate what is stored (docs/how-to/versions.md).")
    values = dict(project.values(target), new_version=version,
                  class_suffix=version.capitalize(), storage=str(storage),
                  storage_note=storage_note)
    files = dict(VERSION_FILES, **(CONVERSION_FILES if not target.versions else {}))
    written = _write(project, files, values)
    target.versions.append(version)
    return written + _update(project, registry)


def add_kind(directory: Path, kind: str, *, group: str | None = None, version: str = "v1",
             webhooks: tuple[str, ...] = ()) -> list[Path]:
    """Add `kind` (its type and controller, a test, a sample) to the project in
    `directory`, with `webhooks` (``validate``, ``mutate``); the paths written."""
    project = Project.load(directory)
    check_kind(kind)
    check_group(group or project.group)
    check_version(version)
    existing = project.find(kind)
    if existing is not None:
        raise ScaffoldError(f"kind {kind} exists already ({existing.group}/{existing.version}"
                            f", {project.package}/{existing.module}.py); add a webhook to it "
                            f"with add-webhook {kind}, or choose another name")
    new = Kind(kind, group or project.group, version)
    if any(k.module == new.module for k in project.kinds):
        raise ScaffoldError(f"kind {kind} would share the module {new.module}.py with another "
                            "kind; choose another name")
    registry = _check_registry(project)
    written = _write(project, KIND_FILES, project.values(new))
    project.kinds.append(new)
    for hook in webhooks:
        written += _write(project, WEBHOOK_FILES[hook], project.values(new))
        new.webhooks.append(hook)
    return written + _update(project, registry)


_CONTAINERS = {"containers": [{"name": "main", "image": "busybox:1.36"}]}
_POD = {"metadata": {"labels": {"app": "test"}}, "spec": _CONTAINERS}
_WORKLOAD = {"selector": {"matchLabels": {"app": "test"}}, "template": _POD}
_JOB = {"template": {"spec": {"restartPolicy": "Never", **_CONTAINERS}}}
# The spec (or data) of an object the API server accepts, for the generated test, by kind;
# another built-in kind gets its metadata alone (fill in the rest: the test says 422).
SAMPLE_BODIES: dict[str, dict[str, Any]] = {
    "v1/ConfigMap": {"data": {"key": "value"}},
    "v1/Secret": {"stringData": {"key": "value"}},
    "v1/Service": {"spec": {"ports": [{"port": 80}]}},
    "v1/Pod": {"spec": _CONTAINERS},
    "apps/v1/Deployment": {"spec": _WORKLOAD},
    "apps/v1/StatefulSet": {"spec": _WORKLOAD},
    "apps/v1/DaemonSet": {"spec": _WORKLOAD},
    "apps/v1/ReplicaSet": {"spec": _WORKLOAD},
    "batch/v1/Job": {"spec": _JOB},
    "batch/v1/CronJob": {"spec": {"schedule": "0 * * * *", "jobTemplate": {"spec": _JOB}}},
    "networking.k8s.io/v1/NetworkPolicy": {"spec": {"podSelector": {}}},
}


def _literal(value: Any, indent: str = "") -> str:
    """`value` (dicts, lists, str, bool) as a Python literal, one item a line, so the
    generated project's lines stay short."""
    inner = indent + "    "
    if isinstance(value, dict) and value:
        items = "".join(f"{inner}{k!r}: {_literal(v, inner)},\n" for k, v in value.items())
        return "{\n" + items + indent + "}"
    if isinstance(value, list) and value:
        return "[\n" + "".join(f"{inner}{_literal(v, inner)},\n" for v in value) + indent + "]"
    return repr(value)


def _stand_in_crd(group: str, version: str, kind: str) -> str:
    """The generated test's module fixture that installs a stand-in for another team's
    CRD (any fields, a status subresource), as that team would, and removes it after."""
    plural = guess_plural(kind)
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": f"{plural}.{group}"},
           "spec": {"group": group, "scope": "Namespaced",
                    "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
                    "versions": [{"name": version, "served": True, "storage": True,
                                  "subresources": {"status": {}},
                                  "schema": {"openAPIV3Schema": {
                                      "type": "object",
                                      "x-kubernetes-preserve-unknown-fields": True}}}]}}
    return render(read_template(FRAGMENTS[0]),
                  {"group": group, "plural": plural,
                   "crd": _literal(crd, "    ")})


def add_controller(directory: Path, for_kind: str) -> list[Path]:
    """Add a controller of `for_kind` (``group/version/Kind``: a built-in kind or another
    team's custom resource, which the project does not define) to the project in
    `directory`: the controller, its test (a stand-in CRD for another team's kind) and,
    through the regenerated manifests, its RBAC; the paths written."""
    from operator_kit.api.kinds import Kind as KindName

    project = Project.load(directory)
    try:
        named = KindName.of(for_kind)
    except ValueError as err:
        raise ScaffoldError(f"--for {for_kind!r}: {err}") from None
    check_kind(named.kind)
    check_version(named.version)
    if any(k.kind == named.kind and k.group == named.group for k in project.kinds):
        raise ScaffoldError(f"{for_kind} is a kind of this project (add-kind {named.kind}): "
                            "its controller is there already")
    new = Primary(str(named))
    if any(p.module == new.module for p in project.primaries):
        raise ScaffoldError(f"the project has a controller of {named.kind} already "
                            f"({project.package}/{new.module}.py); change that file instead")
    registry = _check_registry(project)
    built_in = named.built_in
    body = {"apiVersion": named.api_version, "kind": named.kind,
            **SAMPLE_BODIES.get(str(named), {} if built_in else {"spec": {}})}
    namespaced = named.namespaced is not False
    values = dict(project.values(), for_kind=str(named), kind=named.kind, module=new.module,
                  class_name=f"{named.kind}Controller",
                  controller_name=f"{named.kind.lower()}-controller",
                  singular=re.sub(r"(?<!^)(?=[A-Z])", "_", named.kind).lower(),
                  finalizer=f"{project.group}/cleanup",
                  body=_literal(body),
                  namespace_field=', "namespace": namespace.name' if namespaced else "",
                  crd_fixture="" if built_in else _stand_in_crd(
                      named.group, named.version, named.kind))
    written = _write(project, CONTROLLER_FILES, values)
    project.primaries.append(new)
    return written + _update(project, registry)


def add_webhook(directory: Path, kind: str, webhooks: tuple[str, ...]) -> list[Path]:
    """Add the `webhooks` (``validate``, ``mutate``) of `kind` to the project in
    `directory`; the paths written."""
    project = Project.load(directory)
    if not webhooks:
        raise ScaffoldError("say which webhook to add: --validate, --mutate or both")
    target = project.find(kind)
    if target is None:
        known = ", ".join(k.kind for k in project.kinds) or "none"
        raise ScaffoldError(f"the project has no kind {kind} (it has: {known}); add it first "
                            f"with add-kind {kind}")
    for hook in webhooks:
        if hook in target.webhooks:
            module = f"{target.module}_{_HANDLERS[hook][0]}.py"
            raise ScaffoldError(f"{kind} has a {hook} webhook already ({project.package}/"
                                f"{module}); change that file instead")
    registry = _check_registry(project)
    written: list[Path] = []
    for hook in webhooks:
        written += _write(project, WEBHOOK_FILES[hook], project.values(target))
        target.webhooks.append(hook)
    return written + _update(project, registry)


def generate(name: str, group: str, kind: str, directory: Path) -> list[Path]:
    """Write the project `name` into `directory`, with `kind` and its validating and
    mutating webhooks; the files written."""
    if not re.fullmatch(r"[a-z][a-z0-9-]*[a-z0-9]", name):
        raise ScaffoldError(f"project name {name!r} must be lower-case letters, digits and "
                            "dashes, e.g. my-operator")
    check_group(group)
    check_kind(kind)
    if directory.exists() and any(directory.iterdir()):
        raise ScaffoldError(f"{directory} exists and is not empty; choose another --dir")
    project = Project(directory, name, group)
    written = _write(project, FILES, project.values(Kind(kind, group)))
    project.save()
    return written + add_kind(directory, kind, webhooks=("validate", "mutate"))
