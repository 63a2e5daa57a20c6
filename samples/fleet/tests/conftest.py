"""The fleet sample's clusters: the hub is OPERATOR_KIT_TEST_KUBECONFIG (the ``cluster``
fixture); the two members are the kubeconfigs named in OPERATOR_KIT_TEST_FLEET_KUBECONFIGS
(``a:b``), or two local planes started for the session and stopped after it (the
``member_clusters`` fixture of operator_kit's pytest plugin)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from operator_kit.testing import TestCluster


@pytest.fixture(scope="session")
def members(member_clusters: dict[str, TestCluster]) -> dict[str, TestCluster]:
    """Two member clusters, by name (m1, m2): operator_kit's ``member_clusters`` fixture."""
    return member_clusters


@pytest.fixture(scope="module")
def directory(tmp_path_factory: pytest.TempPathFactory,
              members: dict[str, TestCluster]) -> Path:
    """A folder with a kubeconfig file per member (``m1.yaml``, ``m2.yaml``)."""
    folder = tmp_path_factory.mktemp("team-fleet") / "clusters"
    folder.mkdir()
    for name, member in members.items():
        staged = folder.parent / f".{name}.yaml"
        shutil.copy(member.kubeconfig, staged)
        staged.rename(folder / f"{name}.yaml")
    return folder

