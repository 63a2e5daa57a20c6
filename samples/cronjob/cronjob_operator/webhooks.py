"""The CronJob webhooks: defaulting and validation (kubebuilder's CronJobCustomDefaulter
and CronJobCustomValidator)."""

# --8<-- [start:webhooks]
from __future__ import annotations

from cronjob_operator.resources import CronJob
from cronjob_operator.schedule import Schedule
from operator_kit.webhooks import AdmissionRequest, Denied, Webhooks

# A Job's name is the CronJob's plus "-" and a 10-digit time, within 63 characters.
MAX_NAME = 52


def register(webhooks: Webhooks) -> None:
    """Register the CronJob webhooks on the operator's app."""

    @webhooks.mutate(CronJob, "/mutate-cronjob")
    def default(cron: CronJob, request: AdmissionRequest[CronJob]) -> CronJob:
        if cron.spec.successful_jobs_history_limit is None:
            cron.spec.successful_jobs_history_limit = 3
        if cron.spec.failed_jobs_history_limit is None:
            cron.spec.failed_jobs_history_limit = 1
        return cron

    @webhooks.validate(CronJob, "/validate-cronjob")
    def validate(request: AdmissionRequest[CronJob]) -> None:
        cron = request.object
        if cron is None:  # DELETE: nothing to check
            return
        problems = []
        if len(cron.name) > MAX_NAME:
            problems.append(f"metadata.name: must be no more than {MAX_NAME} characters")
        try:
            Schedule.parse(cron.spec.schedule)
        except ValueError as err:
            problems.append(f"spec.schedule: {err}")
        if "spec" not in cron.spec.job_template:
            problems.append("spec.jobTemplate.spec: required (the Job's spec)")
        if problems:
            raise Denied("; ".join(problems))
# --8<-- [end:webhooks]
