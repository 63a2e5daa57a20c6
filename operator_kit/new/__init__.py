"""``python -m operator_kit.new NAME --group GROUP --kind KIND``: start a new operator project.

Writes what a kubebuilder user expects, in Python; its tests, lint and manifests pass at
once::

    NAME/
      Makefile            help (default), manifests, test, lint, run, install, uninstall,
                          wheels, docker-build, deploy, undeploy
      pyproject.toml      the package; its test extra brings pytest, ruff and mypy
      README.md           how to test, run, build and deploy it
      Dockerfile          multi-stage: wheels in a builder, installed from them alone,
                          non-root, fit for a read-only root filesystem
      .gitignore, .dockerignore, .github/workflows/ci.yml (lint + test)
      hack/test.sh        `make test`: the suite against a real API server (a local plane
                          unless OPERATOR_KIT_TEST_KUBECONFIG names one)
      hack/lint.sh        `make lint`: ruff and mypy --strict
      config/             where `make manifests` writes manifests.yaml
      wheels/             operator_kit's wheel for the image (`make wheels`)
      PACKAGE/__init__.py the custom resource (camelCase JSON, standard Conditions), its
                          controller, its webhooks, the Operator
      PACKAGE/__main__.py ``python -m PACKAGE`` runs it; ``--manifests`` prints its YAML
      tests/              the controller against a real API server, the webhooks, the
                          manifests, and end to end with `LocalDeployment`

operator_kit is not on the package index yet, so the image and CI install it from a wheel
or a path: the Makefile's ``OPERATOR_KIT`` defaults to where this operator_kit was
installed from (its PEP 610 ``direct_url.json``: a checkout, a wheel, a VCS URL) and
``make wheels`` runs ``pip wheel`` of it into ``wheels/``, which the Dockerfile's builder
stage finds with ``--find-links``.

This module holds the generator's logic: the checks of its arguments, the placeholders'
values and the command line. The files it writes are package data, one plain template per
file under ``templates/`` (`FILES` maps each written path to its template: ``Makefile`` to
``templates/Makefile.tmpl``, ``.gitignore`` to ``templates/gitignore.tmpl``, no template
being a dotfile): what a user gets is what they read there. ``{{name}}``-style
placeholders are filled in; nothing else in a template is special.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.resources
import json
import keyword
import re
import sys
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from operator_kit.api.names import GROUP as GROUP_PATTERN
from operator_kit.api.rbac import guess_plural

# Each file written (a path template, relative to the project) and its template, relative
# to this package's templates/ folder; written in this order.
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
    "hack/crds.py": "hack/crds.py.tmpl",
    "wheels/README.md": "wheels/README.md.tmpl",
    "{{package}}/__init__.py": "package/__init__.py.tmpl",
    "{{package}}/__main__.py": "package/__main__.py.tmpl",
    "tests/test_{{package}}.py": "tests/test_package.py.tmpl",
    "tests/test_e2e.py": "tests/test_e2e.py.tmpl",
}

_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")
_EXECUTABLE = (".sh",)


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


def operator_kit_source() -> str:
    """What ``pip wheel`` should build operator_kit's wheel from: where the installed one came
    from (PEP 610's ``direct_url.json``), else the checkout this module is imported from,
    else the package name (a package index)."""
    for distribution in importlib.metadata.distributions(name="operator_kit"):
        text = distribution.read_text("direct_url.json")  # absent from an in-tree egg-info
        if text:
            return source_of(json.loads(text))
    checkout = Path(__file__).resolve().parents[2]  # CHECKOUT/operator_kit/new/__init__.py
    if (checkout / "setup.cfg").exists() or (checkout / "pyproject.toml").exists():
        return str(checkout)
    return "operator_kit"


def source_of(direct_url: dict[str, Any]) -> str:
    """A pip requirement (or path) for operator_kit from a PEP 610 ``direct_url.json``: a
    checkout's or a wheel's path, ``operator_kit @ git+URL@REV``, ``operator_kit @ URL``."""
    url = str(direct_url.get("url", ""))
    vcs = direct_url.get("vcs_info")
    if vcs is not None:
        revision = vcs.get("requested_revision") or vcs.get("commit_id")
        return f"operator_kit @ {vcs['vcs']}+{url}" + (f"@{revision}" if revision else "")
    if url.startswith("file://"):
        return urllib.request.url2pathname(urllib.parse.urlparse(url).path)
    if url:
        return f"operator_kit @ {url}"
    return "operator_kit"


def generate(name: str, group: str, kind: str, directory: Path) -> list[Path]:
    """Write the project for `name` into `directory`; the files written."""
    if not re.fullmatch(r"[a-z][a-z0-9-]*[a-z0-9]", name):
        raise ValueError(f"project name {name!r} must be lower-case letters, digits and "
                         "dashes, e.g. my-operator")
    if not GROUP_PATTERN.fullmatch(group):  # what CustomResource itself accepts
        raise ValueError(f"group {group!r} must be a DNS name with a dot, e.g. my.example.com")
    if not re.fullmatch(r"[A-Z][A-Za-z0-9]*", kind) or keyword.iskeyword(kind):
        raise ValueError(f"kind {kind!r} must be CamelCase, e.g. Widget")
    if directory.exists() and any(directory.iterdir()):
        raise FileExistsError(f"{directory} exists and is not empty; choose another --dir")
    values = {"name": name, "package": name.replace("-", "_"), "group": group, "kind": kind,
              "plural": guess_plural(kind), "singular": kind.lower(),
              "operator_kit": operator_kit_source()}
    written = []
    for path_template, template_name in FILES.items():
        path = directory / render(path_template, values)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render(read_template(template_name), values))
        if path.suffix in _EXECUTABLE:
            path.chmod(0o755)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    """The command line: write the project, list its files; 2 on a bad argument."""
    parser = argparse.ArgumentParser(prog="python -m operator_kit.new",
                                     description="Start a new operator project.")
    parser.add_argument("name", help="project name, e.g. my-operator")
    parser.add_argument("--group", required=True, help="API group, e.g. my.example.com")
    parser.add_argument("--kind", required=True, help="the custom resource's kind, e.g. Widget")
    parser.add_argument("--dir", help="where to write it (default: ./NAME)")
    args = parser.parse_args(argv)
    directory = Path(args.dir or args.name)
    try:
        files = generate(args.name, args.group, args.kind, directory)
    except (ValueError, FileExistsError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for path in files:
        print(f"wrote {path}")
    print(f"\nnext: cd {directory} && pip install -e '.[test]' && make test lint")
    return 0
