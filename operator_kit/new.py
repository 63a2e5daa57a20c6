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

The templates below are the whole generator: what a user gets is what they read here.
``{{name}}``-style placeholders are filled in; nothing else in a template is special.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import keyword
import re
import sys
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from operator_kit.api.rbac import guess_plural
from operator_kit.api.resources import _GROUP

PACKAGE_INIT = r'''
"""{{name}}: {{kind}} resources ({{group}}) become ConfigMaps.

Start here: `{{kind}}Spec` is what users write, `{{kind}}Controller.reconcile` makes the
cluster match it, and the webhooks check and default it before it is stored. JSON field
names are camelCase (``configMapName``), as Kubernetes APIs write them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from operator_kit import (
    Action,
    Conditions,
    Context,
    Controller,
    CustomResource,
    LeaderElection,
    Minimum,
    Operator,
    set_condition,
)
from operator_kit.webhooks.server import AdmissionRequest, Denied


@dataclass
class {{kind}}Spec:
    """What a {{kind}} asks for."""

    message: str = field(default="hello", metadata={"description": "What to write"})
    # The API server itself refuses a negative count (the CRD's schema says minimum: 0).
    replicas: Annotated[int, Minimum(0)] = 1


@dataclass
class {{kind}}Status:
    """What the operator last did; ``kubectl wait --for=condition=Ready`` reads it."""

    observed_generation: int | None = None
    config_map_name: str | None = None
    conditions: Conditions = field(default_factory=list)


class {{kind}}(CustomResource):
    """A {{kind}}, reconciled into a ConfigMap of the same name."""

    group = "{{group}}"
    version = "v1"
    kind = "{{kind}}"
    plural = "{{plural}}"
    json_names = "camelCase"
    spec: {{kind}}Spec
    status: {{kind}}Status


class {{kind}}Controller(Controller[{{kind}}]):
    resource = {{kind}}
    owns = ("v1/ConfigMap",)

    def reconcile(self, obj: {{kind}}, ctx: Context) -> Action:
        ctx.apply_owned(obj, {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": obj.name},
            "data": {"message": obj.spec.message, "replicas": str(obj.spec.replicas)},
        })
        status = {{kind}}Status(observed_generation=obj.generation, config_map_name=obj.name,
                              conditions=obj.status.conditions)
        set_condition(status.conditions, "Ready", "True", reason="ConfigMapApplied",
                      message=f"ConfigMap {obj.name} is up to date",
                      observed_generation=obj.generation)
        ctx.patch_status(obj, status)
        return Action.await_change()


operator = Operator("{{name}}", [{{kind}}Controller()],
                    leader_election=LeaderElection(lease_name="{{name}}"))


@operator.webhooks.validate({{kind}}, "/validate-{{singular}}")
def validate(request: AdmissionRequest[{{kind}}]) -> None:
    obj = request.object
    if obj is not None and not obj.spec.message.strip():
        raise Denied("spec.message must not be empty")


@operator.webhooks.mutate({{kind}}, "/mutate-{{singular}}")
def default(obj: {{kind}}, request: AdmissionRequest[{{kind}}]) -> {{kind}}:
    obj.labels.setdefault("app.kubernetes.io/managed-by", "{{name}}")
    return obj
'''

PACKAGE_MAIN = r'''
"""``python -m {{package}}``: run the operator; ``--manifests`` prints its manifests."""

import sys

from {{package}} import operator

sys.exit(operator.main())
'''

