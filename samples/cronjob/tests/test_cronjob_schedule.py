"""The tutorial's pure logic: cron schedules, missed runs, the Job for a run."""

from __future__ import annotations

import datetime as dt

import pytest
from cronjob_operator import CronJob, CronJobSpec
from cronjob_operator.controller import SCHEDULED_AT, job_for, missed_run
from cronjob_operator.schedule import Schedule

UTC = dt.timezone.utc


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(("schedule", "after", "expected"), [
    ("* * * * *", "2026-12-03 10:00:30", "2026-12-03 10:01:00"),
    ("*/15 * * * *", "2026-12-03 10:01:00", "2026-12-03 10:15:00"),
    ("0 3 * * *", "2026-12-03 03:00:00", "2026-12-04 03:00:00"),
    ("30 9 * * 1-5", "2026-12-04 10:00:00", "2026-12-07 09:30:00"),  # Friday -> Monday
    ("0 0 29 2 *", "2026-03-01 00:00:00", "2028-02-29 00:00:00"),
    ("@hourly", "2026-12-31 23:59:00", "2027-01-01 00:00:00"),
    ("0 0 1,15 * *", "2026-12-02 00:00:00", "2026-12-15 00:00:00"),
    ("0 0 * * 7", "2026-12-03 00:00:00", "2026-12-06 00:00:00"),  # 7 is Sunday too
])
def test_next_after_finds_the_next_firing_time(schedule: str, after: str, expected: str) -> None:
    assert Schedule.parse(schedule).next_after(at(after)) == at(expected)


def test_day_of_month_and_day_of_week_both_set_means_either() -> None:
    schedule = Schedule.parse("0 0 13 * 5")  # the 13th, or any Friday
    assert schedule.next_after(at("2026-12-03 00:00:00")) == at("2026-12-04 00:00:00")


@pytest.mark.parametrize(("schedule", "message"), [
    ("* * * *", "needs 5 fields"),
    ("61 * * * *", "minute '61'"),
    ("* * * * mon", "day of week 'mon'"),
    ("*/0 * * * *", "outside 0-59"),
])
def test_a_bad_schedule_names_the_field(schedule: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Schedule.parse(schedule)


def cron(schedule: str = "* * * * *", created: str = "2026-12-03 10:00:10",
         **spec: object) -> CronJob:
    obj = CronJob("tick", CronJobSpec(schedule=schedule, job_template={"spec": {}}, **spec),  # type: ignore[arg-type]
                  namespace="default")
    obj.metadata["creationTimestamp"] = at(created).strftime("%Y-%m-%dT%H:%M:%SZ")
    return obj


# --8<-- [start:missed]
def test_the_missed_run_is_the_latest_one_due_and_the_next_one_follows() -> None:
    missed, upcoming = missed_run(cron(), at("2026-12-03 10:03:30"))
    assert (missed, upcoming) == (at("2026-12-03 10:03:00"), at("2026-12-03 10:04:00"))


def test_no_run_is_missed_before_the_first_firing() -> None:
    assert missed_run(cron(), at("2026-12-03 10:00:50")) == (None, at("2026-12-03 10:01:00"))
# --8<-- [end:missed]


def test_too_many_missed_runs_say_what_to_do() -> None:
    with pytest.raises(ValueError, match="startingDeadlineSeconds"):
        missed_run(cron(), at("2026-12-04 10:00:00"))


def test_a_starting_deadline_bounds_how_far_back_runs_count() -> None:
    missed, _ = missed_run(cron(starting_deadline_seconds=120), at("2026-12-04 10:00:30"))
    assert missed == at("2026-12-04 10:00:00")


def test_the_job_for_a_run_has_a_name_per_run_and_records_the_time() -> None:
    obj = cron()
    obj.spec.job_template = {"metadata": {"labels": {"app": "tick"}},
                             "spec": {"template": {"spec": {"containers": []}}}}
    job = job_for(obj, at("2026-12-03 10:03:00"))
    assert job["metadata"]["name"] == f"tick-{int(at('2026-12-03 10:03:00').timestamp())}"
    assert job["metadata"]["labels"] == {"app": "tick"}
    assert job["metadata"]["annotations"] == {SCHEDULED_AT: "2026-12-03T10:03:00Z"}
    assert job["spec"] == obj.spec.job_template["spec"]
