"""An operator of its own kind for the kubectl tests of the generated manifests
(``python -m operator_kit.manifests tests.cluster.manifest_operator:operator``): applying
and deleting its stream touches no CRD another test uses."""

from __future__ import annotations

from dataclasses import dataclass

from operator_kit import Action, Context, Controller, CustomResource, Operator
from operator_kit.webhooks.server import AdmissionRequest


@dataclass
class GizmoSpec:
    size: int


class Gizmo(CustomResource):
    group = "manifests.operator-kit.test"
    version = "v1"
    kind = "Gizmo"
    spec: GizmoSpec


class GizmoController(Controller[Gizmo]):
    resource = Gizmo

    def reconcile(self, gizmo: Gizmo, ctx: Context) -> Action:
        return Action.await_change()


operator = Operator("gizmo-operator", [GizmoController()])


@operator.webhooks.validate(Gizmo, "/validate-gizmo")
def validate(request: AdmissionRequest[Gizmo]) -> None:
    """Accept everything: the test only needs a webhook configuration in the stream."""
