"""Settings read from the environment that more than one layer needs.

A leaf: it imports nothing of operator_kit, so the manifests (which write these variables
into the Deployment) and the command line (which reads them) share one spelling.
"""

from __future__ import annotations

__all__ = ["NAME_ENV"]

# The names of the operator's webhook Service and configurations, when its manifests were
# renamed (a kustomize namePrefix rewrites these values in the Deployment too).
NAME_ENV = {
    "webhook_service": "OPERATOR_KIT_WEBHOOK_SERVICE",
    "validating_configuration": "OPERATOR_KIT_VALIDATING_WEBHOOK_CONFIGURATION",
    "mutating_configuration": "OPERATOR_KIT_MUTATING_WEBHOOK_CONFIGURATION",
}
