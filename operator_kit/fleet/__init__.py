"""Fleets: controllers that run on every member cluster (``Controller.fleet = True``).

A `ClusterProvider` names the member clusters (`StaticClusters`, `KubeconfigDirectory`);
a `Fleet` runs the fleet controllers on each, apart, while clusters join and leave
(`operator_kit.fleet.supervisor`).
"""

from operator_kit.fleet.providers import (
    Cluster,
    ClusterProvider,
    KubeconfigDirectory,
    StaticClusters,
)
from operator_kit.fleet.supervisor import Changes, Fleet, Member, plan

__all__ = ["Changes", "Cluster", "ClusterProvider", "Fleet", "KubeconfigDirectory", "Member",
           "StaticClusters", "plan"]
