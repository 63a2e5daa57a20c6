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
    """The cluster in ``OPERATOR_KIT_TEST_KUBECONFIG`` for the session; skips the test without one,
    or fails it when ``OPERATOR_KIT_TEST_REQUIRE_KUBERNETES`` is set."""
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
    """A fresh namespace named after the test, deleted after it."""
    prefix = request.node.name.removeprefix("test_").replace("_", "-")[:40].strip("-").lower()
    ns = cluster.namespace(prefix or "test")
    yield ns
    ns.delete()
