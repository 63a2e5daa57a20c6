"""RBAC documents for an operator: its ServiceAccount, ClusterRole and binding.

`Rbac(name, namespace).rules(...)` collects `Rule`s; `documents()` writes them merged
per API group and resource (verbs unioned and sorted), so the same code always gives
byte-identical YAML. Nothing is widened: no wildcard appears unless a rule asked for it.
`leader_election()` grants the Lease verbs in a namespaced Role in the operator's own
namespace rather than cluster-wide.
"""

from __future__ import annotations

from typing import Any

from operator_kit.rbac import Rule, merge_rules

LEASE_RULE = Rule(["coordination.k8s.io"], ["leases"], ["create", "get", "update"])


class Rbac:
    """The RBAC an operator named `name` runs with, in `namespace`."""

    def __init__(self, name: str, namespace: str) -> None:
        self.name = name
        self.namespace = namespace
        self._rules: list[Rule] = []
        self._lease = False

    def rules(self, *rules: Rule) -> Rbac:
        """Add cluster-wide rules; a Lease rule is moved to the namespaced Role."""
        for rule in rules:
            if rule.api_groups == LEASE_RULE.api_groups and rule.resources == ("leases",):
                self._lease = True
            else:
                self._rules.append(rule)
        return self

    def leader_election(self) -> Rbac:
        """Grant the Lease verbs in the operator's namespace (a Role, not a ClusterRole)."""
        self._lease = True
        return self

    def cluster_rules(self) -> list[Rule]:
        return merge_rules(self._rules)

    def documents(self) -> list[dict[str, Any]]:
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
        if self._lease:
            role = f"{self.name}-leader-election"
            docs += [
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                 "metadata": {"name": role, "namespace": self.namespace, "labels": labels},
                 "rules": [LEASE_RULE.to_dict()]},
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                 "metadata": {"name": role, "namespace": self.namespace, "labels": labels},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                             "name": role},
                 "subjects": subject},
            ]
        return docs
