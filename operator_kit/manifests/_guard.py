"""Admission policies that guard an installation against its own pod and its neighbours.

RBAC says which objects a ServiceAccount may patch, not which fields. These
ValidatingAdmissionPolicies (evaluated by the API server itself, in process: no webhook
to be down) close what RBAC leaves open:

- **self-protection** (``<operator>-self-protection-<namespace>``): the operator's
  ServiceAccount may patch its webhook configurations and converted CRDs to keep their
  caBundles, and nothing else of them: every other field must stay as it was, compared
  key by key over the whole object (`_same_except`), so a field Kubernetes adds later is
  covered too. Not a webhook's failurePolicy, rules, selectors, timeout or Service, not a
  CRD's schema, names or conversion, and not their metadata: an ownerReference (the
  garbage collector would delete the object: a CRD with every custom resource it
  serves), a finalizer (an uninstall would hang), labels or annotations. Only what the
  API server itself changes on every write is left out of the comparison
  (``managedFields``, ``resourceVersion``, ``generation``).
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
  the labels that say which replica reconciles an object are set and changed only by the
  operator's ServiceAccount, on CREATE as on UPDATE. A label moved by hand would hand an
  object to a second member while the first still reconciles it, and an object created
  with a member's label skips the sharder; the drain handshake is the only way an object
  moves.

**Identities are exact.** The operator's ServiceAccount is the *parameter* of the
policies that name it (``paramKind: ServiceAccount``; the binding's ``paramRef`` names
it, in the installation's namespace), and the CEL compares the request's user with
``system:serviceaccount:<its namespace>:<its name>`` as read from that object: a
ServiceAccount of the same name in a tenant's namespace is somebody else. A kustomize
overlay's ``namePrefix``, ``nameSuffix`` and ``namespace`` rewrite the ServiceAccount
and the ``paramRef`` together (`operator_kit.manifests._kustomize`), so the policies name
the renamed account; a Helm chart renders the ``paramRef`` with its namespace value. A
binding whose ServiceAccount does not exist refuses what it matches
(``parameterNotFoundAction: Deny``) rather than guard nothing.

Each policy is named after the installation's namespace, so a second installation's
stream adds its own (the same rules) instead of rewriting the first one's: policies are
not themselves subject to admission.

What is left open: ``metadata.managedFields`` of the guarded objects (the API server
rewrites it on every patch, the operator's own included; it records who wrote which
field and changes no behaviour); an administrator who deletes the policies.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["INSTALLATION_LABEL", "guard_policies"]

INSTALLATION_LABEL = "operator-kit.io/installation"
"""On every cluster-scoped document: the namespace of the installation it belongs to."""

_POLICY_API = "admissionregistration.k8s.io/v1"
_HOOKS = ("validatingwebhookconfigurations", "mutatingwebhookconfigurations")

# A tree of the keys that may differ (None) or are compared the same way below them.
Tree = dict[str, "Tree | None"]
# What the API server itself changes on every write: not compared.
_SERVER_KEPT: Tree = {"managedFields": None, "resourceVersion": None, "generation": None}
_HOOK_CONFIGURATION: Tree = {"metadata": _SERVER_KEPT, "webhooks": None}
_WEBHOOK: Tree = {"clientConfig": {"caBundle": None}}
_CRD: Tree = {"metadata": _SERVER_KEPT,
              "spec": {"conversion": {"webhook": {"clientConfig": {"caBundle": None}}}}}

# The operator's ServiceAccount, as the policies that name it read it (their parameter).
_ACCOUNT = "'system:serviceaccount:' + params.metadata.namespace + ':' + params.metadata.name"
_IS_OPERATOR = f"request.userInfo.username == {_ACCOUNT}"


def _rule(group: str, resource: str, names: Sequence[str] = (),
          operations: Sequence[str] = ("UPDATE",)) -> dict[str, Any]:
    """`operations` (default: updates) of `resource` (only those named `names`, when
    given)."""
    rule: dict[str, Any] = {"apiGroups": [group], "apiVersions": ["*"],
                            "resources": [resource], "operations": list(operations)}
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
            object_selector: dict[str, Any] | None = None,
            account: tuple[str, str] | None = None) -> list[dict[str, Any]]:
    """A policy and its binding; with `account` ((namespace, name) of a ServiceAccount),
    that account is the policy's parameter (``params`` in its CEL)."""
    constraints: dict[str, Any] = {"resourceRules": rules}
    if object_selector:
        constraints["objectSelector"] = object_selector
    spec: dict[str, Any] = {"failurePolicy": "Fail"}
    if account:
        spec["paramKind"] = {"apiVersion": "v1", "kind": "ServiceAccount"}
    spec["matchConstraints"] = constraints
    if conditions:
        spec["matchConditions"] = list(conditions)
    if variables:
        spec["variables"] = list(variables)
    spec["validations"] = validations
    binding: dict[str, Any] = {"policyName": name}
    if account:
        binding["paramRef"] = {"name": account[1], "namespace": account[0],
                               "parameterNotFoundAction": "Deny"}
    binding["validationActions"] = ["Deny"]
    return [{"apiVersion": _POLICY_API, "kind": "ValidatingAdmissionPolicy",
             "metadata": {"name": name}, "spec": spec},
            {"apiVersion": _POLICY_API, "kind": "ValidatingAdmissionPolicyBinding",
             "metadata": {"name": name}, "spec": binding}]


