"""The local plane runs the Kubernetes release that was chosen for it: /version says so.

The choice is ``--kubernetes-version`` or ``OPERATOR_KIT_KUBERNETES_VERSION`` when the
plane was started, else the default; run these tests with the same environment (CI's
second plane exports ``OPERATOR_KIT_KUBERNETES_VERSION=1.35``).
"""

from __future__ import annotations

import pytest

from operator_kit.localcluster import LocalCluster
from operator_kit.localcluster.binaries import VERSION_ENV, resolve, user_folder
from operator_kit.testing import TestCluster


def test_the_api_server_reports_the_chosen_kubernetes_version(
    cluster: TestCluster, local_plane: LocalCluster
) -> None:
    if user_folder() is not None:
        pytest.skip("the plane runs binaries from OPERATOR_KIT_BINARIES: no version was chosen")
    chosen = resolve(None).kubernetes
    assert local_plane.state.kubernetes_version == chosen, (
        f"the plane was started for {local_plane.state.kubernetes_version}, this run chooses "
        f"{chosen} (set {VERSION_ENV} as when it was started)"
    )
    version = cluster.api.get("/version")
    assert version["gitVersion"] == chosen
    assert (version["major"], version["minor"]) == tuple(chosen.lstrip("v").split(".")[:2])
