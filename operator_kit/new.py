"""``python -m operator_kit.new NAME --group GROUP --kind KIND``: start a new operator project.

Writes a project whose own tests pass at once against a real cluster::

    NAME/
      pyproject.toml      the package, depending on operator_kit
      README.md           how to run, test, and deploy it
      Dockerfile          an image that runs it under gunicorn, as a non-root user
      PACKAGE/__init__.py the custom resource, its controller, its webhooks, the Operator
      PACKAGE/__main__.py ``python -m PACKAGE`` runs it; ``--manifests`` prints its YAML
      tests/              the controller against a real API server, the webhooks, manifests

The templates below are the whole generator: what a user gets is what they read here.
"""

from __future__ import annotations

import argparse
import keyword
import re
import sys
from pathlib import Path
from string import Template

from operator_kit.rbac import guess_plural
from operator_kit.resources import _GROUP

PACKAGE_INIT = '''\
"""$name: $kind resources ($group) become ConfigMaps.

Start here: `${kind}Spec` is what users write, `${kind}Controller.reconcile` makes the
cluster match it, and the webhooks check and default it before it is stored.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dataclasses_json import config
from operator_kit import Action, Context, Controller, CustomResource, LeaderElection, Operator
from operator_kit.webhooks import AdmissionRequest, Denied


@dataclass
class ${kind}Spec:
    """What a $kind asks for."""

    message: str = field(default="hello", metadata={"description": "What to write"})
    replicas: int = 1


@dataclass
class ${kind}Status:
    """What the operator last did."""

    observed_generation: int | None = field(
        default=None, metadata=config(field_name="observedGeneration"))


class $kind(CustomResource):
    """A $kind, reconciled into a ConfigMap of the same name."""

    group = "$group"
    version = "v1"
    kind = "$kind"
    plural = "$plural"
    spec: ${kind}Spec
    status: ${kind}Status


class ${kind}Controller(Controller[$kind]):
    resource = $kind
    owns = ("v1/ConfigMap",)

    def reconcile(self, obj: $kind, ctx: Context) -> Action:
        ctx.apply_owned(obj, {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": obj.name},
            "data": {"message": obj.spec.message, "replicas": str(obj.spec.replicas)},
        })
        ctx.patch_status(obj, ${kind}Status(observed_generation=obj.generation))
        return Action.await_change()


operator = Operator("$name", [${kind}Controller()],
                    leader_election=LeaderElection(lease_name="$name"))


@operator.webhooks.validate($kind, "/validate-$singular")
def validate(request: AdmissionRequest[$kind]) -> None:
    obj = request.object
    if obj is not None and not obj.spec.message.strip():
        raise Denied("spec.message must not be empty")
    if obj is not None and obj.spec.replicas < 0:
        raise Denied("spec.replicas must be 0 or more")


@operator.webhooks.mutate($kind, "/mutate-$singular")
def default(obj: $kind, request: AdmissionRequest[$kind]) -> $kind:
    obj.labels.setdefault("app.kubernetes.io/managed-by", "$name")
    return obj
'''

PACKAGE_MAIN = '''\
"""``python -m $package``: run the operator; ``--manifests`` prints its manifests."""

import sys

from $package import operator

sys.exit(operator.main())
'''

TESTS = '''\
"""The operator against a real API server (OPERATOR_KIT_TEST_KUBECONFIG), and its webhooks."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from operator_kit import Operator
from operator_kit.testing import Namespace, TestCluster, eventually, running

from $package import $kind, ${kind}Controller, ${kind}Spec, operator


@pytest.fixture(scope="module")
def running_operator(cluster: TestCluster) -> Iterator[Operator]:
    cluster.install_crd($kind)
    with running(Operator("$name", [${kind}Controller()]), cluster) as op:
        yield op


@pytest.mark.usefixtures("running_operator")
def test_${singular}_is_reconciled_into_a_config_map(namespace: Namespace) -> None:
    body = $kind("first", ${kind}Spec(message="hi", replicas=2), namespace=namespace.name)
    path = f"/apis/{$kind.api_version()}/namespaces/{namespace.name}/{$kind.plural}"
    namespace.api.request("POST", path, body=body.to_dict())
    cm = eventually(30, lambda: namespace.get("v1", "ConfigMap", "first"))
    assert cm["data"] == {"message": "hi", "replicas": "2"}
    assert cm["metadata"]["ownerReferences"][0]["kind"] == "$kind"
    def status() -> Any:
        return (namespace.get($kind.api_version(), $kind.kind, "first") or {}).get("status")

    assert eventually(30, status)["observedGeneration"] == 1


def review(obj: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "1", "kind": {"group": "$group", "version": "v1", "kind": "$kind"},
        "resource": {"group": "$group", "version": "v1", "resource": "$plural"},
        "operation": "CREATE", "name": "x", "namespace": "default", "object": obj,
        "userInfo": {"username": "test"}}}


def test_validating_webhook_denies_an_empty_message() -> None:
    obj = $kind("x", ${kind}Spec(message=" "), namespace="default").to_dict()
    answer = operator.webhooks.test_client().post("/validate-$singular", json=review(obj))
    response = answer.get_json()["response"]
    assert response["allowed"] is False
    assert response["status"]["message"] == "spec.message must not be empty"


def test_mutating_webhook_labels_the_object() -> None:
    obj = $kind("x", ${kind}Spec(), namespace="default").to_dict()
    answer = operator.webhooks.test_client().post("/mutate-$singular", json=review(obj))
    patch = json.loads(base64.b64decode(answer.get_json()["response"]["patch"]))
    assert {"op": "add", "path": "/metadata/labels",
            "value": {"app.kubernetes.io/managed-by": "$name"}} in patch


def test_manifests_are_generated_from_the_code() -> None:
    out = subprocess.run([sys.executable, "-m", "$package", "--manifests"],
                         capture_output=True, text=True, check=True).stdout
    kinds = [doc["kind"] for doc in yaml.safe_load_all(out)]
    assert kinds[:2] == ["Namespace", "CustomResourceDefinition"]
    assert {"ClusterRole", "Deployment", "ValidatingWebhookConfiguration"} <= set(kinds)
'''

