"""One installation of an operator per cluster: finding the other one, and refusing.

An operator's CRDs, ClusterRole, ClusterRoleBinding and webhook configurations are
cluster-scoped and named without a namespace. The CRD is one per kind in the whole
cluster, and its conversion webhook can call one Service only, so two installations of
the same operator (in ``team-a`` and ``team-b``) cannot both be whole: the second one's
manifests would re-point the conversion, the webhooks and the ClusterRoleBinding at
itself, silently taking the first one's permissions away. The rule is therefore **one
installation per cluster**, and it is enforced where it can be:

- ``python -m operator_kit.manifests APP --namespace NS --check`` reads the cluster
  (the current kubeconfig) before printing anything and refuses, one line per object,
  when a webhook configuration, a CRD's conversion webhook or the ClusterRoleBinding
  already points at another namespace (`foreign_owners`);
- at start, and every pass after, the replica's `CertificateKeeper` checks the webhook
  configurations and CRDs whose caBundle it keeps (`foreign_owner`): one that points at
  another namespace is never patched; the replica reports not ready, logs an ERROR and
  posts a Warning Event ``ForeignInstallation`` on it.

A reference is foreign when it names another namespace (or another Service in ours).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kubernetes.client.exceptions import ApiException

from operator_kit.client.transport import Api, error_message

__all__ = ["foreign_owner", "foreign_owners", "references"]

_WEBHOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")


def references(obj: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """What a cluster-scoped object points at: (which field, namespace, name) for each
    webhook's Service, a CRD's conversion Service, a binding's ServiceAccounts."""
    kind = obj.get("kind")
    out: list[tuple[str, str, str]] = []
    if kind in _WEBHOOK_KINDS:
        for hook in obj.get("webhooks") or []:
            service = (hook.get("clientConfig") or {}).get("service")
            if service:
                out.append((f"webhook {hook.get('name')}'s Service",
                            service.get("namespace", ""), service.get("name", "")))
    elif kind == "CustomResourceDefinition":
        webhook = ((obj.get("spec") or {}).get("conversion") or {}).get("webhook") or {}
        service = (webhook.get("clientConfig") or {}).get("service")
        if service:
            out.append(("conversion webhook's Service", service.get("namespace", ""),
                        service.get("name", "")))
    elif kind == "ClusterRoleBinding":
        for subject in obj.get("subjects") or []:
            if subject.get("kind") == "ServiceAccount":
                out.append(("subject ServiceAccount", subject.get("namespace", ""),
                            subject.get("name", "")))
    return out


def foreign_owner(obj: Mapping[str, Any], namespace: str, name: str) -> str | None:
    """Why `obj` belongs to another installation than the one named `name` in
    `namespace` (one line: the object, the other namespace, the fix), or None."""
    for field, other_ns, other in references(obj):
        if (other_ns, other) == (namespace, name):
            continue
        what = f"{obj.get('kind')} {(obj.get('metadata') or {}).get('name')}"
        if other_ns == namespace:
            return (f"{what}: its {field} is {other_ns}/{other}, not {namespace}/{name}; "
                    "fix: delete or rename the other operator that uses these names")
        return (f"{what} belongs to the installation in namespace {other_ns} (its {field} "
                f"is {other_ns}/{other}); one installation per cluster: uninstall that one "
                f"first (python -m operator_kit.manifests APP --namespace {other_ns} "
                f"--uninstall) or use it instead of installing in {namespace}")
    return None


def foreign_owners(api: Api, documents: Iterable[Mapping[str, Any]], namespace: str,
                   name: str) -> list[str]:
    """For each cluster-scoped document that points at a namespace (webhook
    configurations, a CRD with a conversion webhook, the ClusterRoleBinding), whether the
    object of that name in the cluster belongs to another installation: one line each.

    Raises RuntimeError (one line) when the cluster cannot be read."""
    problems = []
    for doc in documents:
        if doc["metadata"].get("namespace") or not references(doc):
            continue
        resource = api.resource_for(doc["apiVersion"], doc["kind"])
        try:
            live = api.get(resource.path(None, doc["metadata"]["name"]))
        except ApiException as err:
            if err.status == 404:
                continue
            raise RuntimeError(f"cannot read {doc['kind']} {doc['metadata']['name']} to "
                               f"check for another installation: {error_message(err)}"
                               ) from None
        problem = foreign_owner(live, namespace, name)
        if problem:
            problems.append(problem)
    return problems
