"""The fleet sample's clusters: the hub is OPERATOR_KIT_TEST_KUBECONFIG (the ``cluster``
fixture); the two members are the kubeconfigs named in OPERATOR_KIT_TEST_FLEET_KUBECONFIGS
(``a:b``), or two local planes started for the session and stopped after it."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from operator_kit.localcluster import LocalCluster
from operator_kit.testing import TestCluster

FLEET_ENV = "OPERATOR_KIT_TEST_FLEET_KUBECONFIGS"


@pytest.fixture(scope="session")
def members(cluster: TestCluster, tmp_path_factory: pytest.TempPathFactory,
            ) -> Iterator[dict[str, TestCluster]]:
    """Two member clusters, by name (m1, m2)."""
    planes: list[LocalCluster] = []
    named = [p for p in os.environ.get(FLEET_ENV, "").split(os.pathsep) if p]
    try:
        if not named:
            for i in range(2):
                plane = LocalCluster(tmp_path_factory.mktemp(f"team-plane-{i}"))
                planes.append(plane)
                named.append(str(plane.up()))
        yield {f"m{i + 1}": TestCluster(path) for i, path in enumerate(named[:2])}
    finally:
        for plane in planes:
            plane.down()


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