PYPROJECT = '''\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "$name"
version = "0.1.0"
requires-python = ">=3.10"
dependencies = ["operator_kit"]

[project.optional-dependencies]
test = ["pytest"]

[tool.setuptools]
packages = ["$package"]

[tool.pytest.ini_options]
testpaths = ["tests"]

[tool.ruff]
line-length = 100

[tool.ruff.lint]
select = ["E", "F", "W", "I", "B", "UP"]

[tool.ruff.lint.isort]
known-first-party = ["$package"]
'''

DOCKERFILE = '''\
FROM python:3.11-slim
RUN useradd --uid 65532 --no-create-home operator
WORKDIR /app
COPY . /app
RUN pip install --no-cache-dir /app
USER 65532
EXPOSE 8443
# Webhooks, /livez, /readyz and /metrics on one TLS port; the controllers run in the worker.
ENV OPERATOR_KIT_APP=$package:operator
CMD ["gunicorn", "-c", "python:operator_kit.gunicorn_conf", "operator_kit.webhooks:app"]
'''

README = '''\
# $name

An operator for `$kind` resources (`$group/v1`), built with operator_kit.

```sh
pip install -e '.[test]'
export OPERATOR_KIT_TEST_KUBECONFIG=$$(python -m operator_kit.localcluster up)
python -m pytest                           # the tests, against a real API server

KUBECONFIG=$$OPERATOR_KIT_TEST_KUBECONFIG python -m $package   # run it locally
python -m $package --manifests --namespace $name --image IMAGE | kubectl apply -f -
docker build -t IMAGE .                    # the image those manifests run
```

Edit `$package/__init__.py`: the spec, `reconcile`, the webhooks. Add
`finalizer = "$group/cleanup"` and a `cleanup` method to the controller to undo work
outside the cluster before an object goes.
'''

FILES = {
    "pyproject.toml": PYPROJECT,
    "README.md": README,
    "Dockerfile": DOCKERFILE,
    "$package/__init__.py": PACKAGE_INIT,
    "$package/__main__.py": PACKAGE_MAIN,
    "tests/test_$package.py": TESTS,
}


def generate(name: str, group: str, kind: str, directory: Path) -> list[Path]:
    """Write the project for `name` into `directory`; the files written."""
    if not re.fullmatch(r"[a-z][a-z0-9-]*[a-z0-9]", name):
        raise ValueError(f"project name {name!r} must be lower-case letters, digits and "
                         "dashes, e.g. my-operator")
    if not _GROUP.fullmatch(group):  # what CustomResource itself accepts
        raise ValueError(f"group {group!r} must be a DNS name with a dot, e.g. my.example.com")
    if not re.fullmatch(r"[A-Z][A-Za-z0-9]*", kind) or keyword.iskeyword(kind):
        raise ValueError(f"kind {kind!r} must be CamelCase, e.g. Widget")
    if directory.exists() and any(directory.iterdir()):
        raise FileExistsError(f"{directory} exists and is not empty; choose another --dir")
    values = {"name": name, "package": name.replace("-", "_"), "group": group, "kind": kind,
              "plural": guess_plural(kind), "singular": kind.lower()}
    written = []
    for path_template, text in FILES.items():
        path = directory / Template(path_template).substitute(values)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(Template(text).substitute(values))
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
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
    print(f"\nnext: cd {directory} && pip install -e '.[test]' && python -m pytest")
    return 0


if __name__ == "__main__":
    sys.exit(main())