TESTS = r'''
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
from kubernetes.client.exceptions import ApiException
from operator_kit import Operator
from operator_kit.testing import Namespace, TestCluster, eventually, running

from {{package}} import {{kind}}, {{kind}}Controller, {{kind}}Spec, operator


@pytest.fixture(scope="module")
def running_operator(cluster: TestCluster) -> Iterator[Operator]:
    cluster.install_crd({{kind}})
    with running(Operator("{{name}}", [{{kind}}Controller()]), cluster) as op:
        yield op


def create(namespace: Namespace, obj: {{kind}}) -> Any:
    path = f"/apis/{ {{kind}}.api_version() }/namespaces/{namespace.name}/{ {{kind}}.plural }"
    return namespace.api.request("POST", path, body=obj.to_dict())


@pytest.mark.usefixtures("running_operator")
def test_{{singular}}_is_reconciled_into_a_config_map(namespace: Namespace) -> None:
    create(namespace, {{kind}}("first", {{kind}}Spec(message="hi", replicas=2),
                             namespace=namespace.name))
    cm: Any = eventually(30, lambda: namespace.get("v1", "ConfigMap", "first"))
    assert cm["data"] == {"message": "hi", "replicas": "2"}
    assert cm["metadata"]["ownerReferences"][0]["kind"] == "{{kind}}"

    def status() -> Any:
        obj = namespace.get({{kind}}.api_version(), {{kind}}.kind, "first") or {}
        return obj.get("status", {}).get("conditions") and obj["status"]

    reported = eventually(30, status)
    assert reported["observedGeneration"] == 1
    assert reported["configMapName"] == "first"  # camelCase JSON names
    [ready] = reported["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "True",
                                                                 "ConfigMapApplied")


@pytest.mark.usefixtures("running_operator")
def test_api_server_refuses_negative_replicas(namespace: Namespace) -> None:
    with pytest.raises(ApiException) as refused:
        create(namespace, {{kind}}("negative", {{kind}}Spec(replicas=-1),
                                 namespace=namespace.name))
    assert refused.value.status == 422
    assert "spec.replicas" in json.loads(refused.value.body or "{}")["message"]


def review(obj: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "1", "kind": {"group": "{{group}}", "version": "v1", "kind": "{{kind}}"},
        "resource": {"group": "{{group}}", "version": "v1", "resource": "{{plural}}"},
        "operation": "CREATE", "name": "x", "namespace": "default", "object": obj,
        "userInfo": {"username": "test"}}}


def test_validating_webhook_denies_an_empty_message() -> None:
    obj = {{kind}}("x", {{kind}}Spec(message=" "), namespace="default").to_dict()
    answer = operator.webhooks.test_client().post("/validate-{{singular}}", json=review(obj))
    response = answer.get_json()["response"]
    assert response["allowed"] is False
    assert response["status"]["message"] == "spec.message must not be empty"


def test_mutating_webhook_labels_the_object() -> None:
    obj = {{kind}}("x", {{kind}}Spec(), namespace="default").to_dict()
    answer = operator.webhooks.test_client().post("/mutate-{{singular}}", json=review(obj))
    patch = json.loads(base64.b64decode(answer.get_json()["response"]["patch"]))
    assert {"op": "add", "path": "/metadata/labels",
            "value": {"app.kubernetes.io/managed-by": "{{name}}"}} in patch


def test_manifests_are_generated_from_the_code() -> None:
    out = subprocess.run([sys.executable, "-m", "{{package}}", "--manifests"],
                         capture_output=True, text=True, check=True).stdout
    docs = list(yaml.safe_load_all(out))
    kinds = [doc["kind"] for doc in docs]
    assert kinds[:2] == ["Namespace", "CustomResourceDefinition"]
    assert {"ClusterRole", "Deployment", "ValidatingWebhookConfiguration"} <= set(kinds)
    [crd] = [doc for doc in docs if doc["kind"] == "CustomResourceDefinition"]
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert "configMapName" in schema["properties"]["status"]["properties"]
'''

