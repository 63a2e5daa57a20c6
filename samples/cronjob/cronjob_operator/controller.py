"""The CronJob controller: kubebuilder's CronJobReconciler, step by step."""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Callable
from typing import Any

from cronjob_operator.resources import CronJob, CronJobStatus, JobReference
from cronjob_operator.schedule import Schedule
from operator_kit import Action, Context, Controller, set_condition

# --8<-- [start:helpers]
SCHEDULED_AT = "batch.tutorial.kubebuilder.io/scheduled-time"
MAX_MISSED = 100  # more missed runs than this: the clock or the schedule is wrong

Clock = Callable[[], dt.datetime]


def utc_now() -> dt.datetime:
    """The real clock."""
    return dt.datetime.now(dt.timezone.utc)


def finished(job: dict[str, Any]) -> str | None:
    """``Complete`` or ``Failed`` once the Job has finished, else None."""
    for condition in job.get("status", {}).get("conditions", []):
        if condition["type"] in ("Complete", "Failed") and condition["status"] == "True":
            return str(condition["type"])
    return None


def scheduled_time(job: dict[str, Any]) -> dt.datetime | None:
    """The run a Job was created for, from the annotation the controller puts on it."""
    value = job["metadata"].get("annotations", {}).get(SCHEDULED_AT)
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def missed_run(cron: CronJob, now: dt.datetime) -> tuple[dt.datetime | None, dt.datetime]:
    """The latest run due by `now` that has not started (None: none), and the next one."""
    schedule = Schedule.parse(cron.spec.schedule)
    last = cron.status.last_schedule_time if cron.status else None
    earliest = last or _parse_time(cron.metadata["creationTimestamp"])
    if cron.spec.starting_deadline_seconds is not None:
        # Runs older than the deadline could not start anyway: do not count them.
        earliest = max(earliest, now - dt.timedelta(seconds=cron.spec.starting_deadline_seconds))
    missed: dt.datetime | None = None
    t = schedule.next_after(earliest)
    count = 0
    while t <= now:
        missed, count = t, count + 1
        if count > MAX_MISSED:
            raise ValueError(f"more than {MAX_MISSED} missed runs: check the clock, or set "
                             "spec.startingDeadlineSeconds")
        t = schedule.next_after(t)
    return missed, t


def job_for(cron: CronJob, run: dt.datetime) -> dict[str, Any]:
    """The Job for the run at `run`: the template, a deterministic name, the run time."""
    template = cron.spec.job_template
    metadata = template.get("metadata", {})
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            # The same name for the same run: a second create is a 409, never a twin.
            "name": f"{cron.name}-{int(run.timestamp())}",
            "labels": dict(metadata.get("labels", {})),
            "annotations": {**metadata.get("annotations", {}),
                            SCHEDULED_AT: run.strftime("%Y-%m-%dT%H:%M:%SZ")},
        },
        "spec": template["spec"],
    }
# --8<-- [end:helpers]


# --8<-- [start:controller]
class CronJobController(Controller[CronJob]):
    """Starts a Job whenever a CronJob's schedule fires."""

    resource = CronJob
    owns = ("batch/v1/Job",)

    def __init__(self, clock: Clock = utc_now) -> None:
        super().__init__()
        self.clock = clock  # tests pass a clock they move by hand

    def reconcile(self, cron: CronJob, ctx: Context) -> Action:
        # 1. List the Jobs this CronJob owns (from the cache) and sort them out.
        jobs = ctx.owned(cron, "batch/v1/Job")
        active = [j for j in jobs if finished(j) is None]
        successful = [j for j in jobs if finished(j) == "Complete"]
        failed = [j for j in jobs if finished(j) == "Failed"]
        times = [t for t in map(scheduled_time, jobs) if t is not None]

        # 2. Write the status: what runs now, and the last run started. (A copy of the
        #    conditions: patch_status compares with `cron`, which must stay as read.)
        status = CronJobStatus(
            active=[JobReference("batch/v1", "Job", j["metadata"]["name"], cron.namespace or "",
                                 j["metadata"]["uid"]) for j in active],
            last_schedule_time=max(times, default=cron.status.last_schedule_time
                                   if cron.status else None),
            conditions=copy.deepcopy(cron.status.conditions) if cron.status else [],
        )

        # 3. Keep only as many finished Jobs as the history limits say.
        for kept, limit in ((successful, cron.spec.successful_jobs_history_limit),
                            (failed, cron.spec.failed_jobs_history_limit)):
            kept.sort(key=lambda j: scheduled_time(j) or dt.datetime.min)
            for old in kept[:max(0, len(kept) - (limit if limit is not None else len(kept)))]:
                ctx.delete("batch/v1/Job", old["metadata"]["name"])

        # 4. Suspended: no new runs.
        if cron.spec.suspend:
            set_condition(status.conditions, "Ready", "False", reason="Suspended",
                          message="spec.suspend is true", observed_generation=cron.generation)
            ctx.patch_status(cron, status)
            return Action.await_change()

        # 5. Find the run that is due, and the next one.
        now = self.clock()
        missed, upcoming = missed_run(cron, now)
        set_condition(status.conditions, "Ready", "True", reason="Scheduled",
                      message=f"next run at {upcoming:%Y-%m-%dT%H:%M:%SZ}",
                      observed_generation=cron.generation)
        wake = Action.requeue(max(1.0, (upcoming - now).total_seconds()))
        deadline = cron.spec.starting_deadline_seconds
        if missed is None or (deadline is not None
                              and missed + dt.timedelta(seconds=deadline) < now):
            ctx.patch_status(cron, status)
            return wake

        # 6. The concurrency policy decides about the Jobs still running.
        if cron.spec.concurrency_policy == "Forbid" and active:
            ctx.log.info("run at %s skipped: %d Job(s) still active", missed, len(active))
            ctx.patch_status(cron, status)
            return wake
        if cron.spec.concurrency_policy == "Replace":
            for job in active:
                ctx.delete("batch/v1/Job", job["metadata"]["name"])
            status.active = []

        # 7. Start the run: a Job owned by the CronJob (deleted with it).
        job = ctx.create(job_for(cron, missed), owner=cron)
        ctx.event(cron, False, "SuccessfulCreate", f"created Job {job['metadata']['name']}")
        status.active.append(JobReference("batch/v1", "Job", job["metadata"]["name"],
                                          cron.namespace or "", job["metadata"]["uid"]))
        status.last_schedule_time = missed
        ctx.patch_status(cron, status)
        return wake
# --8<-- [end:controller]


def _parse_time(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
