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

from typing import TYPE_CHECKING

from operator_kit._lazy import lazy_names

if TYPE_CHECKING:
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

# Loaded on first use (PEP 562): the pytest plugin, a submodule, imports this package in
# every pytest run, which must not pay for the client and the runtime (see `plugin`).
_HOMES = {"admission_review": "operator_kit.testing.admission",
          "reconcile_once": "operator_kit.testing.reconciling",
          **{name: "operator_kit.testing.cluster" for name in (
              "FIELD_MANAGER", "HOW_TO_START", "KUBECONFIG_ENV", "REQUIRE_ENV", "TEST_LABEL",
              "Namespace", "NoTestCluster", "TestCluster", "eventually", "running",
              "stop_process")}}


__getattr__, __dir__ = lazy_names(globals(), _HOMES)


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