TESTS_E2E = r'''
"""End to end: {{name}} as it would be deployed, against a real API server.

`LocalDeployment` applies the generated manifests (CRD, RBAC, webhook configurations)
and runs the replica the Deployment would run as a local gunicorn process, as the
operator's own ServiceAccount; the API server calls its webhooks through the generated
configurations. Everything cluster-wide it created is removed afterwards.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from operator_kit.testing import Namespace, TestCluster, eventually
from operator_kit.testing.deploy import LocalDeployment

from {{package}} import {{kind}}, {{kind}}Spec, operator

PROJECT_DIR = str(Path(__file__).resolve().parents[1])


@pytest.fixture
def deployed(cluster: TestCluster, namespace: Namespace) -> Iterator[LocalDeployment]:
    deployment = LocalDeployment(cluster, operator, app="{{package}}:operator",
                                 namespace=namespace.name, replicas=1,
                                 pythonpath=[PROJECT_DIR])
    deployment.apply()
    try:
        with deployment:
            deployment.start()
            deployment.wait_serving()
            yield deployment
    finally:
        deployment.delete()


def create(ns: Namespace, obj: {{kind}}, *, dry_run: bool = False) -> Any:
    path = f"/apis/{ {{kind}}.api_version() }/namespaces/{ns.name}/{ {{kind}}.plural }"
    return ns.api.request("POST", path, body=obj.to_dict(),
                          query={"dryRun": "All" if dry_run else None})


def ready(ns: Namespace, name: str) -> Any:
    obj = ns.get({{kind}}.api_version(), {{kind}}.kind, name) or {}
    conditions = obj.get("status", {}).get("conditions", [])
    return obj if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions) else None


def test_{{singular}}_end_to_end(deployed: LocalDeployment, namespace: Namespace) -> None:
    try:
        run(namespace)
    except (AssertionError, ApiException) as err:
        raise AssertionError(f"{err}\n--- replicas\n{deployed.logs()[-8000:]}") from None


def run(ns: Namespace) -> None:
    # The API server picks up the webhooks' CA bundle asynchronously: wait until it calls
    # them successfully (a dry run passes both webhooks and stores nothing).
    eventually(30, lambda: create(ns, {{kind}}("probe", {{kind}}Spec(), namespace=ns.name),
                                  dry_run=True),
               message="the API server calls the webhooks over trusted TLS")
    with pytest.raises(ApiException) as refused:
        create(ns, {{kind}}("empty", {{kind}}Spec(message=""), namespace=ns.name))
    assert "spec.message must not be empty" in json.loads(refused.value.body or "{}")["message"]

    create(ns, {{kind}}("greeting", {{kind}}Spec(message="hello"), namespace=ns.name))
    obj = eventually(60, lambda: ready(ns, "greeting"), message="greeting Ready")
    assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "{{name}}"
    config_map = ns.get("v1", "ConfigMap", "greeting")
    assert config_map is not None and config_map["data"]["message"] == "hello"
'''

PYPROJECT = r'''
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "{{name}}"
version = "0.1.0"
requires-python = ">=3.10"
# Not on the package index yet: install it first from a wheel or a checkout (README).
dependencies = ["operator_kit"]

[project.optional-dependencies]
test = ["pytest>=8", "ruff>=0.5", "mypy>=1.10", "types-PyYAML"]

[tool.setuptools]
packages = ["{{package}}"]

[tool.pytest.ini_options]
testpaths = ["tests"]

[tool.ruff]
line-length = 100
target-version = "py310"

[tool.ruff.lint]
select = ["E", "F", "W", "I", "B", "UP"]

[tool.ruff.lint.isort]
known-first-party = ["{{package}}"]

[tool.mypy]
strict = true

# Read as Any: untyped, or (kubernetes' generated client) vast and slow to analyse.
[[tool.mypy.overrides]]
module = ["kubernetes.*", "dataclasses_json.*", "gunicorn.*"]
ignore_missing_imports = true
follow_imports = "skip"

# Checked as an installed package is: its own errors are not this project's (an editable
# operator_kit is read from its checkout, see hack/lint.sh).
[[tool.mypy.overrides]]
module = ["operator_kit", "operator_kit.*"]
follow_imports = "silent"
'''

