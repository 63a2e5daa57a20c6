"""The Team kind: declared once on the hub, made on every member cluster.

A Team names its people (``members``), the ClusterRole they get in the team's namespace
(``role``) and the settings the team's workloads read (``config``, a ConfigMap's data).
Its status has an entry per member cluster (`operator_kit.fleet.ClusterStatuses`), each
with a ``Ready`` condition, written by that cluster's workers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from operator_kit import CustomResource, PrinterColumn
from operator_kit.fleet import ClusterStatuses


# --8<-- [start:resources]
@dataclass
class TeamSpec:
    """Who is in the team, what they may do, and their settings."""

    members: list[str] = field(default_factory=list, metadata={
        "description": "User names bound to the role in the team's namespace"})
    role: str = field(default="edit", metadata={
        "description": "The ClusterRole the members get in the namespace"})
    config: dict[str, str] = field(default_factory=dict, metadata={
        "description": "The data of the ConfigMap team-config in the namespace"})
    namespace: str = field(default="", metadata={
        "description": "The namespace on each member cluster (default: team-<name>)"})


@dataclass
class TeamStatus:
    """An entry per member cluster, each with its Ready condition."""

    clusters: ClusterStatuses = field(default_factory=list)


class Team(CustomResource):
    """A team: its namespace, settings and role binding on every member cluster."""

    group = "example.com"
    version = "v1"
    kind = "Team"
    plural = "teams"
    namespaced = False
    printer_columns = (
        PrinterColumn("Role", ".spec.role"),
        PrinterColumn("Clusters", ".status.clusters[*].name"),
    )
    spec: TeamSpec
    status: TeamStatus
# --8<-- [end:resources]
