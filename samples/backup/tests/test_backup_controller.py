"""The Backup controller against a real API server."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from backup_operator import Backup, BackupController, BackupSpec
from kubernetes.client.exceptions import ApiException

from operator_kit import Operator
from operator_kit.manifests import crd
from operator_kit.testing import Namespace, TestCluster, eventually, running

BACKUPS = "/apis/example.com/v1/namespaces/{ns}/backups"


@pytest.fixture(scope="module")
def backup_operator(cluster: TestCluster) -> Iterator[Operator]:
    # v1 only: serving v2 without its conversion webhook would let the API server prune
    # v1-only fields from objects it rewrites (the end-to-end test runs the webhook).
    definition = crd(Backup)
    definition["spec"]["versions"] = [v for v in definition["spec"]["versions"]
                                      if v["name"] == "v1"]
    cluster.install_crd(definition)
    with running(Operator("backup-operator", [BackupController()]), cluster) as operator:
        yield operator
        # Keep the operator running until the tests' namespaces are gone: their Backups
        # carry its finalizer, which only it removes.
        eventually(120, lambda: not cluster.api.get("/apis/example.com/v1/backups")["items"],
                   message="every test Backup finalized")


def create(ns: Namespace, name: str, schedule: str = "0 3 * * *",
           database: str = "orders") -> dict[str, Any]:
    body = Backup(name, BackupSpec(schedule=schedule, database=database),
                  namespace=ns.name).to_dict()
    result: dict[str, Any] = ns.api.request("POST", BACKUPS.format(ns=ns.name), body=body)
    return result


def backup(ns: Namespace, name: str) -> dict[str, Any] | None:
    result: dict[str, Any] | None = ns.get("example.com/v1", "Backup", name)
    return result


@pytest.mark.usefixtures("backup_operator")
def test_backup_gets_a_cron_job_with_its_schedule_status_and_an_event(
        namespace: Namespace) -> None:
    created = create(namespace, "nightly", schedule="0 3 * * *", database="orders")
    job = eventually(20, lambda: namespace.get("batch/v1", "CronJob", "nightly"))
    assert job["spec"]["schedule"] == "0 3 * * *"
    assert "orders" in json.dumps(job["spec"]["jobTemplate"])
    owner = job["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"]) == ("Backup", created["metadata"]["uid"])

    def ready() -> dict[str, Any]:
        status: dict[str, Any] = (backup(namespace, "nightly") or {}).get("status", {})
        assert status.get("observedGeneration") == 1, status
        return status

    status = eventually(20, ready)
    assert status.get("last_run") is None, "the CronJob has not run yet"
    assert status["conditions"][0]["type"] == "Ready"
    assert status["conditions"][0]["status"] == "True"
    events = eventually(20, lambda: [e for e in namespace.list("v1", "Event")
                                     if e["reason"] == "Scheduled"])
    assert "orders" in events[0]["message"]


@pytest.mark.usefixtures("backup_operator")
def test_schedule_change_is_applied_to_the_cron_job(namespace: Namespace) -> None:
    create(namespace, "hourly", schedule="0 * * * *")
    eventually(20, lambda: namespace.get("batch/v1", "CronJob", "hourly"))
    namespace.api.request("PATCH", BACKUPS.format(ns=namespace.name) + "/hourly",
                          body={"spec": {"schedule": "30 * * * *"}},
                          content_type="application/merge-patch+json")
    eventually(20, lambda: namespace.get("batch/v1", "CronJob", "hourly")["spec"]["schedule"]
               == "30 * * * *")


@pytest.mark.usefixtures("backup_operator")
def test_deleting_a_backup_cleans_its_catalog_entry_and_collects_the_cron_job(
        namespace: Namespace) -> None:
    create(namespace, "weekly", database="users")
    create(namespace, "keep", database="orders")

    def catalog() -> dict[str, str]:
        cm = namespace.get("v1", "ConfigMap", "backup-catalog")
        return dict(cm.get("data") or {}) if cm else {}

    eventually(20, lambda: {"weekly", "keep"} <= set(catalog()))
    assert backup(namespace, "weekly")["metadata"]["finalizers"] == [  # type: ignore[index]
        "example.com/cleanup"]
    namespace.api.request("DELETE", BACKUPS.format(ns=namespace.name) + "/weekly")
    eventually(20, lambda: backup(namespace, "weekly") is None)
    assert set(catalog()) == {"keep"}, "cleanup removed exactly the deleted backup's entry"
    eventually(90, lambda: namespace.get("batch/v1", "CronJob", "weekly") is None,
               message="the garbage collector deletes the owned CronJob")
    try:
        namespace.api.get(f"/apis/batch/v1/namespaces/{namespace.name}/cronjobs/keep")
    except ApiException as err:  # pragma: no cover - reported by the assertion
        raise AssertionError("the other backup's CronJob must stay") from err


@pytest.mark.usefixtures("backup_operator")
def test_backups_created_together_in_a_fresh_namespace_all_reach_the_catalog_without_errors(
        namespace: Namespace) -> None:
    from concurrent.futures import ThreadPoolExecutor

    names = [f"b{i}" for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: create(namespace, n), names))

    def catalog() -> set[str]:
        cm = namespace.get("v1", "ConfigMap", "backup-catalog") or {}
        return set(cm.get("data") or {})

    eventually(30, lambda: set(names) <= catalog())
    errors = namespace.list("v1", "Event", fieldSelector="reason=ReconcileError")
    assert errors == [], [e["message"] for e in errors]


@pytest.mark.usefixtures("backup_operator")
def test_a_backup_that_does_not_fit_the_catalog_says_so_in_status_and_is_not_retried(
        namespace: Namespace) -> None:
    namespace.api.request("POST", f"/api/v1/namespaces/{namespace.name}/configmaps", body={
        "metadata": {"name": "backup-catalog"}, "data": {"filler": "x" * 1_048_560}})
    create(namespace, "late")

    def condition() -> dict[str, Any] | None:
        status = (backup(namespace, "late") or {}).get("status") or {}
        return next((c for c in status.get("conditions") or ()
                     if c["type"] == "Cataloged"), None)

    found = eventually(30, condition)
    assert (found["status"], found["reason"]) == ("False", "CatalogFull")
    assert namespace.list("v1", "Event", fieldSelector="reason=ReconcileError") == []


@pytest.mark.usefixtures("backup_operator")
def test_conditions_follow_the_generation_and_keep_their_transition_time(
        namespace: Namespace) -> None:
    create(namespace, "weekly", schedule="0 4 * * 0")

    def ready_for(generation: int) -> Any:
        def check() -> dict[str, Any]:
            status = (backup(namespace, "weekly") or {}).get("status") or {}
            found: dict[str, Any] = next(c for c in status.get("conditions") or ()
                                         if c["type"] == "Ready")
            assert found["observedGeneration"] == generation, found
            return found
        return check

    first = eventually(20, ready_for(1))
    time.sleep(1.1)  # a transition now would carry another second
    namespace.api.request("PATCH", BACKUPS.format(ns=namespace.name) + "/weekly",
                          body={"spec": {"schedule": "0 5 * * 0"}},
                          content_type="application/merge-patch+json")
    second = eventually(20, ready_for(2))
    assert second["status"] == "True"
    assert second["lastTransitionTime"] == first["lastTransitionTime"], "status did not change"
