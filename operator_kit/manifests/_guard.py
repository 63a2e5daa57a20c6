"""Admission policies that guard an installation against its own pod and its neighbours.

RBAC says which objects a ServiceAccount may patch, not which fields. These
ValidatingAdmissionPolicies (evaluated by the API server itself, in process: no webhook
to be down) close what RBAC leaves open:

- **self-protection** (``<operator>-self-protection-<namespace>``): the operator's
  ServiceAccount may patch its webhook configurations and converted CRDs (to keep their
  caBundle), and
  nothing else of them — not a webhook's failurePolicy, rules, selectors, timeout or
  Service, not a CRD's schema, names or conversion. Whoever takes over the pod cannot
  switch validation off cluster-wide.
- **the first installation** (``<operator>-installation-<namespace>``): the cluster-scoped
  documents (ClusterRole and its binding, webhook configurations, CRDs) may not be
  re-pointed at another namespace by anyone: applying a second installation's stream
  (``team-b``) over the first (``team-a``) is refused, object by object, with a message
  naming the installation there, instead of silently taking team-a's permissions,
  webhooks and conversion. An upgrade of the same installation changes them freely.
  What points where is read from the objects themselves (subjects, webhook Services,
  the conversion Service, the ``operator-kit.io/installation`` label), so the policy
  stays right under a kustomize overlay that changes the namespace.
- **shard labels** (``<operator>-shard-labels-<namespace>``, when the operator shards):
  the labels that say which replica reconciles an object are changed only by the operator's
  ServiceAccount. A label moved by hand would hand an object to a second member while
  the first still reconciles it; the sharder's drain handshake is the only way an
  object moves.

Each policy is named after the installation's namespace, so a second installation's
stream adds its own (the same rules) instead of rewriting the first one's: policies are
not themselves subject to admission. The ServiceAccount is matched by name in any
namespace (``system:serviceaccount:*:<name>``): a kustomize overlay that moves the
installation keeps its guard, and for self-protection matching more accounts only
restricts more.

What is left open: a webhook field Kubernetes adds after these (self-protection compares
the fields it knows, `_HOOK_FIELDS`); an administrator who deletes the policies.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["INSTALLATION_LABEL", "guard_policies"]

INSTALLATION_LABEL = "operator-kit.io/installation"
"""On every cluster-scoped document: the namespace of the installation it belongs to."""

_POLICY_API = "admissionregistration.k8s.io/v1"
_HOOKS = ("validatingwebhookconfigurations", "mutatingwebhookconfigurations")
# The fields of a webhook besides its caBundle (ValidatingWebhook and MutatingWebhook, v1).
_HOOK_FIELDS = ("rules", "failurePolicy", "matchPolicy", "namespaceSelector",
                "objectSelector", "sideEffects", "timeoutSeconds", "admissionReviewVersions",
                "matchConditions", "reinvocationPolicy")
_CRD_FIELDS = ("group", "names", "scope", "versions", "?preserveUnknownFields",
               "?conversion.?strategy", "?conversion.?webhook.?conversionReviewVersions",
               "?conversion.?webhook.?clientConfig.?service",
               "?conversion.?webhook.?clientConfig.?url")


def _is_account(name: str) -> str:
    return (f"request.userInfo.username.startsWith('system:serviceaccount:') && "
            f"request.userInfo.username.endsWith(':{name}')")


def _rule(group: str, resource: str, names: Sequence[str] = ()) -> dict[str, Any]:
    """Updates of `resource` (only those named `names`, when given)."""
    rule: dict[str, Any] = {"apiGroups": [group], "apiVersions": ["*"],
                            "resources": [resource], "operations": ["UPDATE"]}
    if names:
        rule["resourceNames"] = sorted(names)
    return rule


def _admission_rules(validating: Sequence[str], mutating: Sequence[str],
                     crds: Sequence[str]) -> list[dict[str, Any]]:
    """Updates of these webhook configurations and CRDs, by name."""
    rules = [_rule("admissionregistration.k8s.io", resource, names)
             for resource, names in zip(_HOOKS, (validating, mutating), strict=True) if names]
    if crds:
        rules.append(_rule("apiextensions.k8s.io", "customresourcedefinitions", crds))
    return rules


def _policy(name: str, rules: list[dict[str, Any]], validations: list[dict[str, Any]], *,
            variables: Sequence[dict[str, str]] = (), conditions: Sequence[dict[str, str]] = (),
            object_selector: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    constraints: dict[str, Any] = {"resourceRules": rules}
    if object_selector:
        constraints["objectSelector"] = object_selector
    spec: dict[str, Any] = {"failurePolicy": "Fail", "matchConstraints": constraints}
    if conditions:
        spec["matchConditions"] = list(conditions)
    if variables:
        spec["variables"] = list(variables)
    spec["validations"] = validations
    return [{"apiVersion": _POLICY_API, "kind": "ValidatingAdmissionPolicy",
             "metadata": {"name": name}, "spec": spec},
            {"apiVersion": _POLICY_API, "kind": "ValidatingAdmissionPolicyBinding",
             "metadata": {"name": name},
             "spec": {"policyName": name, "validationActions": ["Deny"]}}]


def _same_hooks() -> str:
    fields = " && ".join(f"o.?{field} == w.?{field}" for field in _HOOK_FIELDS)
    return ("object.?webhooks.orValue([]).size() == oldObject.?webhooks.orValue([]).size() && "
            "object.?webhooks.orValue([]).all(w, oldObject.?webhooks.orValue([]).exists(o, "
            "o.name == w.name && o.clientConfig.?url == w.clientConfig.?url && "
            f"o.clientConfig.?service == w.clientConfig.?service && {fields}))")


def _same_crd() -> str:
    return " && ".join(f"object.spec.{field} == oldObject.spec.{field}" for field in _CRD_FIELDS)


def self_protection(operator: str, namespace: str, account: str, *, validating: Sequence[str],
                    mutating: Sequence[str], crds: Sequence[str]) -> list[dict[str, Any]]:
    """The policy that lets `account` change only the caBundles of these objects."""
    rules = _admission_rules(validating, mutating, crds)
    if not rules:
        return []
    why = (f"the ServiceAccount of {operator} may change only the caBundle of its webhook "
           "configurations and CRDs (self-protection policy "
           f"{operator}-self-protection-{namespace}); make other changes as an administrator: "
           "python -m operator_kit.manifests ... | kubectl apply -f -")
    return _policy(f"{operator}-self-protection-{namespace}", rules, [
        {"expression": "request.resource.resource == 'customresourcedefinitions' || ("
                       + _same_hooks() + ")",
         "message": "webhook configuration: " + why, "reason": "Forbidden"},
        {"expression": "request.resource.resource != 'customresourcedefinitions' || ("
                       + _same_crd() + ")",
         "message": "CustomResourceDefinition: " + why, "reason": "Forbidden"},
    ], conditions=[{"name": "operator-service-account", "expression": _is_account(account)}])


def _refs(obj: str) -> str:
    """The namespaces `obj` (object or oldObject) points at, by kind (a webhook or
    conversion that calls a URL counts as pointing at the namespace '')."""
    return (f"variables.resource == 'clusterrolebindings' ? "
            f"{obj}.?subjects.orValue([]).filter(s, s.kind == 'ServiceAccount')"
            f".map(s, s.?namespace.orValue('')) : "
            f"variables.resource == 'customresourcedefinitions' ? "
            f"({obj}.spec.?conversion.?webhook.?clientConfig.hasValue() ? "
            f"[{obj}.spec.?conversion.?webhook.?clientConfig.?service.?namespace"
            f".orValue('')] : []) : "
            f"!variables.resource.endsWith('webhookconfigurations') ? [] : "
            f"{obj}.?webhooks.orValue([]).map(w, w.clientConfig.?service.?namespace"
            f".orValue(''))")


def installation(operator: str, namespace: str, app: str, *, cluster_role: str,
                 validating: Sequence[str], mutating: Sequence[str],
                 crds: Sequence[str]) -> list[dict[str, Any]]:
    """The policy that keeps the first installation's cluster-scoped documents its own."""
    rules = [_rule("rbac.authorization.k8s.io", "clusterroles", [cluster_role]),
             _rule("rbac.authorization.k8s.io", "clusterrolebindings", [cluster_role]),
             *_admission_rules(validating, mutating, crds)]
    label = f"[?'{INSTALLATION_LABEL}']"
    owner = (f"(variables.old.size() > 0 ? variables.old[0] : "
             f"oldObject.metadata.?labels{label}.orValue(''))")
    message = (f"request.kind.kind + ' ' + oldObject.metadata.name + ' belongs to the "
               f"installation of {operator} in namespace ' + {owner} + ', and this change "
               f"would point it at another one (one installation per cluster): uninstall "
               f"that one first (python -m operator_kit.manifests {app} --namespace ' + "
               f"{owner} + ' --uninstall), or see what is in the way with "
               f"python -m operator_kit.manifests {app} --namespace ' + variables.wanted + "
               f"' --check'")
    moved = "variables.new.filter(n, !(n in variables.old))"
    wanted = (f"{moved}.size() > 0 ? {moved}[0] : "
              f"object.metadata.?labels{label}.orValue('NAMESPACE')")
    return _policy(f"{operator}-installation-{namespace}", rules, [
        {"expression": "variables.old.size() == 0 || "
                       "variables.new.all(n, n in variables.old)",
         "messageExpression": message, "reason": "Forbidden"},
        {"expression": f"oldObject.metadata.?labels{label}.orValue('') == '' || "
                       f"object.metadata.?labels{label} == oldObject.metadata.?labels{label}",
         "messageExpression": message, "reason": "Forbidden"},
    ], variables=[{"name": "resource", "expression": "request.resource.resource"},
                  {"name": "old", "expression": _refs("oldObject")},
                  {"name": "new", "expression": _refs("object")},
                  {"name": "wanted", "expression": wanted}])


