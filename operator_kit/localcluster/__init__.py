"""A real local Kubernetes control plane for development and tests.

``python -m operator_kit.localcluster up [--dir D]`` starts etcd, kube-apiserver and
kube-controller-manager on loopback (building or finding the binaries on first use) and
prints the admin kubeconfig's path last; ``down`` stops it and removes its state.
"""

from operator_kit.localcluster.binaries import (
    ETCD_VERSION,
    KUBERNETES_VERSION,
    Binaries,
    BinariesError,
    find_or_build,
)
from operator_kit.localcluster.plane import LocalCluster, LocalClusterError, default_dir

__all__ = [
    "ETCD_VERSION",
    "KUBERNETES_VERSION",
    "Binaries",
    "BinariesError",
    "LocalCluster",
    "LocalClusterError",
    "default_dir",
    "find_or_build",
]
