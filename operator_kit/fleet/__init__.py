"""Fleets: controllers that run on every member cluster (``Controller.fleet = True``).

A `ClusterProvider` names the member clusters (`StaticClusters`, `KubeconfigDirectory`);
a `Fleet` runs the fleet controllers on each, apart, while clusters join and leave
(`operator_kit.fleet.supervisor`). A `FanOut` keeps the children one hub object
declares in step on every member, with a status entry per cluster on the hub object
(`operator_kit.fleet.fanout`).
"""

from operator_kit.fleet.fanout import ClusterStatus, ClusterStatuses, FanOut
from operator_kit.fleet.providers import (
    Cluster,
    ClusterProvider,
    KubeconfigDirectory,
    StaticClusters,
)
from operator_kit.fleet.supervisor import Changes, Fleet, Member, plan

__all__ = ["Changes", "Cluster", "ClusterProvider", "ClusterStatus", "ClusterStatuses",
           "FanOut", "Fleet", "KubeconfigDirectory", "Member",
           "StaticClusters", "plan"]
