"""RBAC documents for an operator: its ServiceAccount, ClusterRole and binding.

`Rbac(name, namespace).rules(...)` collects `Rule`s; `documents()` writes them merged
per API group and resource (verbs unioned and sorted), so the same code always gives
byte-identical YAML. Nothing is widened: no wildcard appears unless a rule asked for it.
The operator's own objects — its Lease and its webhook certificate's Secret — live in
its namespace, so rules for leases and secrets go into a Role there, never into the
ClusterRole — except rules that list or watch them, which a controller's ``owns`` or
``watches`` derive and which span the namespaces it watches; `leader_election()` adds
the Lease rule.
"""

from __future__ import annotations

from typing import Any

from operator_kit.api.rbac import Rule, merge_rules

LEASE_RULE = Rule(["coordination.k8s.io"], ["leases"], ["create", "get", "update"])
"""The Lease verbs on any Lease; `Rbac.leader_election` narrows get and update to one name."""

# (group, resource) of objects an operator keeps in its own namespace.
OWN_NAMESPACE = {("coordination.k8s.io", "leases"), ("", "secrets")}


class Rbac:
    """The RBAC an operator named `name` runs with, in `namespace`."""

    def __init__(self, name: str, namespace: str, *, member_leases: bool = False) -> None:
        self.name = name
        self.namespace = namespace
        # Sharding: members list and watch the member Leases, which live in the namespace
        # (operator_kit.election.sharding), so Lease list/watch goes into the Role too.
        self.member_leases = member_leases
        self._rules: list[Rule] = []
        self._namespaced: list[Rule] = []

    def rules(self, *rules: Rule) -> Rbac:
        """Add rules: cluster-wide, except leases and secrets (the Role in the namespace)
        unless the rule lists or watches them."""
        for rule in rules:
            leases = self.member_leases and rule.api_groups == ("coordination.k8s.io",) \
                and rule.resources == ("leases",)
            own = all((g, r) in OWN_NAMESPACE for g in rule.api_groups
                      for r in rule.resources) and (
                leases or not {"list", "watch"} & set(rule.verbs))
            (self._namespaced if own else self._rules).append(rule)
        return self

    def leader_election(self, lease: str | None = None) -> Rbac:
        """Grant the Lease verbs in the operator's namespace (a Role, not a ClusterRole):
        create, and get and update on the Lease named `lease` (default: the operator's)."""
        self._namespaced += [Rule(LEASE_RULE.api_groups, LEASE_RULE.resources, ["create"]),
                             Rule(LEASE_RULE.api_groups, LEASE_RULE.resources,
                                  ["get", "update"], [lease or self.name])]
        return self

    def cluster_rules(self) -> list[Rule]:
        """The ClusterRole's rules, merged per API group and resource."""
        return merge_rules(self._rules)

    def namespaced_rules(self) -> list[Rule]:
        """The rules of the Role in the operator's own namespace (the Lease, the certificate
        Secret), merged."""
        return merge_rules(self._namespaced)

    def documents(self) -> list[dict[str, Any]]:
        """The ServiceAccount, the ClusterRole and its binding, and (with namespaced rules) the Role
        and its binding."""
        subject = [{"kind": "ServiceAccount", "name": self.name, "namespace": self.namespace}]
        labels = {"app.kubernetes.io/name": self.name,
                  "app.kubernetes.io/managed-by": "operator-kit"}
        docs: list[dict[str, Any]] = [
            {"apiVersion": "v1", "kind": "ServiceAccount",
             "metadata": {"name": self.name, "namespace": self.namespace, "labels": labels}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
             "metadata": {"name": self.name, "labels": labels},
             "rules": [rule.to_dict() for rule in self.cluster_rules()]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
             "metadata": {"name": self.name, "labels": labels},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                         "name": self.name},
             "subjects": subject},
        ]
        if self._namespaced:
            role = f"{self.name}-own-namespace"
            docs += [
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                 "metadata": {"name": role, "namespace": self.namespace, "labels": labels},
                 "rules": [rule.to_dict() for rule in self.namespaced_rules()]},
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                 "metadata": {"name": role, "namespace": self.namespace, "labels": labels},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                             "name": role},
                 "subjects": subject},
            ]
        return docs
