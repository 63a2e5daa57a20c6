"""A Helm chart of the same documents as the stream: ``--helm DIR``.

`helm_chart(operator, app=...)` returns the chart's files (path -> text) and
`write_helm_chart(dir, operator, app=...)` writes them:

- ``Chart.yaml``: the operator's name, the chart ``version`` (default: the app version
  when it is SemVer, else 0.1.0), ``appVersion`` (default: the image's tag, else
  ``latest``) and ``kubeVersion`` (the admission policies need 1.30);
- ``values.yaml`` (commented) and ``values.schema.json`` (Helm refuses a value of the wrong
  type, or an unknown one, before rendering): ``namespace``, ``image`` (repository, tag,
  pullPolicy), ``imagePullSecrets``, ``replicas``, ``resources``, ``extraEnv``,
  ``podLabels``, ``podAnnotations``, the scheduling values (``nodeSelector``,
  ``tolerations``, ``affinity``, ``topologySpreadConstraints``, ``priorityClassName``:
  each written into the pod only when set) and, for an operator with
  webhooks, ``certificate`` (``mode: managed`` or ``external`` with ``secret``), and
  ``metrics.secure`` (``--metrics-secure``: the operator's right to create TokenReviews
  and SubjectAccessReviews, the ``<name>-metrics-reader`` ClusterRole in
  ``templates/metrics.yaml``, ``OPERATOR_KIT_METRICS_SECURE`` in the Deployment);
- ``templates/``: ``crds.yaml``, ``rbac.yaml``, ``deployment.yaml``, ``webhooks.yaml`` (one
  per component, as the kustomize base), ``_helpers.tpl`` and ``NOTES.txt``.

The templates are `operator_manifests`'s own documents. Asked with tokens for the
namespace, image, version and names (`_template.Holes`), once for one replica and once for
several, once with the managed certificate and once with a mounted Secret, they differ
only where a value changes them, and `_template.merge` turns exactly those places into
``{{- if }}``: the PodDisruptionBudget and the anti-affinity when ``replicas`` > 1; the
certificate's volume, environment, RBAC rules, self-protection policy and
``cert-manager.io/inject-ca-from`` annotations with ``certificate.mode``; the metrics
authentication's rules, ClusterRole and setting with ``metrics.secure``. So ``helm
template`` with some values renders what ``python -m operator_kit.manifests`` prints with the
same settings, apart from what Helm adds: ``app.kubernetes.io/managed-by: Helm``,
``app.kubernetes.io/instance: <release>``, ``helm.sh/chart``, and the CRDs'
``helm.sh/resource-policy: keep``.

Namespaces: every namespaced document, and every reference to the namespace (the binding's
subject, the webhook and conversion Services, the installation label and the guard
policies' names) is ``.Values.namespace``, by default the release's: ``helm install -n
NS --create-namespace``. The chart writes no Namespace document (Helm would refuse to
install into a namespace it did not create).

CRDs go in ``templates/``, not ``crds/``: Helm installs ``crds/`` once, untemplated, and
never upgrades it, but these carry the release's namespace (the conversion webhook's
Service, the installation label, cert-manager's annotation), and a new version of the kind
must reach the cluster with ``helm upgrade``. They are annotated
``helm.sh/resource-policy: keep``, as Helm treats ``crds/``: ``helm uninstall`` leaves
them, and with them every custom resource, whose finalizers need the operator running.

Values Kubernetes would take but the operator cannot run with fail the render with a
message (``_helpers.tpl``, ``validate``): more than one replica without leader election,
``certificate.mode: external`` without a Secret, ``managed`` for an operator that brings
its own certificate.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from operator_kit.manifests._deploy import operator_manifests
from operator_kit.manifests._labels import component_of
from operator_kit.manifests._template import (
    Block,
    Either,
    Raw,
    Splice,
    When,
    merge_documents,
    render,
)
from operator_kit.manifests._yaml import to_yaml
from operator_kit.webhooks.certificates import ExternalCertificate

if TYPE_CHECKING:
    from operator_kit.operator import Operator

__all__ = ["SEMVER", "helm_chart", "split_image", "write_helm_chart"]

SEMVER = re.compile(r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
                    r"(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?")
"""Semantic Versioning 2 (what Helm requires of a chart's version)."""

# The templates' files, by component (as the kustomize base's), in apply order.
_TEMPLATES = {"crd": "crds.yaml", "rbac": "rbac.yaml", "operator": "deployment.yaml",
              "metrics": "metrics.yaml", "webhook": "webhooks.yaml"}

# Tokens the documents are asked with; none is part of another.
_NAMESPACE = "zzhelmzz-namespace"
_IMAGE = "zzhelmzz-image"
_VERSION = "zzhelmzz-version"
_INSTANCE = "zzhelmzz-instance"
_MANAGED_BY = "zzhelmzz-managedby"
_CHART = "zzhelmzz-chart"
_SECRET = "zzhelmzz-secret"
_CERTIFICATE = "zzhelmzz-certname"
_REPLICAS = "zzhelmzz-replicas"
_PULL_POLICY = "zzhelmzz-pullpolicy"

_SEVERAL = "gt (int .Values.replicas) 1"
_EXTERNAL = 'eq .Values.certificate.mode "external"'
_METRICS_SECURE = ".Values.metrics.secure"


def split_image(image: str) -> tuple[str, str]:
    """(repository, tag) of an image reference; the tag is ``sha256:...`` for a digest
    and empty when there is none (``registry:5000/op`` -> ``registry:5000/op``, '')."""
    if "@" in image:
        repository, digest = image.split("@", 1)
        return repository, digest
    head, _, last = image.rpartition("/")
    if ":" in last:
        name, tag = last.rsplit(":", 1)
        return (f"{head}/{name}" if head else name), tag
    return image, ""


def _holes(name: str) -> dict[str, str]:
    return {_NAMESPACE: f'include "{name}.namespace" .', _IMAGE: f'include "{name}.image" .',
            _VERSION: ".Chart.AppVersion", _INSTANCE: ".Release.Name",
            _MANAGED_BY: ".Release.Service", _CHART: f'include "{name}.chart" .',
            _SECRET: ".Values.certificate.secret",
            _CERTIFICATE: ".Values.certificate.certificateName | default "
                          ".Values.certificate.secret",
            _REPLICAS: ".Values.replicas", _PULL_POLICY: ".Values.image.pullPolicy",
            _PRIORITY: ".Values.priorityClassName"}


def _go_dict(values: Mapping[str, str], holes: Mapping[str, str]) -> str:
    """A template ``dict`` expression of `values`, a value that is a token its action."""
    pairs = []
    for key, value in values.items():
        action = holes.get(value)
        if action is None and any(token in value for token in holes):
            raise ValueError(f"{key}: {value!r} holds a token among other text")
        pairs += [json.dumps(key), f"({action})" if action else json.dumps(value)]
    return f"(dict {' '.join(pairs)})"


# The pod's scheduling values, each written only when set, after these keys of the pod.
_POD_VALUES = {"serviceAccountName": ("imagePullSecrets", "priorityClassName"),
               "terminationGracePeriodSeconds": ("nodeSelector", "tolerations",
                                                 "topologySpreadConstraints")}
_PRIORITY = "zzhelmzz-priority"


def _prepared(doc: dict[str, Any], holes: Mapping[str, str]) -> dict[str, Any]:
    """A document with Helm's labels and the values that are not text put in."""
    metadata = doc["metadata"]
    metadata["labels"] = {**metadata["labels"], "app.kubernetes.io/managed-by": _MANAGED_BY,
                          "helm.sh/chart": _CHART}
    if doc["kind"] == "CustomResourceDefinition":
        metadata["annotations"] = {**metadata.get("annotations", {}),
                                   "helm.sh/resource-policy": "keep"}
    if doc["kind"] == "Deployment":
        spec = doc["spec"]
        spec["replicas"] = Raw(_REPLICAS)
        template = spec["template"]
        labels = {**template["metadata"]["labels"], "app.kubernetes.io/managed-by": _MANAGED_BY}
        # podLabels cannot change the generated ones (the selector's among them);
        # podAnnotations may (prometheus.io/*).
        template["metadata"]["labels"] = Block(
            f"(merge (dict) {_go_dict(labels, holes)} .Values.podLabels)")
        annotations = template["metadata"].get("annotations")
        template["metadata"]["annotations"] = (
            Block(f"(merge (dict) .Values.podAnnotations {_go_dict(annotations, holes)})")
            if annotations else When(".Values.podAnnotations", Block(".Values.podAnnotations")))
        pod = template["spec"]
        pod_entries: list[tuple[str, Any]] = []
        for key, value in pod.items():
            pod_entries.append((key, value))
            for name in _POD_VALUES.get(key, ()):
                pod_entries.append((name, When(
                    f".Values.{name}",
                    _PRIORITY if name == "priorityClassName" else Block(f".Values.{name}"))))
        template["spec"] = dict(pod_entries)
        containers = []
        for container in pod["containers"]:
            entries = []
            for key, value in container.items():
                if key == "resources":
                    value = Block(".Values.resources")
                if key == "env":
                    value = [*value, Splice(".Values.extraEnv")]
                entries.append((key, value))
                if key == "image":
                    entries.append(("imagePullPolicy",
                                    When(".Values.image.pullPolicy", _PULL_POLICY)))
            containers.append(dict(entries))
        template["spec"]["containers"] = containers
    return doc


def _with_affinity(tree: list[Any]) -> list[Any]:
    """The Deployment's pod affinity: ``.Values.affinity`` when set, else the generated
    one (the anti-affinity of several replicas), if any."""
    for doc in tree:
        if isinstance(doc, dict) and doc["kind"] == "Deployment":
            pod = doc["spec"]["template"]["spec"]
            given = Block(".Values.affinity")
            entries = list(pod.items())
            if "affinity" in pod:
                pod["affinity"] = Either(".Values.affinity", given, pod["affinity"])
            else:
                at = [k for k, _ in entries].index("containers")
                entries.insert(at, ("affinity", When(".Values.affinity", given)))
                doc["spec"]["template"]["spec"] = dict(entries)
    return tree


def _documents(operator: Operator, app: str, replicas: int,
               certificate: ExternalCertificate | None,
               metrics_secure: bool) -> list[dict[str, Any]]:
    return [_prepared(doc, _holes(operator.name)) for doc in operator_manifests(
        operator, app=app, namespace=_NAMESPACE, image=_IMAGE, replicas=replicas,
        certificate=certificate, namespace_document=False, version=_VERSION,
        instance=_INSTANCE, metrics_secure=metrics_secure)]


def _several_allowed(operator: Operator) -> bool:
    return operator.leader_election is not None or not operator.controllers


def _tree(operator: Operator, app: str) -> list[Any]:
    """The documents, merged over replicas (one or several), certificate modes and
    whether the metrics are secure."""
    def over_replicas(certificate: ExternalCertificate | None, secure: bool) -> list[Any]:
        one = _documents(operator, app, 1, certificate, secure)
        if not _several_allowed(operator):
            return list(one)
        return merge_documents(_SEVERAL, one,
                               _documents(operator, app, 2, certificate, secure))

    def over_certificates(secure: bool) -> list[Any]:
        external = ExternalCertificate(_SECRET, _CERTIFICATE)
        if not operator.webhook_registrations():
            return over_replicas(None, secure)
        if operator.webhook_certificate is not None:  # it brings its own: external only
            return over_replicas(external, secure)
        return merge_documents(_EXTERNAL, over_replicas(None, secure),
                               over_replicas(external, secure))

    return _with_affinity(merge_documents(_METRICS_SECURE, over_certificates(False),
                                          over_certificates(True)))


def _plain_deployment(operator: Operator, replicas: int | None) -> dict[str, Any]:
    """The generator's Deployment with `replicas` (None: its default; refused as the
    generator refuses it, `ValueError`)."""
    docs = operator_manifests(operator, app="", namespace=operator.name, image="x",
                              replicas=replicas, namespace_document=False)
    return next(doc for doc in docs if doc["kind"] == "Deployment")


_HELPERS = """\
{{/* Generated by operator_kit: python -m operator_kit.manifests APP --helm DIR */}}

{{/* The namespace of the namespaced objects: .Values.namespace, else the release's. */}}
{{- define "NAME.namespace" -}}
{{- .Values.namespace | default .Release.Namespace -}}
{{- end }}

{{/* The image: repository, then :tag (default: the chart's appVersion) or @sha256:... */}}
{{- define "NAME.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- $at := ternary "@" ":" (hasPrefix "sha256:" $tag) -}}
{{- printf "%s%s%s" .Values.image.repository $at $tag -}}
{{- end }}

{{/* The helm.sh/chart label. */}}
{{- define "NAME.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end }}

{{/* Values the operator cannot run with (deployment.yaml includes this first). */}}
{{- define "NAME.validate" -}}
CHECKS
{{- end }}
"""

# Each check: a condition, and what `fail` says (a printf format and its arguments).
_SEVERAL_REFUSED = (
    _SEVERAL, '"replicas=%d without leader election: every replica would reconcile the same '
    "objects at once; use replicas: 1, or give Operator 'NAME' "
    'leader_election=LeaderElection()" (int .Values.replicas)')
_NO_SECRET = (
    f"and ({_EXTERNAL}) (not .Values.certificate.secret)",
    '"certificate.mode=external needs certificate.secret: the kubernetes.io/tls Secret '
    "(cert-manager's) in namespace %s that NAME serves its webhooks with\" "
    '(include "NAME.namespace" .)')
_OWN_CERTIFICATE = (
    f"not ({_EXTERNAL})",
    '"NAME brings its own webhook certificate (Operator webhook_certificate='
    'ExternalCertificate(...)): keep certificate.mode: external and set certificate.secret"')


def _helpers(operator: Operator) -> str:
    """_helpers.tpl: the namespace, image and chart label, and the `fail` checks."""
    checks = []
    if not _several_allowed(operator):
        checks.append(_SEVERAL_REFUSED)
    if operator.webhook_registrations():
        checks.append(_NO_SECRET)
        if operator.webhook_certificate is not None:
            checks.append(_OWN_CERTIFICATE)
    lines = "\n".join(f"{{{{- if {condition} }}}}\n{{{{- fail (printf {message}) }}}}\n"
                      "{{- end }}" for condition, message in checks)
    return _HELPERS.replace("CHECKS", lines).replace("NAME", operator.name)


def _values(operator: Operator, *, repository: str, tag: str, namespace: str | None,
            replicas: int, resources: Mapping[str, Any],
            certificate: ExternalCertificate | None, app: str,
            metrics_secure: bool = False) -> str:
    def block(value: Mapping[str, Any]) -> str:
        return to_yaml([value]).removeprefix("---\n").rstrip("\n")

    if operator.sharding is not None:
        why = "3: every replica a member of the shards"
    elif operator.leader_election is not None:
        why = "2: a follower ready to lead. More than 1 needs leader election"
    elif operator.controllers:
        why = ("1: the operator does not elect a leader, so more would reconcile the same "
               "objects at once (refused)")
    else:
        why = "any number: the operator only serves webhooks"
    text = f"""# Values of the {operator.name} chart, generated from {app} by
#   python -m operator_kit.manifests {app} --helm DIR
# Regenerate it rather than editing the templates, and keep your settings in a values
# file of your own (helm install -f).

# The namespace of the operator's objects; empty: the release's (helm install -n NS
# --create-namespace).
namespace: {json.dumps(namespace or "")}

image:
  repository: {json.dumps(repository)}
  # Empty: the chart's appVersion. A digest (sha256:...) pins the image.
  tag: {json.dumps(tag)}
  # Empty: Kubernetes' default (Always for :latest, else IfNotPresent).
  pullPolicy: ""

# Secrets to pull the image with, e.g. [{{name: registry-credentials}}].
imagePullSecrets: []

{_comment(f"How many replicas run; the default {why}.")}
replicas: {replicas}

# The operator's container (requests and limits; ephemeral-storage counts its /tmp).
{block({"resources": dict(resources)})}

# More environment variables of the operator's container, after its own, e.g.
# [{{name: HTTPS_PROXY, value: "http://proxy:3128"}}] (valueFrom works too).
extraEnv: []

# Labels and annotations of the operator's pods. podLabels cannot change the chart's own
# labels (the Deployment selects the pods by them); podAnnotations may change its
# prometheus.io/* annotations.
podLabels: {{}}
podAnnotations: {{}}

# Where the pods run, as in a pod's spec: nodeSelector (e.g. {{kubernetes.io/os: linux}}),
# tolerations (e.g. [{{key: dedicated, operator: Equal, value: operators, effect:
# NoSchedule}}]), affinity (replaces the chart's anti-affinity of several replicas),
# topologySpreadConstraints, and the pods' PriorityClass (e.g. system-cluster-critical).
nodeSelector: {{}}
tolerations: []
affinity: {{}}
topologySpreadConstraints: []
priorityClassName: ""

# secure: /metrics only for bearer tokens the API server allows to get /metrics
#   (TokenReview, SubjectAccessReview; over HTTPS). Bind the ClusterRole
#   {operator.name}-metrics-reader to your Prometheus's ServiceAccount.
metrics:
  secure: {"true" if metrics_secure else "false"}
"""
    if operator.webhook_registrations():
        external = certificate or operator.webhook_certificate
        text += f"""
# The webhooks' serving certificate.
# managed: the operator makes a self-signed CA and certificate, keeps them in the Secret
#   {operator.webhook_secret} and writes the CA into its webhook configurations and CRDs.
# external: it serves the kubernetes.io/tls Secret `secret` (cert-manager's: tls.crt,
#   tls.key, ca.crt), mounted; cert-manager's CA injector fills the caBundles
#   (cert-manager.io/inject-ca-from: <namespace>/<certificateName, default: secret>).
certificate:
  mode: {"external" if external else "managed"}
  secret: {json.dumps(external.secret if external else "")}
  certificateName: {json.dumps((external.certificate or "") if external else "")}
"""
    return text


def _comment(text: str) -> str:
    return textwrap.fill(text, 88, initial_indent="# ", subsequent_indent="# ")


_DNS_LABEL = r"^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)?$"
_DNS_SUBDOMAIN = r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?)?$"


