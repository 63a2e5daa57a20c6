"""An operator of its own kind, with a finalizer, for the uninstall tests
(``python -m operator_kit.manifests tests.cluster.uninstall_operator:operator
--uninstall``): deleting its stream touches no CRD another test uses."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from operator_kit import Action, Context, Controller, CustomResource, Operator


@dataclass
class KeepsakeSpec:
    note: str = ""


class Keepsake(CustomResource):
    group = "uninstall.operator-kit.test"
    version = "v1"
    kind = "Keepsake"
    spec: KeepsakeSpec


class KeepsakeController(Controller[Keepsake]):
    """Does nothing but hold a finalizer, and records each cleanup it runs."""

    resource = Keepsake
    finalizer = "uninstall.operator-kit.test/cleanup"

    def __init__(self) -> None:
        super().__init__()
        self.cleaned: list[str] = []
        self._lock = threading.Lock()

    def reconcile(self, keepsake: Keepsake, ctx: Context) -> Action:
        return Action.await_change()

    def cleanup(self, keepsake: Keepsake, ctx: Context) -> None:
        with self._lock:
            self.cleaned.append(f"{keepsake.namespace}/{keepsake.name}")


def make_operator() -> tuple[Operator, KeepsakeController]:
    """A new operator (an Operator runs once) and its controller."""
    controller = KeepsakeController()
    return Operator("keepsake-operator", [controller]), controller


operator, controller = make_operator()
FINALIZER = controller.finalizer
