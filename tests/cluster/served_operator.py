"""An operator for gunicorn tests: ``OPERATOR_KIT_APP=tests.cluster.served_operator:operator``;
``python -m tests.cluster.served_operator [flags]`` runs it plainly (`Operator.main`).
``TEST_LEADER_ELECTION=1`` makes it elect a leader (Lease ``served-operator``). A Widget
whose message is ``fail`` fails every reconcile (``RuntimeError``)."""

from __future__ import annotations

import os
import sys

from operator_kit import Action, LeaderElection, Operator
from tests.cluster.conftest import Widget, WidgetController


def _fail_on_request(widget: Widget) -> Action:
    if widget.spec.message == "fail":
        raise RuntimeError(f"widget {widget.name} asked to fail")
    return Action.await_change()


# TEST_NAMESPACE empty: every namespace, or those --watch-namespace names
operator = Operator("served-operator", [WidgetController(os.environ["TEST_NAMESPACE"] or None,
                                                         action=_fail_on_request)],
                    kubeconfig=os.environ.get("TEST_KUBECONFIG"),
                    leader_election=LeaderElection() if os.environ.get("TEST_LEADER_ELECTION")
                    else None)

if __name__ == "__main__":
    sys.exit(operator.main())
