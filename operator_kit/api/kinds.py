"""Naming a kind: one `Kind` for the three ways users write one.

Everywhere a kind is asked for (``owns``, ``watches``, ``indexes``, ``ctx.get``,
``ctx.list``, ``ctx.create`` …) it may be given as

- a `CustomResource` class: ``Backup`` (reads return ``Backup`` instances);
- a ``"group/version/Kind"`` string: ``"batch/v1/Job"``, or ``"v1/ConfigMap"`` for the
  core group (reads return the API's dicts);
- a kubernetes client model class: ``kubernetes.client.V1ConfigMap`` (reads return
  instances of that model). Its group is looked up in a table of the built-in kinds;
  a kind the table does not know must be written as a string.

`Kind.of` turns any of them into a `Kind`: apiVersion, kind and plural, enough to name
RBAC rules without a cluster. The REST endpoint (and whether the kind is namespaced) is
found by discovery when the operator starts (`operator_kit.client.Api.resource_for`).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any, Union

from operator_kit.api.rbac import guess_plural
from operator_kit.api.resources import CustomResource

KindSpec = Union[str, "Kind", type[CustomResource], type]
"""What users may write for a kind: see the module docstring."""

# The group of each built-in kind a client model class may name (``V1CronJob`` says its
# version and kind, not its group). Where two groups serve a kind (Event: core and
# events.k8s.io), the core group's is listed: write the other as a string.
_BUILT_IN_GROUPS: dict[str, str] = {
    **dict.fromkeys((
        "Binding", "ComponentStatus", "ConfigMap", "Endpoints", "Event", "LimitRange",
        "Namespace", "Node", "PersistentVolume", "PersistentVolumeClaim", "Pod",
        "PodTemplate", "ReplicationController", "ResourceQuota", "Secret", "Service",
        "ServiceAccount"), ""),
    **dict.fromkeys(("ControllerRevision", "DaemonSet", "Deployment", "ReplicaSet",
                     "StatefulSet"), "apps"),
    **dict.fromkeys(("CronJob", "Job"), "batch"),
    **dict.fromkeys(("Ingress", "IngressClass", "NetworkPolicy"), "networking.k8s.io"),
    **dict.fromkeys(("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"),
                    "rbac.authorization.k8s.io"),
    **dict.fromkeys(("CSIDriver", "CSINode", "CSIStorageCapacity", "StorageClass",
                     "VolumeAttachment"), "storage.k8s.io"),
    **dict.fromkeys(("MutatingWebhookConfiguration", "ValidatingAdmissionPolicy",
                     "ValidatingAdmissionPolicyBinding", "ValidatingWebhookConfiguration"),
                    "admissionregistration.k8s.io"),
    "CertificateSigningRequest": "certificates.k8s.io",
    "CustomResourceDefinition": "apiextensions.k8s.io",
    "EndpointSlice": "discovery.k8s.io",
    "HorizontalPodAutoscaler": "autoscaling",
    "Lease": "coordination.k8s.io",
    "PodDisruptionBudget": "policy",
    "PriorityClass": "scheduling.k8s.io",
    "RuntimeClass": "node.k8s.io",
}
# The built-in kinds that are cluster-scoped (every other built-in kind is namespaced).
_CLUSTER_SCOPED = frozenset((
    "ClusterRole", "ClusterRoleBinding", "ComponentStatus", "CSIDriver", "CSINode",
    "CertificateSigningRequest", "CustomResourceDefinition", "IngressClass",
    "MutatingWebhookConfiguration", "Namespace", "Node", "PersistentVolume", "PriorityClass",
    "RuntimeClass", "StorageClass", "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding", "ValidatingWebhookConfiguration", "VolumeAttachment"))
_BUILT_IN_GROUP_NAMES = frozenset(_BUILT_IN_GROUPS.values())
_MODEL_NAME = re.compile(r"V(?P<version>\d+(?:(?:alpha|beta)\d+)?)(?P<kind>[A-Z][A-Za-z0-9]*)")


@dataclass(frozen=True)
class Kind:
    """An apiVersion and kind: ``Kind("batch/v1", "CronJob")``; see the module docstring.

    `resource` is the CustomResource class or client model class it was made from, if
    any: reads of this kind are decoded into it."""

    api_version: str
    kind: str
    plural: str = ""
    resource: type | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, spec: KindSpec) -> Kind:
        """The `Kind` a user wrote in any of the accepted forms."""
        if isinstance(spec, Kind):
            return spec
        if isinstance(spec, str):
            return _parsed(spec)
        if isinstance(spec, type) and issubclass(spec, CustomResource):
            return cls(spec.api_version(), spec.kind, spec.plural, spec)
        if isinstance(spec, type) and hasattr(spec, "openapi_types"):
            return cls._of_model(spec)
        raise TypeError(f"{spec!r} does not name a kind: give a CustomResource class, a "
                        "'group/version/Kind' string or a kubernetes client model class")

    @classmethod
    def _of_model(cls, model: type) -> Kind:
        match = _MODEL_NAME.fullmatch(model.__name__)
        group = _BUILT_IN_GROUPS.get(match.group("kind")) if match else None
        if match is None or group is None:
            raise ValueError(f"cannot tell the API group of {model.__name__}: write the kind "
                             "as a 'group/version/Kind' string instead")
        version = match.group("version").lower()
        api_version = f"{group}/v{version}" if group else f"v{version}"
        return cls(api_version, match.group("kind"), resource=model)

    @property
    def group(self) -> str:
        """The API group (``""`` for the core group)."""
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        """The API version within the group (``v1``)."""
        return self.api_version.rpartition("/")[2]

    @property
    def resource_name(self) -> str:
        """The plural resource name, as RBAC rules and REST paths spell it."""
        return self.plural or guess_plural(self.kind)

    @property
    def built_in(self) -> bool:
        """Whether Kubernetes itself serves this kind (the core group, a ``*.k8s.io`` group
        or another group of the built-in kinds), not a CustomResourceDefinition."""
        group = self.group
        return (group == "" or group.endswith(".k8s.io") or group in _BUILT_IN_GROUP_NAMES
                ) and self.custom_resource is None

    @property
    def defined_here(self) -> bool:
        """Whether the operator defines this kind: a `CustomResource` class whose CRD its
        manifests hold (not one declared ``external = True``, installed by another party)."""
        return self.defined_resource is not None

    @property
    def defined_resource(self) -> type[CustomResource] | None:
        """The `CustomResource` class when the operator defines this kind (see
        `defined_here`), else None."""
        custom = self.custom_resource
        return custom if custom is not None and not custom.external else None

    @property
    def namespaced(self) -> bool | None:
        """Whether objects of this kind live in namespaces, when that is known without a
        cluster (a CustomResource class, a built-in kind); None for another party's kind
        named by a string, whose scope discovery tells when the operator starts."""
        custom = self.custom_resource
        if custom is not None:
            return bool(custom.namespaced)
        if self.built_in and _BUILT_IN_GROUPS.get(self.kind) == self.group:
            return self.kind not in _CLUSTER_SCOPED
        return None

    @property
    def custom_resource(self) -> type[CustomResource] | None:
        """The `CustomResource` class when this kind was given as one, else None."""
        resource = self.resource
        return resource if isinstance(resource, type) and issubclass(
            resource, CustomResource) else None

    def matches(self, obj: dict[str, Any]) -> bool:
        """Whether `obj` (a dict from the API) is of this kind."""
        return bool(obj.get("apiVersion") == self.api_version and obj.get("kind") == self.kind)

    def __str__(self) -> str:
        return f"{self.api_version}/{self.kind}"


@functools.lru_cache(maxsize=512)  # the few kinds an operator names, parsed per write
def _parsed(spec: str) -> Kind:
    api_version, _, kind = spec.rpartition("/")
    if not api_version or not kind or api_version.count("/") > 1:
        raise ValueError(f"kind {spec!r} must read 'group/version/Kind', "
                         "e.g. 'batch/v1/CronJob' or 'v1/ConfigMap'")
    return Kind(api_version, kind)
