"""``python -m operator_kit.new``: start an operator project, then add kinds and webhooks.

Three commands, as kubebuilder's ``init``, ``create api`` and ``create webhook``::

    python -m operator_kit.new NAME --group GROUP --kind KIND [--dir DIR]
    python -m operator_kit.new add-kind KIND [--group GROUP] [--version V] [--validate] [--mutate]
    python -m operator_kit.new add-webhook KIND [--validate] [--mutate]
    python -m operator_kit.new add-version KIND --version V [--storage]
    python -m operator_kit.new add-controller --for GROUP/VERSION/KIND

The first writes what a kubebuilder user expects, in Python; its tests, lint and manifests
pass at once::

    NAME/
      PROJECT             what the project holds (its kinds and webhooks); adding reads it
      Makefile            help (default), manifests, chart, test, lint, run, install,
                          uninstall, wheels, docker-build, deploy, undeploy (through
                          --uninstall: the custom objects first, while the operator runs)
      pyproject.toml      the package; its test extra brings pytest, ruff and mypy
      README.md           how to test, run, build and deploy it
      Dockerfile          multi-stage: wheels in a builder, installed from them alone,
                          non-root, fit for a read-only root filesystem
      .gitignore, .dockerignore, .github/workflows/ci.yml (lint + test)
      hack/test.sh        `make test`: the suite against a real API server (a local plane
                          unless OPERATOR_KIT_TEST_KUBECONFIG names one)
      hack/lint.sh        `make lint`: ruff and mypy --strict
      config/base/        the kustomize base `make manifests` writes from the code
      config/default/     the overlay `make deploy` applies (kubectl apply -k); yours
      config/samples/     a custom resource of each kind: kubectl apply -f config/samples/
      wheels/             operator_kit's wheel for the image (`make wheels`)
      PACKAGE/__init__.py the Operator, with what `registry` lists; yours
      PACKAGE/registry.py the kinds, controllers and webhooks; the starter's (do not edit)
      PACKAGE/KIND.py     the custom resource (camelCase JSON, standard Conditions) and its
                          controller; KIND_validation.py, KIND_defaulting.py its webhooks
      PACKAGE/__main__.py ``python -m PACKAGE`` runs it; ``--manifests`` prints its YAML
      tests/              each controller against a real API server, the webhooks, the
                          manifests and samples, and end to end with `LocalDeployment`;
                          conftest.py waits for each test namespace to go, naming an
                          object a finalizer holds

``add-version KIND --version v2`` adds a version of a kind (kubebuilder's ``create api
--version``): ``PACKAGE/KIND_v2.py`` (its class, ``version_of`` the kind, served, the
storage version with ``--storage``), a sample, a test converting both ways through the
conversion webhook, and with the kind's first added version ``PACKAGE/KIND_conversion.py``,
the converter registry.py registers.

``add-controller --for apps/v1/Deployment`` adds a controller of a kind the project does
not define — a built-in kind, or another team's custom resource
(``--for cert-manager.io/v1/Certificate``): ``PACKAGE/KIND_controller.py``, its test (one
reconcile against the real API server; for another team's kind, with a stand-in CRD the
test installs) and, through the regenerated manifests, exactly its RBAC; no CRD.

``add-kind``, ``add-version``, ``add-controller`` and ``add-webhook`` (run in the project,
or give ``--dir``) write new files only, rewrite ``PACKAGE/registry.py`` and ``PROJECT``
(`operator_kit.new.scaffold` says how a hand edit there is refused rather than lost), and
regenerate ``config/base``. They refuse, with one line and exit code 2 and nothing
written, a folder that is not such a project, a kind that exists (or is missing), a
version the kind has or that is no Kubernetes version name, a webhook a kind has.

operator_kit is not on the package index yet, so the image and CI install it from a wheel
or a path: the Makefile's ``OPERATOR_KIT`` defaults to where this operator_kit was
installed from (its PEP 610 ``direct_url.json``: a checkout, a wheel, a VCS URL) and
``make wheels`` runs ``pip wheel`` of it into ``wheels/``, which the Dockerfile's builder
stage finds with ``--find-links``.

The files written are package data, one plain template per file under ``templates/``
(`FILES`, `KIND_FILES` and `WEBHOOK_FILES` map each written path to its template, no
template being a dotfile): what a user gets is what they read there. ``{{name}}``-style
placeholders are filled in; nothing else in a template is special.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from operator_kit.new.scaffold import (
    CONTROLLER_FILES,
    CONVERSION_FILES,
    FILES,
    KIND_FILES,
    VERSION_FILES,
    WEBHOOK_FILES,
    Project,
    ScaffoldError,
    add_controller,
    add_kind,
    add_version,
    add_webhook,
    generate,
    read_template,
    registry_source,
    render,
)
from operator_kit.new.source import compatible_requirement, operator_kit_source, source_of

__all__ = ["CONTROLLER_FILES", "CONVERSION_FILES", "FILES", "KIND_FILES", "VERSION_FILES",
           "WEBHOOK_FILES", "Project", "ScaffoldError", "add_controller", "add_kind",
           "add_version", "add_webhook",
           "compatible_requirement", "generate", "main", "operator_kit_source",
           "read_template", "registry_source", "render", "source_of"]

PROG = "python -m operator_kit.new"
COMMANDS = ("add-kind", "add-version", "add-controller", "add-webhook")


def _webhook_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--validate", action="store_true",
                        help="a validating webhook (KIND_validation.py)")
    parser.add_argument("--mutate", action="store_true",
                        help="a mutating (defaulting) webhook (KIND_defaulting.py)")
    parser.add_argument("--dir", default=".", help="the project (default: the current folder)")


def _hooks(args: argparse.Namespace) -> tuple[str, ...]:
    return tuple(hook for hook in ("validate", "mutate") if getattr(args, hook))


def _parse(argv: list[str]) -> tuple[str, argparse.Namespace]:
    if argv and argv[0] in COMMANDS:
        command, rest = argv[0], argv[1:]
        parser = argparse.ArgumentParser(prog=f"{PROG} {command}")
        if command == "add-kind":
            parser.description = ("Add a kind to the project: its custom resource and "
                                  "controller, their test and a sample, registered with the "
                                  "Operator; the manifests are regenerated.")
            parser.add_argument("kind", metavar="KIND", help="CamelCase, e.g. Gizmo")
            parser.add_argument("--group", help="its API group (default: the project's)")
            parser.add_argument("--version", default="v1", help="its API version (default v1)")
        elif command == "add-controller":
            parser.description = ("Add a controller of a kind the project does not define "
                                  "(a built-in kind, another team's custom resource): the "
                                  "controller and its test; the manifests (its RBAC, no CRD) "
                                  "are regenerated.")
            parser.add_argument("--for", dest="for_kind", required=True, metavar="KIND",
                                help="group/version/Kind, e.g. apps/v1/Deployment, "
                                "v1/Namespace or cert-manager.io/v1/Certificate")
            parser.add_argument("--dir", default=".",
                                help="the project (default: the current folder)")
            return command, parser.parse_args(rest)
        elif command == "add-version":
            parser.description = ("Add an API version to a kind of the project: its class, a "
                                  "sample and a test converting both ways, and the kind's "
                                  "conversion webhook; the manifests are regenerated.")
            parser.add_argument("kind", metavar="KIND", help="a kind of the project")
            parser.add_argument("--version", required=True,
                                help="the new version, e.g. v2 or v1beta1")
            parser.add_argument("--storage", action="store_true",
                                help="store this version in etcd (default: the first one)")
            parser.add_argument("--dir", default=".",
                                help="the project (default: the current folder)")
            return command, parser.parse_args(rest)
        else:
            parser.description = ("Add a validating and/or mutating webhook to a kind of the "
                                  "project, registered with the Operator; the manifests are "
                                  "regenerated.")
            parser.add_argument("kind", metavar="KIND", help="a kind of the project")
        _webhook_flags(parser)
        return command, parser.parse_args(rest)
    parser = argparse.ArgumentParser(
        prog=PROG, description="Start a new operator project.",
        epilog=f"then, in the project: {PROG} add-kind KIND [--validate] [--mutate]; "
        f"{PROG} add-webhook KIND --validate --mutate; {PROG} add-version KIND --version v2 "
        "(see --help of each)")
    parser.add_argument("name", help="project name, e.g. my-operator")
    parser.add_argument("--group", required=True, help="API group, e.g. my.example.com")
    parser.add_argument("--kind", required=True, help="the custom resource's kind, e.g. Widget")
    parser.add_argument("--dir", help="where to write it (default: ./NAME)")
    return "new", parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """The command line: write the files, list them; 2 on a bad argument or a refusal, 1
    when the manifests cannot be regenerated."""
    command, args = _parse(sys.argv[1:] if argv is None else argv)
    try:
        if command == "add-kind":
            written = add_kind(Path(args.dir), args.kind, group=args.group,
                               version=args.version, webhooks=_hooks(args))
        elif command == "add-version":
            written = add_version(Path(args.dir), args.kind, args.version,
                                  storage=args.storage)
        elif command == "add-controller":
            written = add_controller(Path(args.dir), args.for_kind)
        elif command == "add-webhook":
            written = add_webhook(Path(args.dir), args.kind, _hooks(args))
        else:
            directory = Path(args.dir or args.name)
            written = generate(args.name, args.group, args.kind, directory)
    except ScaffoldError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except RuntimeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    for path in written:
        print(f"wrote {path}")
    if command == "new":
        print(f"\nnext: cd {directory} && pip install -e '.[test]' && make test lint")
    else:
        print("\nnext: make test lint")
    return 0
