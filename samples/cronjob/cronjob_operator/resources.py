"""The CronJob kind: kubebuilder's ``batch.tutorial.kubebuilder.io/v1`` CronJob."""

# --8<-- [start:resources]
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from operator_kit import Conditions, CustomResource, Maximum, Minimum, MinLength, PrinterColumn


@dataclass
class CronJobSpec:
    """The desired state of a CronJob: what to run, and when."""

    schedule: Annotated[str, MinLength(1)] = field(
        metadata={"description": "The schedule in Cron format, e.g. '*/5 * * * *'."})
    job_template: dict[str, Any] = field(
        metadata={"description": "The Job to create when the schedule fires: a "
                                 "batch/v1 JobTemplateSpec (metadata and spec)."})
    starting_deadline_seconds: Annotated[int, Minimum(0)] | None = field(
        default=None,
        metadata={"description": "A run missed by more than this is skipped."})
    concurrency_policy: Literal["Allow", "Forbid", "Replace"] = field(
        default="Allow",
        metadata={"description": "What to do when a run is due while a Job still runs: "
                                 "Allow another, Forbid (skip this run), Replace the old."})
    suspend: bool = field(default=False, metadata={
        "description": "True stops new runs; Jobs already running go on."})
    # No schema default: the defaulting webhook fills these in, as kubebuilder's does.
    successful_jobs_history_limit: Annotated[int, Minimum(0), Maximum(100)] | None = field(
        default=None, metadata={"description": "Finished Jobs to keep (default 3)."})
    failed_jobs_history_limit: Annotated[int, Minimum(0), Maximum(100)] | None = field(
        default=None, metadata={"description": "Failed Jobs to keep (default 1)."})


@dataclass
class JobReference:
    """A Job this CronJob started that is still running."""

    api_version: str
    kind: str
    name: str
    namespace: str
    uid: str


@dataclass
class CronJobStatus:
    """What the controller last saw."""

    active: list[JobReference] = field(default_factory=list)
    last_schedule_time: dt.datetime | None = None
    conditions: Conditions = field(default_factory=list)


class CronJob(CustomResource):
    """Runs a Job on a schedule."""

    group = "batch.tutorial.kubebuilder.io"
    version = "v1"
    kind = "CronJob"
    json_names = "camelCase"  # jobTemplate, lastScheduleTime: Kubernetes' style
    printer_columns = (
        PrinterColumn("Schedule", ".spec.schedule"),
        PrinterColumn("Suspend", ".spec.suspend", type="boolean"),
        PrinterColumn("Last schedule", ".status.lastScheduleTime", type="date"),
    )
    spec: CronJobSpec
    status: CronJobStatus
# --8<-- [end:resources]
