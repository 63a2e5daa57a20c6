"""The tutorial's controller against a real API server, with a clock the test moves.

The local control plane runs no Job controller, so the tests finish Jobs themselves by
writing their status, as a kubelet and the Job controller would.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from cronjob_operator import CronJob, CronJobController, CronJobSpec
from cronjob_operator.controller import SCHEDULED_AT

from operator_kit import Operator
from operator_kit.testing import Namespace, TestCluster, eventually, running

CRONJOBS = "/apis/batch.tutorial.kubebuilder.io/v1/namespaces/{ns}/cronjobs"
TEMPLATE = {"metadata": {"labels": {"app": "tick"}},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "tick", "image": "busybox:1.36", "command": ["date"]}]}}}}


# --8<-- [start:fixtures]
class Clock:
    """The controller's clock: real time plus an offset the test moves forward."""

    def __init__(self) -> None:
        self.offset = dt.timedelta()
        self._lock = threading.Lock()

    def __call__(self) -> dt.datetime:
        with self._lock:
            return dt.datetime.now(dt.timezone.utc) + self.offset

    def advance(self, minutes: int) -> None:
        with self._lock:
            self.offset += dt.timedelta(minutes=minutes)

    def reset(self) -> None:
        with self._lock:
            self.offset = dt.timedelta()


@pytest.fixture(scope="module")
def shared_clock() -> Clock:
    return Clock()


@pytest.fixture
def clock(shared_clock: Clock) -> Clock:
    """The operator's clock, back at real time for each test: a CronJob's first run
    counts from its creationTimestamp (the API server's real time), so an offset left
    by an earlier test would make runs look missed the moment it is created."""
    shared_clock.reset()
    return shared_clock


@pytest.fixture(scope="module")
def cronjob_operator(cluster: TestCluster, shared_clock: Clock) -> Iterator[Operator]:
    cluster.install_crd(CronJob)
    with running(Operator("cronjob-operator", [CronJobController(shared_clock)]),
                 cluster) as op:
        yield op
# --8<-- [end:fixtures]


def create(ns: Namespace, name: str, **spec: Any) -> dict[str, Any]:
    body = CronJob(name, CronJobSpec(schedule="* * * * *", job_template=TEMPLATE, **spec),
                   namespace=ns.name).to_dict()
    result: dict[str, Any] = ns.api.request("POST", CRONJOBS.format(ns=ns.name), body=body)
    return result


def jobs(ns: Namespace) -> list[dict[str, Any]]:
    return sorted(ns.list("batch/v1", "Job"),
                  key=lambda j: j["metadata"]["annotations"][SCHEDULED_AT])


def job_count(ns: Namespace, count: int) -> Any:
    def check() -> list[dict[str, Any]]:
        found = jobs(ns)
        assert len(found) == count, [j["metadata"]["name"] for j in found]
        return found
    return check


def finish(ns: Namespace, job: dict[str, Any], how: str = "Complete") -> None:
    """Write the status the Job controller would write for a finished Job."""
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    first = "SuccessCriteriaMet" if how == "Complete" else "FailureTarget"
    conditions = [{"type": t, "status": "True", "lastTransitionTime": now,
                   "lastProbeTime": now} for t in (first, how)]
    status: dict[str, Any] = {"startTime": now, "conditions": conditions}
    status.update({"completionTime": now, "succeeded": 1} if how == "Complete"
                  else {"failed": 1})
    ns.api.request("PATCH", f"/apis/batch/v1/namespaces/{ns.name}/jobs/"
                   f"{job['metadata']['name']}/status", body={"status": status},
                   content_type="application/merge-patch+json")


def poke(ns: Namespace, name: str, value: str) -> None:
    """Change the CronJob's spec (a no-op for the schedule) so it is reconciled now."""
    ns.api.request("PATCH", CRONJOBS.format(ns=ns.name) + f"/{name}",
                   body={"spec": {"jobTemplate": {**TEMPLATE, "metadata": {
                       "labels": {"app": "tick"}, "annotations": {"poke": value}}}}},
                   content_type="application/merge-patch+json")


