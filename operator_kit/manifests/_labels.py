"""The recommended ``app.kubernetes.io/*`` labels, on every document of an operator.

`RecommendedLabels` holds what is the same for all of an operator's documents (name,
instance, version, part-of, managed-by); `labelled` puts them, with the component the
document belongs to (`component_of`), on a document and on a Deployment's pod template.
Selectors are left alone: they keep selecting by ``app.kubernetes.io/name`` only, so a new
version (or instance label) never changes a Deployment's immutable selector.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

__all__ = ["RecommendedLabels", "component_of", "labelled", "version_of_image"]

# Kubernetes' label value syntax: at most 63 characters.
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

# The component each kind of document belongs to (also the kustomize base's file).
_COMPONENTS = {
    "Namespace": "namespace",
    "CustomResourceDefinition": "crd",
    "ServiceAccount": "rbac", "ClusterRole": "rbac", "ClusterRoleBinding": "rbac",
    "Role": "rbac", "RoleBinding": "rbac",
    "Service": "operator", "Deployment": "operator", "PodDisruptionBudget": "operator",
    "ValidatingWebhookConfiguration": "webhook", "MutatingWebhookConfiguration": "webhook",
    "ValidatingAdmissionPolicy": "rbac", "ValidatingAdmissionPolicyBinding": "rbac",
}


def component_of(doc: dict[str, Any]) -> str:
    """``app.kubernetes.io/component`` of a document: the one it is labelled with (the
    metrics Service and ServiceMonitor: metrics), else by its kind: namespace, crd, rbac,
    operator or webhook (other kinds: operator)."""
    own = ((doc.get("metadata") or {}).get("labels") or {}).get("app.kubernetes.io/component")
    return str(own) if own else _COMPONENTS.get(str(doc.get("kind")), "operator")


def version_of_image(image: str) -> str | None:
    """The tag of an image reference (``example.com/op:0.1.0`` -> ``0.1.0``), or None when
    it has none that is a valid label value (no tag, or a digest)."""
    if "@" in image:
        return None
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return None
    tag = last.rsplit(":", 1)[1]
    return tag if _VALUE.match(tag) and len(tag) <= 63 else None


@dataclass(frozen=True)
class RecommendedLabels:
    """The labels Kubernetes recommends, for one operator's documents."""

    name: str
    instance: str
    version: str | None = None
    part_of: str | None = None
    managed_by: str = "operator-kit"

    def __post_init__(self) -> None:
        for label, value in (("name", self.name), ("instance", self.instance),
                             ("version", self.version), ("part-of", self.part_of),
                             ("managed-by", self.managed_by)):
            if value is not None and not (len(value) <= 63 and _VALUE.match(value)):
                raise ValueError(
                    f"app.kubernetes.io/{label} {value!r} is not a valid label value: use at "
                    "most 63 letters, digits, '-', '_' or '.', beginning and ending with a "
                    "letter or digit")

    def for_component(self, component: str) -> dict[str, str]:
        """The six labels for a document of `component`, in the recommended order (the
        version left out when there is none)."""
        labels = {"app.kubernetes.io/name": self.name,
                  "app.kubernetes.io/instance": self.instance}
        if self.version is not None:
            labels["app.kubernetes.io/version"] = self.version
        labels["app.kubernetes.io/component"] = component
        labels["app.kubernetes.io/part-of"] = self.part_of or self.name
        labels["app.kubernetes.io/managed-by"] = self.managed_by
        return labels


def labelled(doc: dict[str, Any], labels: RecommendedLabels) -> dict[str, Any]:
    """A copy of `doc` with the recommended labels (its own labels kept, after them), on a
    Deployment's pod template too."""
    out = copy.deepcopy(doc)
    recommended = labels.for_component(component_of(doc))
    metadata = out.setdefault("metadata", {})
    metadata["labels"] = {**recommended, **metadata.get("labels", {})}
    if out.get("kind") == "Deployment":
        template = out["spec"]["template"].setdefault("metadata", {})
        template["labels"] = {**recommended, **template.get("labels", {})}
    return out
