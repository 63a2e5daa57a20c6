"""The Team controller: a `FanOut` that keeps each Team's children on every member.

On each member cluster a Team gets a Namespace (``spec.namespace``, default
``team-<name>``), a ConfigMap ``team-config`` with ``spec.config`` as its data, and a
RoleBinding ``team-members`` that binds ``spec.role`` to ``spec.members``. The fleet
applies them on each member with that member's own workers, puts back what someone
changes or deletes there, and writes the member's ``Ready`` condition under
``status.clusters`` on the hub's Team. Deleting the Team deletes them on every member
(the finalizer ``example.com/team-children``).
"""

from __future__ import annotations

from typing import Any

from operator_kit.fleet import FanOut
from team_operator.resources import Team


# --8<-- [start:controller]
def namespace_of(team: Team) -> str:
    """The namespace `team` has on every member cluster."""
    return team.spec.namespace or f"team-{team.name}"


class TeamSync(FanOut[Team]):
    resource = Team
    finalizer = "example.com/team-children"
    child_kinds = ("v1/Namespace", "v1/ConfigMap",
                   "rbac.authorization.k8s.io/v1/RoleBinding")
    max_concurrent_reconciles = 2

    def children(self, team: Team, cluster: str) -> list[dict[str, Any]]:
        namespace = namespace_of(team)
        return [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
            {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "team-config", "namespace": namespace},
             "data": {**team.spec.config, "cluster": cluster}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": "team-members", "namespace": namespace},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                         "name": team.spec.role},
             "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                           "name": member} for member in team.spec.members]},
        ]
# --8<-- [end:controller]
