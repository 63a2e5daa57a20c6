"""`ctx.patch_status` with a dict, through the real API server, for a kind whose JSON
names are camelCase: the Python name and the JSON name of a field both write the field
the CRD declares (and read back into the status dataclass), and a name that is neither is
a TypeError before any request. The key logic alone: tests/unit/test_status_patch_names.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from operator_kit import Context, Controller, CustomResource, Operator
from operator_kit.testing import Namespace, TestCluster, eventually

from .conftest import RequestCounter


@dataclass
class StepSpec:
    size: int = 1


@dataclass
class LastStep:
    step_name: str = ""
    exit_code: int | None = None


@dataclass
class StepStatus:
    last_run: str | None = None
    done_steps: int | None = None
    last_step: LastStep | None = None


class Stepper(CustomResource):
    group = "names.operator-kit.test"
    version = "v1"
    kind = "Stepper"
    json_names = "camelCase"
    spec: StepSpec
    status: StepStatus


class Writes(Controller[Stepper]):
    """Writes the status with the dict each object's name selects; keeps what happened."""

    resource = Stepper

    def __init__(self, namespace: str, patches: dict[str, dict[str, Any]]) -> None:
        super().__init__()
        self.namespace = namespace
        self.patches = patches
        self.errors: dict[str, TypeError] = {}
        self.written: dict[str, StepStatus] = {}

    def reconcile(self, obj: Stepper, ctx: Context) -> None:
        try:
            self.written[obj.name] = ctx.patch_status(obj, self.patches[obj.name]).status
        except TypeError as err:
            self.errors[obj.name] = err


def test_python_and_json_names_of_a_status_field_both_reach_the_api_server(
        cluster: TestCluster, namespace: Namespace) -> None:
    cluster.install_crd(Stepper)
    controller = Writes(namespace.name, {
        "python": {"last_run": "t1", "done_steps": 2,
                   "last_step": {"step_name": "build", "exit_code": 0}},
        "json": {"lastRun": "t1", "doneSteps": 2,
                 "lastStep": {"stepName": "build", "exitCode": 0}},
        "neither": {"lastrun": "t1"},
    })
    operator = Operator("status-names-test", [controller])
    operator.use(cluster.client)
    spy = RequestCounter(operator)
    operator.start()
    try:
        assert operator.wait_synced(30)
        path = f"/apis/{Stepper.api_version()}/namespaces/{namespace.name}/steppers"
        for name in controller.patches:
            namespace.api.request("POST", path, body=Stepper(
                name, StepSpec(), namespace=namespace.name).to_dict())
        eventually(30, lambda: len(controller.written) + len(controller.errors) == 3,
                   message="each object reconciled")
        for name in ("python", "json"):
            stored = namespace.api.get(f"{path}/{name}")["status"]
            assert stored == {"lastRun": "t1", "doneSteps": 2,
                              "lastStep": {"stepName": "build", "exitCode": 0}}, name
            assert controller.written[name] == StepStatus(
                last_run="t1", done_steps=2, last_step=LastStep("build", 0)), name
        assert "status" not in namespace.api.get(f"{path}/neither")
        assert str(controller.errors["neither"]) == (
            "patch_status(Stepper): status has no field 'lastrun' (its fields: doneSteps, "
            "lastRun, lastStep); the API server would drop it without a word")
        assert spy.count("PATCH", "/steppers/neither") == 0
    finally:
        operator.stop(timeout=10)