def _string_map(what: str) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": {"type": "string"},
            "description": f"{what} names and their values, all strings"}


def _schema(operator: Operator) -> dict[str, Any]:
    """values.schema.json: the values' types (Helm checks them before rendering)."""
    string = {"type": "string"}
    properties: dict[str, Any] = {
        "global": {"type": "object"},
        "namespace": {"type": "string", "pattern": _DNS_LABEL,
                      "description": "a namespace name, or empty for the release's"},
        "image": {"type": "object", "additionalProperties": False,
                  "required": ["repository"],
                  "properties": {"repository": {"type": "string", "minLength": 1},
                                 "tag": string,
                                 "pullPolicy": {"enum": ["", "Always", "IfNotPresent",
                                                         "Never"]}}},
        "imagePullSecrets": {"type": "array", "items": {
            "type": "object", "required": ["name"], "properties": {"name": string}}},
        "replicas": {"type": "integer", "minimum": 0},
        "resources": {"type": "object", "additionalProperties": False, "properties": {
            "requests": {"type": "object"}, "limits": {"type": "object"},
            "claims": {"type": "array"}}},
        "extraEnv": {"type": "array", "items": {
            "type": "object", "required": ["name"],
            "properties": {"name": {"type": "string", "minLength": 1},
                           "value": string, "valueFrom": {"type": "object"}}}},
        "podLabels": _string_map("label"),
        "podAnnotations": _string_map("annotation"),
        "nodeSelector": _string_map("node label"),
        "tolerations": {"type": "array", "items": {"type": "object", "properties": {
            "key": string, "operator": {"enum": ["Exists", "Equal"]}, "value": string,
            "effect": {"enum": ["", "NoSchedule", "PreferNoSchedule", "NoExecute"]},
            "tolerationSeconds": {"type": "integer"}}}},
        "affinity": {"type": "object", "additionalProperties": False, "properties": {
            kind: {"type": "object"} for kind in ("nodeAffinity", "podAffinity",
                                                  "podAntiAffinity")}},
        "topologySpreadConstraints": {"type": "array", "items": {
            "type": "object", "required": ["maxSkew", "topologyKey", "whenUnsatisfiable"],
            "properties": {"maxSkew": {"type": "integer", "minimum": 1},
                           "topologyKey": string,
                           "whenUnsatisfiable": {"enum": ["DoNotSchedule",
                                                          "ScheduleAnyway"]}}}},
        "priorityClassName": {"type": "string", "pattern": _DNS_SUBDOMAIN},
        "metrics": {"type": "object", "additionalProperties": False,
                    "properties": {"secure": {"type": "boolean"}}},
    }
    if operator.webhook_registrations():
        properties["certificate"] = {
            "type": "object", "additionalProperties": False,
            "properties": {"mode": {"enum": ["managed", "external"]},
                           "secret": {"type": "string", "pattern": _DNS_SUBDOMAIN},
                           "certificateName": {"type": "string", "pattern": _DNS_SUBDOMAIN}}}
    return {"$schema": "https://json-schema.org/draft-07/schema#",
            "title": f"values of the {operator.name} chart", "type": "object",
            "additionalProperties": False, "properties": properties}