MAKEFILE = r'''
# {{name}}: `make` lists the targets. Variables: IMG, NAMESPACE, PYTHON, KUBECTL,
# OPERATOR_KIT (what `make wheels` builds operator_kit's wheel from).
IMG ?= {{name}}:latest
NAMESPACE ?= {{name}}
PYTHON ?= python
KUBECTL ?= kubectl
DOCKER ?= docker
# operator_kit is not on the package index yet: a checkout, a wheel or a pip requirement.
OPERATOR_KIT ?= {{operator_kit}}
PACKAGE := {{package}}

.DEFAULT_GOAL := help
.PHONY: help manifests test lint run install uninstall wheels docker-build deploy undeploy

help: ## Show the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

MANIFESTS := $(PYTHON) -m $(PACKAGE) --manifests --namespace $(NAMESPACE) --image $(IMG)

manifests: ## Write config/manifests.yaml (CRD, RBAC, webhooks, Deployment) from the code
	@mkdir -p config
	$(MANIFESTS) > config/manifests.yaml.tmp
	@mv config/manifests.yaml.tmp config/manifests.yaml

test: ## Run the tests against a real API server (see hack/test.sh)
	PYTHON=$(PYTHON) bash hack/test.sh $(PYTEST_ARGS)

lint: ## ruff and mypy --strict
	PYTHON=$(PYTHON) bash hack/lint.sh

run: ## Run the operator here, against the current kubeconfig context (after make install)
	$(PYTHON) -m $(PACKAGE)

install: ## Apply the CRDs to the current kubeconfig context
	$(MANIFESTS) | $(PYTHON) hack/crds.py | $(KUBECTL) apply --server-side -f -

uninstall: ## Delete the CRDs (and every object of them) from the current context
	$(MANIFESTS) | $(PYTHON) hack/crds.py | $(KUBECTL) delete --ignore-not-found -f -

wheels: ## Put operator_kit's wheel into wheels/, for the image
	@mkdir -p wheels
	$(PYTHON) -m pip wheel --quiet --no-deps --wheel-dir wheels "$(OPERATOR_KIT)"

docker-build: wheels ## Build the image IMG
	$(DOCKER) build -t $(IMG) .

deploy: manifests ## Apply the manifests to the current kubeconfig context
	$(KUBECTL) create namespace $(NAMESPACE) --dry-run=client -o yaml | $(KUBECTL) apply -f -
	$(KUBECTL) apply --server-side -f config/manifests.yaml

undeploy: manifests ## Delete what deploy applied
	$(KUBECTL) delete --ignore-not-found -f config/manifests.yaml
'''

TEST_SH = r'''
#!/usr/bin/env bash
# `make test`: the tests against a real Kubernetes API server. Uses the cluster in
# OPERATOR_KIT_TEST_KUBECONFIG when set (kind, k3d, a local plane you started);
# otherwise starts operator_kit's local control plane in a temporary folder (its
# binaries are built once into ~/.cache/operator_kit) and stops it afterwards.
# Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-python}"
export OPERATOR_KIT_TEST_REQUIRE_KUBERNETES=1  # a missing cluster fails; it never skips
if [ -z "${OPERATOR_KIT_TEST_KUBECONFIG:-}" ]; then
  work="$(mktemp -d)"
  stop() { "$python" -m operator_kit.localcluster down --dir "$work/plane" 2>/dev/null || true
           rm -rf "$work"; }
  trap stop EXIT
  OPERATOR_KIT_TEST_KUBECONFIG="$("$python" -m operator_kit.localcluster up --dir "$work/plane")"
  export OPERATOR_KIT_TEST_KUBECONFIG
fi
"$python" -m pytest "$@"
'''

LINT_SH = r'''
#!/usr/bin/env bash
# `make lint`: ruff, then mypy --strict over the package and its tests.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-python}"
"$python" -m ruff check .
# mypy reads installed packages from site-packages; it cannot follow the import hook an
# editable install (pip install -e) leaves there, so it is given an editable
# operator_kit's checkout directly.
source_dir="$("$python" - <<'EOF'
import importlib.metadata, json, urllib.parse
text = importlib.metadata.distribution("operator_kit").read_text("direct_url.json") or "{}"
info = json.loads(text)
editable = info.get("dir_info", {}).get("editable", False)
print(urllib.parse.unquote(urllib.parse.urlparse(info["url"]).path) if editable else "")
EOF
)"
MYPYPATH="$source_dir${MYPYPATH:+:$MYPYPATH}" "$python" -m mypy --strict {{package}} tests
'''

