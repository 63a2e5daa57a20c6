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
    ("0 3 * * MON", "2026-12-03 00:00:00", "2026-12-07 03:00:00"),
    ("0 0 1 JAN *", "2026-12-03 00:00:00", "2027-01-01 00:00:00"),
    ("0 12 ? * sat", "2026-12-03 00:00:00", "2026-12-05 12:00:00"),
])
def test_next_after_finds_the_next_firing_time(schedule: str, after: str, expected: str) -> None:
    assert Schedule.parse(schedule).next_after(at(after)) == at(expected)


def test_day_of_month_and_day_of_week_both_set_means_either() -> None:
    schedule = Schedule.parse("0 0 13 * 5")  # the 13th, or any Friday
    assert schedule.next_after(at("2026-12-03 00:00:00")) == at("2026-12-04 00:00:00")


@pytest.mark.parametrize(("schedule", "message"), [
    ("* * * *", "needs 5 fields"),
    ("61 * * * *", "minute '61'"),
    ("* * * * monday", "day of week 'monday'"),
    ("*/0 * * * *", "step of 0"),
    ("0 0 * * 7", "day of week '7': '7' is outside 0-6"),
])
def test_a_bad_schedule_names_the_field(schedule: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Schedule.parse(schedule)


# robfig/cron's own cases (github.com/robfig/cron v3, parser_test.go and spec_test.go),
# the five-field ones (a six-field one whose seconds are 0 without them): what its
# standard parser, and so a CronJob, accepts, and when it fires.
ROBFIG_NEXT = [  # (after, schedule, next run) from TestNext
    ("2012-07-09 14:45", "0/15 * * * *", "2012-07-09 15:00"),
    ("2012-07-09 14:59", "0/15 * * * *", "2012-07-09 15:00"),
    ("2012-07-09 15:45", "20-35/15 * * * *", "2012-07-09 16:20"),
    ("2012-07-09 23:46", "*/15 * * * *", "2012-07-10 00:00"),
    ("2012-07-09 23:45", "20-35/15 * * * *", "2012-07-10 00:20"),
    ("2012-07-09 23:35", "0 0 9 Apr-Oct ?", "2012-08-09 00:00"),
    ("2012-07-09 23:35", "0 0 */5 Apr,Aug,Oct Mon", "2012-08-01 00:00"),
    ("2012-07-09 23:35", "0 0 */5 Oct Mon", "2012-10-01 00:00"),
    ("2012-07-09 23:35", "0 0 * Feb Mon", "2013-02-04 00:00"),
    ("2012-07-09 23:35", "0 0 * Feb Mon/2", "2013-02-01 00:00"),
    ("2012-12-31 23:59", "* * * * *", "2013-01-01 00:00"),
    ("2012-07-09 23:35", "0 0 29 Feb ?", "2016-02-29 00:00"),
]
ROBFIG_ACTIVATION = [  # (time, schedule, fires then) from TestActivation
    ("2012-07-09 15:00", "0/15 * * * *", True),
    ("2012-07-09 15:45", "0/15 * * * *", True),
    ("2012-07-09 15:40", "0/15 * * * *", False),
    ("2012-07-09 15:05", "5/15 * * * *", True),
    ("2012-07-09 15:20", "5/15 * * * *", True),
    ("2012-07-09 15:50", "5/15 * * * *", True),
    ("2012-07-15 15:00", "0/15 * * Jul *", True),
    ("2012-07-15 15:00", "0/15 * * Jun *", False),
    ("2012-07-15 08:30", "30 08 ? Jul Sun", True),
    ("2012-07-15 08:30", "30 08 15 Jul ?", True),
    ("2012-07-16 08:30", "30 08 ? Jul Sun", False),
    ("2012-07-16 08:30", "30 08 15 Jul ?", False),
    ("2012-07-09 15:00", "@hourly", True),
    ("2012-07-09 15:04", "@hourly", False),
    ("2012-07-09 15:00", "@daily", False),
    ("2012-07-09 00:00", "@daily", True),
    ("2012-07-09 00:00", "@weekly", False),
    ("2012-07-08 00:00", "@weekly", True),
    ("2012-07-08 01:00", "@weekly", False),
    ("2012-07-08 00:00", "@monthly", False),
    ("2012-07-01 00:00", "@monthly", True),
    ("2012-07-15 00:00", "* * 1,15 * Sun", True),  # day of month or of week: either
    ("2012-06-15 00:00", "* * 1,15 * Sun", True),
    ("2012-08-01 00:00", "* * 1,15 * Sun", True),
    ("2012-07-15 00:00", "* * */10 * Sun", True),
    ("2012-07-15 00:00", "* * * * Mon", False),  # one of them *: both must match
    ("2012-07-09 00:00", "* * 1,15 * *", False),
    ("2012-07-15 00:00", "* * 1,15 * *", True),
    ("2012-07-15 00:00", "* * */2 * Sun", True),
]
ROBFIG_FIELDS = [  # (field text, low, high, values) from TestRange and TestField
    ("5", 0, 59, {5}), ("5-5", 0, 59, {5}), ("5-7", 0, 59, {5, 6, 7}),
    ("5-6/2", 0, 59, {5}), ("5-7/2", 0, 59, {5, 7}), ("5-7/1", 0, 59, {5, 6, 7}),
    ("*/2", 1, 12, {1, 3, 5, 7, 9, 11}), ("5,6,7", 1, 31, {5, 6, 7}),
    ("1,5-7/2,3", 1, 31, {1, 3, 5, 7}),
]
ROBFIG_ERRORS = [  # (schedule, robfig's error) from TestRange and TestParseScheduleErrors
    ("5--5 * * * *", "too many hyphens"),
    ("* * * jan-x *", "failed to parse int from"),
    ("* * 2-x * *", "failed to parse int from"),
    ("*/-12 * * * *", "negative number"),
    ("*//2 * * * *", "too many slashes"),
    ("* * 0 * *", "below minimum"),
    ("60 * * * *", "above maximum"),
    ("* * * * 7", "above maximum"),
    ("5-3 * * * *", "beyond end of range"),
    ("*/0 * * * *", "should be a positive number"),
    ("5 j * * *", "failed to parse int from"),
    ("* * * *", "expected exactly 5 fields"),
    ("", "empty spec string"),
    ("@unrecognized", "unrecognized descriptor"),
]


def minute(text: str) -> dt.datetime:
    return dt.datetime.strptime(text, "%Y-%m-%d %H:%M").replace(tzinfo=UTC)


@pytest.mark.parametrize(("after", "schedule", "expected"), ROBFIG_NEXT)
def test_the_next_run_is_robfigs(after: str, schedule: str, expected: str) -> None:
    assert Schedule.parse(schedule).next_after(minute(after)) == minute(expected)


@pytest.mark.parametrize(("when", "schedule", "fires"), ROBFIG_ACTIVATION)
def test_it_fires_when_robfigs_fires(when: str, schedule: str, fires: bool) -> None:
    t = minute(when)
    assert (Schedule.parse(schedule).next_after(t - dt.timedelta(minutes=1)) == t) is fires


@pytest.mark.parametrize(("text", "low", "high", "values"), ROBFIG_FIELDS)
def test_a_field_means_what_robfigs_does(text: str, low: int, high: int,
                                         values: set[int]) -> None:
    # a field of those bounds: minute (0-59), month (1-12) or day of month (1-31)
    where = {(0, 59): 0, (1, 12): 3, (1, 31): 2}[(low, high)]
    fields = ["*"] * 5
    fields[where] = text
    parsed = Schedule.parse(" ".join(fields))
    assert [parsed.minutes, parsed.hours, parsed.days, parsed.months][where] == values


@pytest.mark.parametrize(("schedule", "robfig_says"), ROBFIG_ERRORS)
def test_what_robfig_refuses_is_refused(schedule: str, robfig_says: str) -> None:
    with pytest.raises(ValueError, match="schedule"):
        Schedule.parse(schedule)


@pytest.mark.parametrize(("names", "numbers"), [
    ("0 3 * * MON", "0 3 * * 1"), ("0 3 * * mon-fri", "0 3 * * 1-5"),
    ("0 3 * * Sun,SAT", "0 3 * * 0,6"), ("0 0 1 JAN *", "0 0 1 1 *"),
    ("0 0 1 jan-Mar *", "0 0 1 1-3 *"), ("0 0 1 dec/2 *", "0 0 1 12 *"),
    ("0 0 ? * *", "0 0 * * *"), ("? ? ? ? ?", "* * * * *"), ("*/1 * * * *", "* * * * *"),
    ("+5 * * * *", "5 * * * *"), ("1,,2 * * * *", "1,2 * * * *"),
])
def test_names_question_marks_and_spellings_mean_their_numbers(names: str,
                                                                numbers: str) -> None:
    assert Schedule.parse(names) == Schedule.parse(numbers)


@pytest.mark.parametrize(("schedule", "message"), [
    ("TZ=UTC 0 3 * * *", "a time zone in the schedule is not accepted"),
    ("CRON_TZ=Europe/Paris 0 3 * * *", "these schedules are in UTC"),
    ("@every 5m", "@every is not supported here"),
    ("@Hourly", "use one of @yearly"),  # descriptors are lower case only, as in robfig
    ("0 0 jan * *", "day of month 'jan'"),  # names only where they mean something
    ("0 0 * * 1/0", "step of 0"),
    (", * * * *", "minute ',': names no value"),
])
def test_what_is_refused_here_says_why(schedule: str, message: str) -> None:
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
