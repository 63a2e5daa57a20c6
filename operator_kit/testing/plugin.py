"""pytest plugin: the ``cluster`` and ``namespace`` fixtures.

``cluster`` (session scope) is `TestCluster.from_env()`. With no cluster configured the
test is skipped, or fails when OPERATOR_KIT_TEST_REQUIRE_KUBERNETES is set — a CI run
without its cluster must be red, not silently green. ``namespace`` is a fresh namespace
per test, deleted afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from operator_kit.testing import Namespace, NoTestCluster, TestCluster


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
    try:
        return TestCluster.from_env()
    except NoTestCluster as err:
        if TestCluster.required():
            pytest.fail(
                f"a real cluster is required (OPERATOR_KIT_TEST_REQUIRE_KUBERNETES): {err}",
                pytrace=False,
            )
        pytest.skip(str(err))


@pytest.fixture
def namespace(cluster: TestCluster, request: pytest.FixtureRequest) -> Iterator[Namespace]:
    """A fresh namespace for this test (a `Namespace`: `.name`, `.apply`, `.get`,
    `.list`), named after the test and labelled ``operator-kit-test=true``; deleted
    afterwards (without waiting for it to go)."""
    prefix = request.node.name.removeprefix("test_").replace("_", "-")[:40].strip("-").lower()
    ns = cluster.namespace(prefix or "test")
    yield ns
    ns.delete()
