"""An operator for gunicorn tests: ``OPERATOR_KIT_APP=tests.cluster.served_operator:operator``."""

from __future__ import annotations

import os

from operator_kit import Operator
from tests.cluster.conftest import WidgetController

operator = Operator("served-operator", [WidgetController(os.environ["TEST_NAMESPACE"])],
                    kubeconfig=os.environ["TEST_KUBECONFIG"])