CRDS_PY = r'''
"""Keep only the CustomResourceDefinitions of a manifest stream (`make install`)."""

import sys

import yaml

documents = [doc for doc in yaml.safe_load_all(sys.stdin)
             if doc and doc.get("kind") == "CustomResourceDefinition"]
yaml.safe_dump_all(documents, sys.stdout, sort_keys=False)
'''

DOCKERFILE = r'''
# syntax=docker/dockerfile:1
# `make docker-build` first fills wheels/ with operator_kit's wheel (it is not on the
# package index yet; once it is, an empty wheels/ works too).
ARG PYTHON_IMAGE=python:3.12-slim

# Builder: the operator's wheel, and a wheel of every dependency (operator_kit from wheels/).
FROM ${PYTHON_IMAGE} AS builder
WORKDIR /src
COPY wheels/ wheels/
COPY pyproject.toml README.md ./
COPY {{package}}/ {{package}}/
RUN pip wheel --no-cache-dir --wheel-dir /dist --find-links wheels .

# Runtime: installed from those wheels alone (no index, no build tools), run as non-root.
# Nothing writes below / at run time: bytecode is compiled at install, gunicorn's worker
# files go to /tmp and the certificates to /run/operator-kit/tls (the Deployment mounts
# emptyDirs there), so readOnlyRootFilesystem: true holds.
FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HOME=/tmp
RUN --mount=type=bind,from=builder,source=/dist,target=/dist \
    pip install --no-cache-dir --no-index --find-links /dist {{name}}
USER 65532:65532
EXPOSE 8443
# Webhooks, /livez, /readyz and /metrics on one TLS port; the controllers run in the worker.
ENV OPERATOR_KIT_APP={{package}}:operator
CMD ["gunicorn", "-c", "python:operator_kit.gunicorn_conf", "operator_kit.webhooks:app"]
'''

GITIGNORE = r'''
__pycache__/
*.py[cod]
*.egg-info/
build/
dist/
.venv/
venv/
.pytest_cache/
.mypy_cache/
.ruff_cache/
*.kubeconfig
# operator_kit's wheel, built by `make wheels`
wheels/*.whl
'''

DOCKERIGNORE = r'''
# The image needs pyproject.toml, README.md, the package and wheels/ only.
.git/
.github/
.venv/
venv/
**/__pycache__/
**/*.py[cod]
*.egg-info/
build/
dist/
.pytest_cache/
.mypy_cache/
.ruff_cache/
tests/
config/
hack/
*.kubeconfig
'''

WHEELS_README = r'''
`make wheels` puts operator_kit's wheel here (from the Makefile's OPERATOR_KIT); the
Dockerfile's builder stage installs it from this folder.
'''

CI_WORKFLOW = r'''
name: ci
on:
  push:
    branches: [main]
  pull_request:

env:
  # operator_kit is not on the package index yet: set the repository variable
  # OPERATOR_KIT to a pip requirement for it (a git URL, a wheel's URL).
  OPERATOR_KIT: ${{ vars.OPERATOR_KIT || 'operator_kit' }}

jobs:
  lint:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with:
          python-version: "3.12"
      - run: pip install "$OPERATOR_KIT" -e '.[test]'
      - run: make lint

  test:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with:
          python-version: "3.12"
      # make test starts operator_kit's local control plane; its binaries are built
      # once with Go and kept in ~/.cache/operator_kit.
      - uses: actions/setup-go@v5
        with:
          go-version: "1.26"
      - uses: actions/cache@v4
        with:
          path: ~/.cache/operator_kit
          key: operator-kit-binaries-${{ runner.os }}
      - run: pip install "$OPERATOR_KIT" -e '.[test]'
      - run: make test
'''