def shard_labels(operator: str, namespace: str, account: str, labels: Sequence[str],
                 resources: Iterable[tuple[str, str]]) -> list[dict[str, Any]]:
    """The policy that lets only `account` change the assignment `labels` of objects of
    `resources` ((group, plural) each)."""
    rules = [_rule(group, resource) for group, resource in sorted(set(resources))]
    same = " && ".join(f"object.metadata.?labels[?'{label}'] == "
                       f"oldObject.metadata.?labels[?'{label}']" for label in labels)
    return _policy(f"{operator}-shard-labels-{namespace}", rules, [{
        "expression": same, "reason": "Forbidden",
        "message": (f"the label {labels[0]} says which replica of {operator} reconciles this "
                    "object, and only the operator (its ServiceAccount) may change it: an "
                    "object relabelled by hand could be reconciled by two replicas at once. "
                    "Keep the operator's labels as they are (kubectl apply and server-side "
                    "apply do; a replace with the labels left out does not)")}],
        conditions=[{"name": "not-the-operator", "expression": f"!({_is_account(account)})"}],
        object_selector={"matchExpressions": [{"key": labels[0], "operator": "Exists"}]})


def guard_policies(operator: str, namespace: str, app: str, *, account: str,
                   validating: Sequence[str], mutating: Sequence[str], crds: Sequence[str],
                   ca_bundle_crds: Sequence[str], keeps_ca_bundles: bool,
                   shard: Sequence[str] = (),
                   sharded: Iterable[tuple[str, str]] = ()) -> list[dict[str, Any]]:
    """Every policy and binding for one installation (see the module docstring).

    `crds`: every CRD of the operator; `ca_bundle_crds`: those whose conversion caBundle
    the operator keeps; `keeps_ca_bundles`: whether it patches caBundles at all (not with
    a mounted certificate, whose CA cert-manager injects); `shard`: the assignment and
    drain labels, `sharded`: the (group, plural) of the objects that carry them."""
    docs = installation(operator, namespace, app, cluster_role=account,
                        validating=validating, mutating=mutating, crds=crds)
    if keeps_ca_bundles:
        docs += self_protection(operator, namespace, account, validating=validating,
                                mutating=mutating, crds=ca_bundle_crds)
    if shard:
        docs += shard_labels(operator, namespace, account, shard, sharded)
    return docs