_NOTES = """\
NAME {{ .Chart.AppVersion }} is installed in namespace NAMESPACE ({{ .Values.replicas }} replicas).

  kubectl -n NAMESPACE rollout status deployment/NAME
  kubectl -n NAMESPACE logs deployment/NAME
"""

_UNINSTALL = """
To uninstall, delete the custom resources first, while the operator still runs (their
finalizers need it), then the release; the CRDs stay (helm.sh/resource-policy: keep):

  kubectl delete KINDS --all --all-namespaces
  helm uninstall {{ .Release.Name }} -n {{ .Release.Namespace }}
  kubectl delete crd CRDS
"""


def _notes(operator: Operator) -> str:
    """NOTES.txt: where it runs, how to see it, and how to uninstall without a hang."""
    crds = [f"{kind.plural}.{kind.group}" for kind in operator.custom_kinds()]
    text = _NOTES + (_UNINSTALL.replace("KINDS", ",".join(crds)).replace("CRDS", " ".join(crds))
                     if crds else "")
    return text.replace("NAMESPACE", '{{ include "NAME.namespace" . }}').replace(
        "NAME", operator.name)


def helm_chart(operator: Operator, *, app: str, image: str | None = None,
               namespace: str | None = None, replicas: int | None = None,
               certificate: ExternalCertificate | None = None,
               app_version: str | None = None,
               chart_version: str | None = None,
               metrics_secure: bool = False) -> dict[str, str]:
    """The chart's files (path in the chart -> text) for `operator`, imported by its image
    as `app` (``MODULE:ATTR``). The other arguments are the values' defaults, as the
    stream's flags: `image` (default ``<name>:latest``), `namespace` (default: the
    release's), `replicas` (default and refusal as `operator_manifests`), `certificate`
    (an `ExternalCertificate`: ``certificate.mode: external`` by default); `app_version`
    (default: the image's tag, else ``latest``) and `chart_version` (default: the app
    version when it is SemVer, else 0.1.0) go into Chart.yaml; `metrics_secure` is
    ``metrics.secure``'s default."""
    image = image or f"{operator.name}:latest"
    repository, tag = split_image(image)
    app_version = app_version or (tag if tag and not tag.startswith("sha256:") else "latest")
    if chart_version is None:
        chart_version = app_version if SEMVER.fullmatch(app_version) else "0.1.0"
    elif not SEMVER.fullmatch(chart_version):
        raise ValueError(f"chart version {chart_version!r} is not SemVer 2 (MAJOR.MINOR.PATCH, "
                         "e.g. 0.1.0), which Helm requires")
    deployment = _plain_deployment(operator, replicas)
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    chart = {"apiVersion": "v2", "name": operator.name,
             "description": f"{operator.name}: a Kubernetes operator ({app}), generated by "
                            "operator_kit",
             "type": "application", "version": chart_version, "appVersion": app_version,
             "kubeVersion": ">=1.30.0-0"}
    files = {
        "Chart.yaml": yaml.safe_dump(chart, sort_keys=False, width=1000),
        "values.yaml": _values(operator, repository=repository,
                               tag="" if tag == app_version else tag, namespace=namespace,
                               replicas=int(deployment["spec"]["replicas"]),
                               resources=container["resources"], certificate=certificate,
                               app=app, metrics_secure=metrics_secure),
        "values.schema.json": json.dumps(_schema(operator), indent=2) + "\n",
        "templates/_helpers.tpl": _helpers(operator),
        "templates/NOTES.txt": _notes(operator),
    }
    grouped: dict[str, list[Any]] = {name: [] for name in _TEMPLATES.values()}
    for doc in _tree(operator, app):
        inner = doc.value if isinstance(doc, When) else doc
        grouped[_TEMPLATES[component_of(inner)]].append(doc)
    holes = _holes(operator.name)
    for name, docs in grouped.items():
        if docs:
            text = render(docs, holes)
            if name == "deployment.yaml":
                text = f'{{{{- include "{operator.name}.validate" . }}}}\n' + text
            files[f"templates/{name}"] = text
    return files


def write_helm_chart(directory: str | Path, operator: Operator, *, app: str,
                     **values: Any) -> list[Path]:
    """Write `helm_chart` into `directory` (created if needed); returns the files written.
    Templates of components that have no documents now are removed, so a rerun leaves no
    stale one behind."""
    files = helm_chart(operator, app=app, **values)
    target = Path(directory)
    (target / "templates").mkdir(parents=True, exist_ok=True)
    for name in _TEMPLATES.values():
        stale = target / "templates" / name
        if f"templates/{name}" not in files and stale.exists():
            stale.unlink()
    written = []
    for name, text in files.items():
        path = target / name
        path.write_text(text)
        written.append(path)
    return written
