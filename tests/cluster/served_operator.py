"""An operator for gunicorn tests: ``OPERATOR_KIT_APP=tests.cluster.served_operator:operator``;
``python -m tests.cluster.served_operator [flags]`` runs it plainly (`Operator.main`).
``TEST_LEADER_ELECTION=1`` makes it elect a leader (Lease ``served-operator``)."""

from __future__ import annotations

import os
import sys

from operator_kit import LeaderElection, Operator
from tests.cluster.conftest import WidgetController

operator = Operator("served-operator", [WidgetController(os.environ["TEST_NAMESPACE"])],
                    kubeconfig=os.environ.get("TEST_KUBECONFIG"),
                    leader_election=LeaderElection() if os.environ.get("TEST_LEADER_ELECTION")
                    else None)

if __name__ == "__main__":
    sys.exit(operator.main())
