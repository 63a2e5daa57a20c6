"""Manifests written from the code, so they never drift from it.

- `crd(Kind)`: the CustomResourceDefinition from a `CustomResource` type (every version
  it has, the status subresource, printer columns); `with_conversion_webhook` points its
  conversion at the operator's webhook server.
- `Rbac(name, namespace).rules(...).documents()`: ServiceAccount, ClusterRole (rules
  merged per resource) and ClusterRoleBinding; `.leader_election()` adds the Lease Role.
- `webhook_configuration(name, mutating, target, rules, fail_closed)` with
  `WebhookTarget` and `WebhookRule`: Validating/MutatingWebhookConfigurations.
- `to_yaml(docs)`: a deterministic YAML stream; `kustomize_base(docs)` /
  `write_kustomize_base(dir, docs)`: the same documents as a kustomize base;
  `helm_chart(operator, app=...)` / `write_helm_chart(dir, operator, app=...)`: as a Helm
  chart, its values (image, replicas, namespace, resources, certificate mode) put in.
- `RecommendedLabels`: the ``app.kubernetes.io/*`` labels every document carries.

``python -m operator_kit.manifests MODULE:ATTR`` prints everything an operator needs, as
`operator_manifests(operator, ...)` returns it; with ``--fleet-member``, what each member
cluster of its fleet needs, as `fleet_member_manifests(operator, ...)` returns it.
"""

from operator_kit.manifests._crd import crd, with_conversion_webhook
from operator_kit.manifests._deploy import operator_manifests
from operator_kit.manifests._fleet import fleet_member_manifests
from operator_kit.manifests._helm import helm_chart, write_helm_chart
from operator_kit.manifests._kustomize import kustomize_base, write_kustomize_base
from operator_kit.manifests._labels import RecommendedLabels
from operator_kit.manifests._rbac import LEASE_RULE, Rbac
from operator_kit.manifests._webhooks import (
    WebhookRule,
    WebhookTarget,
    webhook_configuration,
    webhook_name,
)
from operator_kit.manifests._yaml import to_yaml

__all__ = [
    "LEASE_RULE",
    "Rbac",
    "RecommendedLabels",
    "WebhookRule",
    "WebhookTarget",
    "crd",
    "fleet_member_manifests",
    "helm_chart",
    "kustomize_base",
    "operator_manifests",
    "to_yaml",
    "webhook_configuration",
    "webhook_name",
    "with_conversion_webhook",
    "write_helm_chart",
    "write_kustomize_base",
]