def status(ns: Namespace, name: str) -> dict[str, Any]:
    obj = ns.get("batch.tutorial.kubebuilder.io/v1", "CronJob", name) or {}
    result: dict[str, Any] = obj.get("status", {})
    return result


def ready(ns: Namespace, name: str) -> dict[str, Any]:
    """The CronJob's Ready condition (its message names the next run)."""
    conditions = {c["type"]: c for c in status(ns, name).get("conditions", [])}
    result: dict[str, Any] = conditions.get("Ready", {})
    return result


# --8<-- [start:test]
@pytest.mark.usefixtures("cronjob_operator")
def test_a_due_run_creates_a_job_owned_by_the_cron_job_and_listed_as_active(
        namespace: Namespace, clock: Clock) -> None:
    created = create(namespace, "tick")
    clock.advance(2)  # the first run is now due
    poke(namespace, "tick", "1")
    [job] = eventually(20, job_count(namespace, 1))
    owner = job["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == (
        "CronJob", created["metadata"]["uid"], True)
    assert job["metadata"]["labels"]["app"] == "tick"
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == ["date"]

    def active() -> dict[str, Any]:
        current = status(namespace, "tick")
        assert [a["name"] for a in current.get("active", [])] == [job["metadata"]["name"]]
        return current

    current = eventually(20, active)
    assert current["lastScheduleTime"] == job["metadata"]["annotations"][SCHEDULED_AT]
    ready = {c["type"]: c for c in current["conditions"]}["Ready"]
    assert (ready["status"], ready["reason"]) == ("True", "Scheduled")
    events = eventually(20, lambda: [e for e in namespace.list("v1", "Event")
                                     if e["reason"] == "SuccessfulCreate"])
    assert job["metadata"]["name"] in events[0]["message"]


@pytest.mark.usefixtures("cronjob_operator")
def test_forbid_skips_a_run_while_a_job_is_active_and_replace_replaces_it(
        namespace: Namespace, clock: Clock) -> None:
    create(namespace, "single", concurrency_policy="Forbid")
    clock.advance(2)
    poke(namespace, "single", "1")
    [first] = eventually(20, job_count(namespace, 1))
    before = eventually(20, lambda: ready(namespace, "single").get("message"))
    clock.advance(2)
    poke(namespace, "single", "2")
    eventually(20, lambda: ready(namespace, "single").get("message") != before,
               message="the run after the advance was considered")
    assert len(jobs(namespace)) == 1, "Forbid: no second Job while the first is active"
    namespace.api.request("PATCH", CRONJOBS.format(ns=namespace.name) + "/single",
                          body={"spec": {"concurrencyPolicy": "Replace"}},
                          content_type="application/merge-patch+json")

    def replaced() -> bool:
        names = [j["metadata"]["name"] for j in jobs(namespace)
                 if not j["metadata"].get("deletionTimestamp")]
        assert len(names) == 1 and names != [first["metadata"]["name"]], names
        return True

    eventually(20, replaced)
# --8<-- [end:test]


@pytest.mark.usefixtures("cronjob_operator")
def test_finished_jobs_beyond_the_history_limit_are_deleted_oldest_first(
        namespace: Namespace, clock: Clock) -> None:
    create(namespace, "keep-one", successful_jobs_history_limit=1)
    clock.advance(2)
    poke(namespace, "keep-one", "1")
    [first] = eventually(20, job_count(namespace, 1))
    finish(namespace, first)
    clock.advance(2)
    poke(namespace, "keep-one", "2")
    [_, second] = eventually(20, job_count(namespace, 2))
    finish(namespace, second)  # two finished, one kept: the older goes

    def only_second() -> bool:
        names = [j["metadata"]["name"] for j in jobs(namespace)
                 if not j["metadata"].get("deletionTimestamp")]
        assert names == [second["metadata"]["name"]], names
        return True

    eventually(30, only_second)


@pytest.mark.usefixtures("cronjob_operator")
def test_a_suspended_cron_job_starts_no_job_and_says_so(
        namespace: Namespace, clock: Clock) -> None:
    create(namespace, "paused", suspend=True)
    clock.advance(2)
    poke(namespace, "paused", "1")

    eventually(20, lambda: ready(namespace, "paused").get("reason") == "Suspended")
    assert jobs(namespace) == []