README = r'''
# {{name}}

An operator for `{{kind}}` resources (`{{group}}/v1`), built with operator_kit.

## Install

operator_kit is not on the package index yet: install it from a checkout or a wheel
first, then this project with its test extra (pytest, ruff, mypy):

```sh
pip install /path/to/operator_kit          # or: pip install operator_kit-0.1.0-py3-none-any.whl
pip install -e '.[test]'
```

## Develop

```sh
make test       # the tests against a real API server: operator_kit's local control plane,
                # started and stopped for the run, or the cluster in OPERATOR_KIT_TEST_KUBECONFIG
make lint       # ruff check, mypy --strict
make manifests  # config/manifests.yaml from the code (NAMESPACE=..., IMG=...)
make install    # the CRD, into the current kubeconfig context
make run        # the operator, here, against that context
```

Edit `{{package}}/__init__.py`: the spec, `reconcile`, the webhooks. JSON field names are
camelCase (`json_names = "camelCase"`); the status carries the standard `conditions`
(`set_condition` keeps `lastTransitionTime` while a status holds). Add
`finalizer = "{{group}}/cleanup"` and a `cleanup` method to the controller to undo work
outside the cluster before an object goes.

## Build and deploy

```sh
make docker-build IMG=registry.example.com/{{name}}:0.1.0
docker push registry.example.com/{{name}}:0.1.0
make deploy IMG=registry.example.com/{{name}}:0.1.0     # kubectl apply to the current context
make undeploy
```

`make docker-build` runs `make wheels` first: `pip wheel` of `OPERATOR_KIT` into
`wheels/`, where the Dockerfile's builder stage finds it (`--find-links`). `OPERATOR_KIT`
defaults to where the generator's operator_kit came from; point it at a checkout or a
wheel: `make docker-build OPERATOR_KIT=/path/to/operator_kit` (or
`OPERATOR_KIT=dist/operator_kit-0.1.0-py3-none-any.whl`). Once operator_kit is published,
`OPERATOR_KIT=operator_kit` fetches it from the index. The image runs as UID 65532 and
writes nothing outside the Deployment's `/tmp` and TLS volumes (read-only root
filesystem).

CI (`.github/workflows/ci.yml`) runs `make lint` and `make test`; set the repository
variable `OPERATOR_KIT` to a pip requirement for operator_kit (a git URL, a wheel's URL).
'''

FILES = {
    "pyproject.toml": PYPROJECT,
    "README.md": README,
    "Makefile": MAKEFILE,
    "Dockerfile": DOCKERFILE,
    ".gitignore": GITIGNORE,
    ".dockerignore": DOCKERIGNORE,
    ".github/workflows/ci.yml": CI_WORKFLOW,
    "hack/test.sh": TEST_SH,
    "hack/lint.sh": LINT_SH,
    "hack/crds.py": CRDS_PY,
    "wheels/README.md": WHEELS_README,
    "{{package}}/__init__.py": PACKAGE_INIT,
    "{{package}}/__main__.py": PACKAGE_MAIN,
    "tests/test_{{package}}.py": TESTS,
    "tests/test_e2e.py": TESTS_E2E,
}

_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")
_EXECUTABLE = (".sh",)


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
    checkout = Path(__file__).resolve().parents[1]
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
    if not _GROUP.fullmatch(group):  # what CustomResource itself accepts
        raise ValueError(f"group {group!r} must be a DNS name with a dot, e.g. my.example.com")
    if not re.fullmatch(r"[A-Z][A-Za-z0-9]*", kind) or keyword.iskeyword(kind):
        raise ValueError(f"kind {kind!r} must be CamelCase, e.g. Widget")
    if directory.exists() and any(directory.iterdir()):
        raise FileExistsError(f"{directory} exists and is not empty; choose another --dir")
    values = {"name": name, "package": name.replace("-", "_"), "group": group, "kind": kind,
              "plural": guess_plural(kind), "singular": kind.lower(),
              "operator_kit": operator_kit_source()}
    written = []
    for path_template, text in FILES.items():
        path = directory / render(path_template, values)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render(text, values))
        if path.suffix in _EXECUTABLE:
            path.chmod(0o755)
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
    print(f"\nnext: cd {directory} && pip install -e '.[test]' && make test lint")
    return 0


if __name__ == "__main__":
    sys.exit(main())
