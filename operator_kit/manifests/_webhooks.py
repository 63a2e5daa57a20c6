"""Validating and mutating webhook configurations, written from the registrations.

A `WebhookTarget` says where the API server reaches the operator's webhook server (a
Service, as in a cluster, and the CA that signed its certificate); a `WebhookRule` says
which kind and operations go to which path. The configuration is written with what the
API server requires and what is safe: ``admissionReviewVersions: [v1]``,
``sideEffects: None``, a timeout, and a failure policy that users choose
(``fail_closed``).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from operator_kit.api.kinds import Kind
from operator_kit.api.resources import CustomResource


@dataclass(frozen=True)
class WebhookTarget:
    """Where the API server sends webhook calls: ``https://<service>.<namespace>.svc:<port>``."""

    service: str
    namespace: str
    port: int = 443
    ca_bundle: bytes | None = None

    def client_config(self, path: str) -> dict[str, Any]:
        """The ``clientConfig`` of a webhook served at `path` of this Service (with the CA bundle
        when known)."""
        config: dict[str, Any] = {"service": {
            "name": self.service, "namespace": self.namespace, "path": path, "port": self.port,
        }}
        if self.ca_bundle:
            config["caBundle"] = base64.b64encode(self.ca_bundle).decode()
        return config


@dataclass(frozen=True)
class WebhookRule:
    """Send `operations` on `kind` (in any version, converted to `kind`'s) to `path`.

    `kind` is a CustomResource class or any `Kind` (a built-in kind, another party's);
    `namespace_selector` and `object_selector`, when given, are this webhook's (else the
    configuration's)."""

    kind: type[CustomResource] | Kind
    path: str
    operations: tuple[str, ...] = ("CREATE", "UPDATE")
    namespace_selector: Mapping[str, Any] | None = None
    object_selector: Mapping[str, Any] | None = None

    def rule(self) -> dict[str, Any]:
        """The webhook's ``rules`` entry: the kind's group, version, plural and operations."""
        # Only the handler's own version: with matchPolicy Equivalent the API server
        # converts requests in any other version to it before calling the webhook.
        kind = Kind.of(self.kind)
        namespaced = kind.namespaced
        return {
            "apiGroups": [kind.group],
            "apiVersions": [kind.version],
            "operations": list(self.operations),
            "resources": [kind.resource_name],
            "scope": "*" if namespaced is None else "Namespaced" if namespaced else "Cluster",
        }


def webhook_name(rule: WebhookRule) -> str:
    """A fully qualified webhook name from the path and the kind's group; the API server
    wants three segments, so a built-in group without a dot (``core`` for the core
    group, ``apps``) is followed by ``operator-kit.io``."""
    slug = re.sub(r"[^a-z0-9]+", "-", rule.path.lower()).strip("-") or "webhook"
    group = Kind.of(rule.kind).group or "core"
    return f"{slug}.{group}" if "." in group else f"{slug}.{group}.operator-kit.io"


def excluding_namespace(selector: Mapping[str, Any] | None, namespace: str) -> dict[str, Any]:
    """`selector` (a label selector of namespaces) that also leaves `namespace` out: a
    webhook on a kind the operator does not define (Pods, Deployments) must not stop the
    operator's own namespace, its own Pods included, when the webhook is broken."""
    expressions = [*((selector or {}).get("matchExpressions") or ()),
                   {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                    "values": [namespace]}]
    return {**(selector or {}), "matchExpressions": expressions}


def webhook_configuration(
    name: str,
    mutating: bool,
    target: WebhookTarget,
    rules: Sequence[WebhookRule],
    fail_closed: bool = True,
    *,
    namespace_selector: Mapping[str, Any] | None = None,
    object_selector: Mapping[str, Any] | None = None,
    timeout_seconds: int = 10,
) -> dict[str, Any]:
    """A Validating- or MutatingWebhookConfiguration with one webhook per rule."""
    if not 1 <= timeout_seconds <= 30:
        raise ValueError("timeout_seconds must be between 1 and 30 (the API server's limit)")
    webhooks = []
    for rule in rules:
        hook: dict[str, Any] = {
            "name": webhook_name(rule),
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail" if fail_closed else "Ignore",
            "matchPolicy": "Equivalent",
            "timeoutSeconds": timeout_seconds,
            "clientConfig": target.client_config(rule.path),
            "rules": [rule.rule()],
        }
        namespaces = rule.namespace_selector or namespace_selector
        objects = rule.object_selector or object_selector
        if namespaces is not None:
            hook["namespaceSelector"] = dict(namespaces)
        if objects is not None:
            hook["objectSelector"] = dict(objects)
        if mutating:
            hook["reinvocationPolicy"] = "Never"
        webhooks.append(hook)
    kind = "MutatingWebhookConfiguration" if mutating else "ValidatingWebhookConfiguration"
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
            "metadata": {"name": name}, "webhooks": webhooks}