def _same_except(new: str, old: str, tree: Tree) -> str:
    """CEL: the maps `new` and `old` hold the same keys with the same values, except
    the keys of `tree`: those it maps to None may differ (or be added, or removed), and
    below the others the same holds, by their own tree (both present, or both absent)."""
    skipped = "[" + ", ".join(f"'{key}'" for key in tree) + "]"
    parts = [f"dyn({new}).all(k, k in {skipped} || "
             f"(k in dyn({old}) && dyn({new})[k] == dyn({old})[k]))",
             f"dyn({old}).all(k, k in {skipped} || k in dyn({new}))"]
    for key, below in tree.items():
        if below is not None:
            parts.append(f"{new}.?{key}.hasValue() == {old}.?{key}.hasValue()")
            parts.append(f"(!{new}.?{key}.hasValue() || "
                         f"({_same_except(f'{new}.{key}', f'{old}.{key}', below)}))")
    return " && ".join(parts)


def _same_hooks() -> str:
    """CEL: the webhook configuration is as it was but for its webhooks' caBundles."""
    new, old = "object.?webhooks.orValue([])", "oldObject.?webhooks.orValue([])"
    return (f"{_same_except('object', 'oldObject', _HOOK_CONFIGURATION)} && "
            f"{new}.map(w, w.name) == {old}.map(w, w.name) && "
            f"{new}.all(w, {old}.exists(o, o.name == w.name && "
            f"{_same_except('w', 'o', _WEBHOOK)}))")


def _same_crd() -> str:
    """CEL: the CRD is as it was but for its conversion webhook's caBundle."""
    return _same_except("object", "oldObject", _CRD)


def self_protection(operator: str, namespace: str, account: str, *, validating: Sequence[str],
                    mutating: Sequence[str], crds: Sequence[str]) -> list[dict[str, Any]]:
    """The policy that lets ServiceAccount `namespace`/`account` change only the caBundles
    of these objects."""
    rules = _admission_rules(validating, mutating, crds)
    if not rules:
        return []
    why = (f"' may change only the caBundle of its webhook configurations and CRDs, "
           f"nothing else of them: not their webhooks, schema, conversion, ownerReferences, "
           f"finalizers, labels or annotations (the self-protection admission policy of "
           f"{operator}); make other changes as an administrator: python -m "
           f"operator_kit.manifests ... | kubectl apply -f -'")
    return _policy(f"{operator}-self-protection-{namespace}", rules, [
        {"expression": "request.resource.resource == 'customresourcedefinitions' || ("
                       + _same_hooks() + ")",
         "messageExpression": f"'webhook configuration ' + oldObject.metadata.name + ': "
                              f"the ServiceAccount ' + {_ACCOUNT} + {why}",
         "reason": "Forbidden"},
        {"expression": "request.resource.resource != 'customresourcedefinitions' || ("
                       + _same_crd() + ")",
         "messageExpression": f"'CustomResourceDefinition ' + oldObject.metadata.name + ': "
                              f"the ServiceAccount ' + {_ACCOUNT} + {why}",
         "reason": "Forbidden"},
    ], conditions=[{"name": "operator-service-account", "expression": _IS_OPERATOR}],
        account=(namespace, account))


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
    """The policy that lets only ServiceAccount `namespace`/`account` set or change the
    assignment `labels` of objects of `resources` ((group, plural) each): an object
    created with the assignment label by anyone else is refused too."""
    rules = [_rule(group, resource, operations=("CREATE", "UPDATE"))
             for group, resource in sorted(set(resources))]
    same = " && ".join(f"object.metadata.?labels[?'{label}'] == "
                       f"oldObject.metadata.?labels[?'{label}']" for label in labels)
    why = (f"says which replica of {operator} reconciles this object, and only the operator "
           f"(its ServiceAccount ' + {_ACCOUNT} + ') may set or change it: ")
    created = (f"'the label {labels[0]}=' + object.metadata.labels['{labels[0]}'] + ' {why}"
               "an object created with it would skip the sharder of the operator. Create "
               f"the object without the labels {' and '.join(labels)} (the operator assigns it "
               "a replica itself)'")
    updated = (f"'the label {labels[0]} {why}an object relabelled by hand could be "
               "reconciled by two replicas at once. Keep the labels of the operator as they are "
               "(kubectl apply and server-side apply do; a replace with the labels left out "
               "does not)'")
    return _policy(f"{operator}-shard-labels-{namespace}", rules, [{
        "expression": f"request.operation == 'UPDATE' && {same}", "reason": "Forbidden",
        "messageExpression": f"request.operation == 'CREATE' ? {created} : {updated}"}],
        conditions=[{"name": "not-the-operator", "expression": f"!({_IS_OPERATOR})"}],
        object_selector={"matchExpressions": [{"key": labels[0], "operator": "Exists"}]},
        account=(namespace, account))


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
