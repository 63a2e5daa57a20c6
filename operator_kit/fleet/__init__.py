"""Fleets: controllers that run on every member cluster (``Controller.fleet = True``).

A `ClusterProvider` names the member clusters (`StaticClusters`, `KubeconfigDirectory`,
`KubeconfigSecrets`: Cluster API's kubeconfig Secrets in the hub, with the `HubAccess` its
manifests grant);
a `Fleet` runs the fleet controllers on each, apart, while clusters join and leave
(`operator_kit.fleet.supervisor`).
"""

from operator_kit.fleet.providers import (
    Cluster,
    ClusterProvider,
    HubAccess,
    KubeconfigDirectory,
    StaticClusters,
)
from operator_kit.fleet.secrets import CLUSTER_NAME_LABEL, KubeconfigSecrets
from operator_kit.fleet.supervisor import Changes, Fleet, Member, plan

__all__ = ["CLUSTER_NAME_LABEL", "Changes", "Cluster", "ClusterProvider", "Fleet", "HubAccess",
           "KubeconfigDirectory", "KubeconfigSecrets", "Member", "StaticClusters", "plan"]
