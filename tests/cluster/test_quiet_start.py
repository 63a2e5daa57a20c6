"""An operator started right after its CRD is created (``make install && make run``, every
LocalDeployment test) logs no WARNING: the 404s and 429s the API server answers while the
new CRD becomes established and its storage initialises are logged at INFO
(`operator_kit.runtime.watch_failures`), and the object created then is reconciled. The
rule alone, and that it turns loud after its grace: tests/unit/test_watch_failures.py."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest
from kubernetes.client.exceptions import ApiException

from operator_kit import Context, Controller, CustomResource, Operator
from operator_kit.manifests import crd
from operator_kit.testing import Namespace, TestCluster, eventually

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


@dataclass
class LampSpec:
    watts: int = 1


class Lamp(CustomResource):
    group = "quiet-start.operator-kit.test"
    version = "v1"
    kind = "Lamp"
    spec: LampSpec


class Lamps(Controller[Lamp]):
    resource = Lamp

    def __init__(self, namespace: str) -> None:
        super().__init__()
        self.namespace = namespace
        self.seen: list[str] = []

    def reconcile(self, obj: Lamp, ctx: Context) -> None:
        self.seen.append(obj.name)


def _gone(cluster: TestCluster, name: str) -> bool:
    try:
        cluster.api.get(f"{CRDS}/{name}")
    except ApiException as err:
        if err.status == 404:
            return True
        raise
    return False


def _delete_crd(cluster: TestCluster, name: str) -> None:
    try:
        cluster.api.request("DELETE", f"{CRDS}/{name}")
    except ApiException as err:
        if err.status != 404:
            raise
    eventually(60, lambda: _gone(cluster, name), message=f"CRD {name} deleted")


def test_an_operator_started_right_after_its_crd_is_created_logs_no_warning(
        cluster: TestCluster, namespace: Namespace, caplog: pytest.LogCaptureFixture) -> None:
    definition = crd(Lamp)
    name = definition["metadata"]["name"]
    _delete_crd(cluster, name)  # a fresh CRD, not one an earlier run left established
    caplog.set_level(logging.INFO, logger="operator_kit")
    controller = Lamps(namespace.name)
    operator = Operator("quiet-start-test", [controller])
    operator.use(cluster.client)
    cluster.api.request("POST", CRDS, body=definition)  # not waited for: make install
    operator.start()
    try:
        assert operator.wait_synced(60), "the informer synced once the CRD was established"
        eventually(30, lambda: _created(namespace), message="a Lamp created")
        eventually(30, lambda: "on" in controller.seen, message="the Lamp reconciled")
    finally:
        operator.stop(timeout=10)
        _delete_crd(cluster, name)
    loud = [f"{r.levelname} {r.name}: {r.getMessage()}" for r in caplog.records
            if r.levelno >= logging.WARNING and r.name.startswith("operator_kit")]
    assert loud == []
    quiet = [r.getMessage() for r in caplog.records if "becomes established" in r.getMessage()]
    print(f"\n{len(quiet)} quiet line(s) while the CRD became established: {quiet[:3]}")


def _created(namespace: Namespace) -> bool:
    try:
        namespace.api.request("POST", f"/apis/{Lamp.api_version()}/namespaces/"
                              f"{namespace.name}/lamps",
                              body=Lamp("on", LampSpec(), namespace=namespace.name).to_dict())
    except ApiException as err:
        if err.status in (404, 429):  # not served yet: the test's own client waits too
            return False
        raise
    return True
