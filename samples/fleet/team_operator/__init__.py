"""A fleet operator: a Team on the hub, its namespace, ConfigMap and RoleBinding on every
member cluster, and a Ready condition per cluster on the hub's Team.

``team_operator:operator`` is the hub's `Operator`; `fleet` adds the member clusters
(kubeconfig files in a folder) and runs both::

    python -m operator_kit.manifests team_operator:operator | kubectl apply -f -
    TEAM_OPERATOR_CLUSTERS=/etc/fleet/clusters python -m team_operator
"""

from __future__ import annotations

import os

from operator_kit import Operator
from operator_kit.fleet import Fleet, KubeconfigDirectory
from team_operator.controller import TeamSync, namespace_of
from team_operator.resources import Team, TeamSpec, TeamStatus

CLUSTERS_ENV = "TEAM_OPERATOR_CLUSTERS"
"""The folder of member kubeconfigs (default ``/etc/fleet/clusters``)."""

operator = Operator("team-operator", [TeamSync()])


def fleet(directory: str | None = None) -> Fleet:
    """The fleet of `operator`: every kubeconfig file in `directory` is a member."""
    where = directory or os.environ.get(CLUSTERS_ENV, "/etc/fleet/clusters")
    return Fleet.of(operator, KubeconfigDirectory(where))


__all__ = ["Team", "TeamSpec", "TeamStatus", "TeamSync", "fleet", "namespace_of", "operator"]
