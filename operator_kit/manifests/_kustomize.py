"""A kustomize base: the same documents as the stream, one file per concern.

`kustomize_base(docs)` returns the files (name -> text) and `write_kustomize_base(dir,
docs)` writes them: ``namespace.yaml``, ``crds.yaml``, ``rbac.yaml``, ``deployment.yaml``
(the Service, the Deployment, its PodDisruptionBudget and NetworkPolicy),
``metrics.yaml`` (with ``--service-monitor``: the metrics Service and the ServiceMonitor)
and ``webhooks.yaml`` — those that have documents — and ``kustomization.yaml``
listing them in apply order.

``kustomizeconfig.yaml`` teaches kustomize the references it does not know of itself, so
that an overlay's ``namePrefix``/``nameSuffix`` keeps every one of them pointing at the
renamed object:

- the CRD's conversion webhook Service (``spec.conversion.webhook.clientConfig.service``);
- the ``resourceNames`` of the ClusterRole rules that let the operator patch the caBundle
  of its webhook configurations;
- the Deployment's environment variables that tell the operator the names of its
  webhook Service and configurations (`operator_kit.settings.NAME_ENV`), so the running
  operator patches and serves under the new names;
- the ServiceMonitor's ``serverName`` (``--service-monitor``): the webhook Service's
  name, which the certificate the operator keeps is issued for too;
- the admission policies (`operator_kit.manifests._guard`): the ``resourceNames`` they
  guard (the webhook configurations, the ClusterRole and its binding) and the
  ServiceAccount their bindings' ``paramRef`` names, which is the identity the policies
  compare requests with.

and an overlay's ``namespace`` the namespaces kustomize does not know of: the bindings'
``paramRef.namespace`` (the ServiceAccount's namespace) and the
``operator-kit.io/installation`` label of the cluster-scoped documents. So the policies
name ``system:serviceaccount:<the overlay's namespace>:<prefix><name><suffix>``, exactly.

kustomize itself already follows the Service in webhook configurations, the
ServiceAccount in the Deployment and the bindings, the Roles in their bindings and each
policy in its binding; it never renames CRDs or the Namespace. The Lease and the
certificate Secret, which the operator creates at run time, keep their names: they live
in its namespace, so give each renamed copy its own namespace (an overlay's
``namespace:``). The policies' own names keep the base's namespace
(``<prefix><operator>-self-protection-<base namespace><suffix>``): two overlays of one
base that differ only in their namespace install the same policies, and the second
rebinds the first's to its own ServiceAccount. Give each its own ``namePrefix`` or
``nameSuffix`` as well (one installation per cluster holds anyway: the installation
policy refuses the second's cluster-scoped documents).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from operator_kit.manifests._guard import INSTALLATION_LABEL
from operator_kit.manifests._labels import component_of
from operator_kit.manifests._yaml import to_yaml

__all__ = ["KUSTOMIZECONFIG", "kustomize_base", "write_kustomize_base"]

# The file of each component, in apply order.
_FILES = {"namespace": "namespace.yaml", "crd": "crds.yaml", "rbac": "rbac.yaml",
          "operator": "deployment.yaml", "metrics": "metrics.yaml",
          "webhook": "webhooks.yaml"}

_ENV_VALUE = {"kind": "Deployment", "group": "apps",
              "path": "spec/template/spec/containers/env/value"}
_RESOURCE_NAMES = {"kind": "ClusterRole", "group": "rbac.authorization.k8s.io",
                   "path": "rules/resourceNames"}
_ADMISSION = "admissionregistration.k8s.io"
_GUARDED_NAMES = {"kind": "ValidatingAdmissionPolicy", "group": _ADMISSION,
                  "path": "spec/matchConstraints/resourceRules/resourceNames"}
_PARAM_REF = {"kind": "ValidatingAdmissionPolicyBinding", "group": _ADMISSION,
              "path": "spec/paramRef/name"}

KUSTOMIZECONFIG: dict[str, Any] = {"nameReference": [
    {"kind": "Service", "version": "v1", "fieldSpecs": [
        {"kind": "CustomResourceDefinition", "group": "apiextensions.k8s.io",
         "path": "spec/conversion/webhook/clientConfig/service/name"},
        _ENV_VALUE,
        {"kind": "ServiceMonitor", "group": "monitoring.coreos.com",
         "path": "spec/endpoints/tlsConfig/serverName"}]},
    {"kind": "ValidatingWebhookConfiguration", "group": _ADMISSION,
     "fieldSpecs": [_RESOURCE_NAMES, _ENV_VALUE, _GUARDED_NAMES]},
    {"kind": "MutatingWebhookConfiguration", "group": _ADMISSION,
     "fieldSpecs": [_RESOURCE_NAMES, _ENV_VALUE, _GUARDED_NAMES]},
    {"kind": "ClusterRole", "group": "rbac.authorization.k8s.io",
     "fieldSpecs": [_GUARDED_NAMES]},
    {"kind": "ClusterRoleBinding", "group": "rbac.authorization.k8s.io",
     "fieldSpecs": [_GUARDED_NAMES]},
    {"kind": "ServiceAccount", "version": "v1", "fieldSpecs": [_PARAM_REF]},
], "namespace": [
    {"kind": "ValidatingAdmissionPolicyBinding", "group": _ADMISSION,
     "path": "spec/paramRef/namespace"},
    # "/" in a label key is escaped for kustomize's paths
    {"path": "metadata/labels/" + INSTALLATION_LABEL.replace("/", "\\/")},
]}
"""The nameReference and namespace entries for the references kustomize does not know of."""


def kustomize_base(docs: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """The files of a kustomize base holding `docs`: name -> YAML text."""
    grouped: dict[str, list[Mapping[str, Any]]] = {name: [] for name in _FILES.values()}
    for doc in docs:
        grouped[_FILES[component_of(dict(doc))]].append(doc)
    files = {name: to_yaml(group) for name, group in grouped.items() if group}
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": list(files),
        "configurations": ["kustomizeconfig.yaml"],
    }
    files["kustomization.yaml"] = to_yaml([kustomization])
    files["kustomizeconfig.yaml"] = to_yaml([KUSTOMIZECONFIG])
    return files


def write_kustomize_base(directory: str | Path, docs: Sequence[Mapping[str, Any]]) -> list[Path]:
    """Write the base into `directory` (created if needed); returns the files written.

    Files of components that have no documents now are removed, so a rerun leaves no
    stale file behind."""
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    files = kustomize_base(docs)
    for name in _FILES.values():
        if name not in files and (target / name).exists():
            (target / name).unlink()
    written = []
    for name, text in files.items():
        path = target / name
        path.write_text(text)
        written.append(path)
    return written
