"""pytest plugin: the ``cluster``, ``namespace`` and ``member_clusters`` fixtures.

``cluster`` (session scope) is `TestCluster.from_env()`. With no cluster configured the
test is skipped, or fails when OPERATOR_KIT_TEST_REQUIRE_KUBERNETES is set — a CI run
without its cluster must be red, not silently green. ``namespace`` is a fresh namespace
per test, deleted afterwards. ``member_clusters`` (session scope) are two more clusters
for fleet tests (`operator_kit.fleet`): the kubeconfigs named in
OPERATOR_KIT_TEST_FLEET_KUBECONFIGS, or two local planes started once for the session.

pytest loads this module (the ``pytest11`` entry point) in every run of an environment
that has operator_kit installed, so it imports nothing of operator_kit (whose package
and ``operator_kit.testing`` load their names on first use) until a test asks for one of
its fixtures: a run without them pays only for this file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from operator_kit.testing.cluster import Namespace, TestCluster

FLEET_ENV = "OPERATOR_KIT_TEST_FLEET_KUBECONFIGS"
"""Two running clusters' kubeconfigs (``a:b``) that ``member_clusters`` gives, instead of
starting two local planes."""


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "cluster: needs a real Kubernetes API server (OPERATOR_KIT_TEST_KUBECONFIG)"
    )


@pytest.fixture(scope="session")
def cluster() -> TestCluster:
    """The test cluster (a `TestCluster`) named by OPERATOR_KIT_TEST_KUBECONFIG, for the
    whole session: `.api` for requests, `.install_crd(Kind)`, `.namespace(prefix)`.

    Without one the test is skipped — or fails, when OPERATOR_KIT_TEST_REQUIRE_KUBERNETES
    is set (as in CI). Start one with ``python -m operator_kit.localcluster up``. Never
    point it at a cluster that matters: tests create and delete namespaces and CRDs."""
    from operator_kit.testing.cluster import NoTestCluster, TestCluster

    try:
        return TestCluster.from_env()
    except NoTestCluster as err:
        if TestCluster.required():
            pytest.fail(
                f"a real cluster is required (OPERATOR_KIT_TEST_REQUIRE_KUBERNETES): {err}",
                pytrace=False,
            )
        pytest.skip(str(err))


def namespace_prefix(test_name: str) -> str:
    """A namespace name prefix from a test's name: a parametrized test's ``[id]`` and any
    other character a DNS label refuses become ``-`` (``test_x[a_1]`` → ``x-a-1``)."""
    name = re.sub(r"[^a-z0-9]+", "-", test_name.removeprefix("test_").lower())
    return name[:40].strip("-") or "test"


@pytest.fixture
def namespace(cluster: TestCluster, request: pytest.FixtureRequest) -> Iterator[Namespace]:
    """A fresh namespace for this test (a `Namespace`: `.name`, `.apply`, `.get`,
    `.list`), named after the test and labelled ``operator-kit-test=true``; deleted
    afterwards (without waiting for it to go)."""
    ns = cluster.namespace(namespace_prefix(request.node.name))
    yield ns
    ns.delete()


@pytest.fixture(scope="session")
def member_clusters(cluster: TestCluster, tmp_path_factory: pytest.TempPathFactory,
                    ) -> Iterator[dict[str, TestCluster]]:
    """Two member clusters besides ``cluster`` (the hub), by name (``m1``, ``m2``), for the
    whole session: the kubeconfigs in OPERATOR_KIT_TEST_FLEET_KUBECONFIGS, or two local
    planes (`operator_kit.localcluster`) started on first use and stopped after the
    session. A provider over them: ``StaticClusters({n: c.kubeconfig for n, c in
    member_clusters.items()})``."""
    from operator_kit.localcluster import BinariesError, LocalCluster, LocalClusterError
    from operator_kit.testing.cluster import TestCluster

    planes: list[LocalCluster] = []
    named = [p for p in os.environ.get(FLEET_ENV, "").split(os.pathsep) if p]
    try:
        while len(named) < 2:
            plane = LocalCluster(tmp_path_factory.mktemp(f"member-plane-{len(named)}"))
            planes.append(plane)
            try:
                named.append(str(plane.up()))
            except (LocalClusterError, BinariesError) as err:
                message = f"member clusters: a local plane would not start: {err}"
                if TestCluster.required():
                    pytest.fail(message, pytrace=False)
                pytest.skip(message)
        yield {f"m{i + 1}": TestCluster(path) for i, path in enumerate(named[:2])}
    finally:
        for plane in planes:
            plane.down()
