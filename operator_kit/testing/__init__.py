"""Testing operators against a real API server.

`TestCluster.from_env()` connects to the cluster named by ``OPERATOR_KIT_TEST_KUBECONFIG``
(kind, k3d, or ``python -m operator_kit.localcluster up``). Without it, tests that need
a cluster are skipped — or fail with instructions when
``OPERATOR_KIT_TEST_REQUIRE_KUBERNETES`` is set, as CI does, so a missing cluster can
never pass as green. `install_crd` server-side applies a CRD and waits until it is
served; `namespace(prefix)` gives a fresh, labelled namespace; `eventually` polls;
`stop_process` ends a server a test started (SIGTERM, then SIGKILL).

Nothing here assumes the project's own local plane. Never point these helpers at a
cluster that matters: tests create and delete namespaces and cluster-wide CRDs.

The pytest plugin (`operator_kit.testing.plugin`, registered as an entry point) offers
the ``cluster`` (session) and ``namespace`` (per test) fixtures.
"""

from operator_kit.testing.admission import admission_review
from operator_kit.testing.cluster import (
    FIELD_MANAGER,
    HOW_TO_START,
    KUBECONFIG_ENV,
    REQUIRE_ENV,
    TEST_LABEL,
    Namespace,
    NoTestCluster,
    TestCluster,
    eventually,
    running,
    stop_process,
)
from operator_kit.testing.reconciling import reconcile_once

__all__ = [
    "FIELD_MANAGER",
    "HOW_TO_START",
    "KUBECONFIG_ENV",
    "REQUIRE_ENV",
    "TEST_LABEL",
    "Namespace",
    "NoTestCluster",
    "TestCluster",
    "admission_review",
    "eventually",
    "reconcile_once",
    "running",
    "stop_process",
]
