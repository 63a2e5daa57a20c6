"""Fleets: controllers that run on every member cluster (``Controller.fleet = True``).

A `ClusterProvider` names the member clusters (`StaticClusters`, `KubeconfigDirectory`,
`KubeconfigSecrets`: Cluster API's kubeconfig Secrets in the hub, with the `HubAccess` its
manifests grant);
a `Fleet` runs the fleet controllers on each, apart, while clusters join and leave
(`operator_kit.fleet.supervisor`). A `FanOut` keeps the children one hub object
declares in step on every member, with a status entry per cluster on the hub object
(`operator_kit.fleet.fanout`).

**Experimental** (docs/stability.md): every name here may change in a minor release; the
first `Fleet` warns once (`operator_kit.ExperimentalWarning`).
"""

from operator_kit.fleet.fanout import ClusterStatus, ClusterStatuses, FanOut
from operator_kit.fleet.providers import (
    Cluster,
    ClusterProvider,
    HubAccess,
    KubeconfigDirectory,
    StaticClusters,
)
from operator_kit.fleet.secrets import CLUSTER_NAME_LABEL, KubeconfigSecrets
from operator_kit.fleet.supervisor import Changes, Fleet, Member, plan

__all__ = ["CLUSTER_NAME_LABEL", "Changes", "Cluster", "ClusterProvider", "ClusterStatus",
           "ClusterStatuses", "FanOut", "Fleet", "HubAccess", "KubeconfigDirectory",
           "KubeconfigSecrets", "Member", "StaticClusters", "plan"]
