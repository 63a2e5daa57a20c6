"""`Context.patch_status` with a dict under ``json_names = "camelCase"``: a field may be
named by its JSON name or its Python name, nested objects' too; a name that is neither,
or one field named both ways, is a TypeError naming it. (Against the real API server:
tests/cluster/test_status_names.py.)"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from operator_kit import CustomResource
from operator_kit.runtime.context import _status_patch


@dataclass
class Step:
    step_name: str = ""
    exit_code: int | None = None


@dataclass
class Progress:
    done_steps: int = 0
    last_step: Step | None = None


@dataclass
class JobSpec:
    size: int = 1


@dataclass
class JobStatus:
    last_run: str | None = None
    progress: Progress | None = None
    failed_steps: list[Step] = field(default_factory=list)


class Job(CustomResource):
    group = "names.operator-kit.test"
    version = "v1"
    kind = "Job"
    json_names = "camelCase"
    spec: JobSpec
    status: JobStatus


class PlainJob(CustomResource):
    group = "names.operator-kit.test"
    version = "v1"
    kind = "PlainJob"
    spec: JobSpec
    status: JobStatus


def patch(kind: type[CustomResource], keys: dict[str, object]) -> dict[str, object]:
    shape = kind.status_shape()
    assert shape is not None
    return _status_patch(kind.kind, shape, keys, "status")


@pytest.mark.parametrize("keys", [{"last_run": "now"}, {"lastRun": "now"}])
def test_the_python_and_the_json_name_of_a_field_both_write_its_json_name(
        keys: dict[str, object]) -> None:
    assert patch(Job, keys) == {"lastRun": "now"}


def test_nested_objects_and_lists_of_objects_take_both_names_too() -> None:
    assert patch(Job, {"progress": {"done_steps": 2, "lastStep": {"step_name": "b"}},
                       "failed_steps": [{"stepName": "c", "exit_code": 1}, None]}) == {
        "progress": {"doneSteps": 2, "lastStep": {"stepName": "b"}},
        "failedSteps": [{"stepName": "c", "exitCode": 1}, None]}


def test_none_still_deletes_a_field_named_either_way() -> None:
    assert patch(Job, {"last_run": None, "progress": None}) == {"lastRun": None,
                                                                "progress": None}


def test_a_name_that_is_neither_is_refused_naming_it_and_the_fields() -> None:
    with pytest.raises(TypeError) as raised:
        patch(Job, {"lastrun": "now"})
    assert str(raised.value) == (
        "patch_status(Job): status has no field 'lastrun' (its fields: failedSteps, "
        "lastRun, progress); the API server would drop it without a word")


def test_a_nested_name_that_is_neither_is_refused_with_its_path() -> None:
    with pytest.raises(TypeError, match=r"status\.failedSteps\[0\] has no field 'code'"):
        patch(Job, {"failedSteps": [{"code": 1}]})


def test_one_field_named_both_ways_is_refused() -> None:
    with pytest.raises(TypeError, match="status names the field 'lastRun' twice "
                       r"\('last_run' is its Python name\); keep one key"):
        patch(Job, {"last_run": "a", "lastRun": "b"})


def test_a_python_named_kind_is_unchanged() -> None:
    assert patch(PlainJob, {"last_run": "now"}) == {"last_run": "now"}
    with pytest.raises(TypeError, match="has no field 'lastRun'"):
        patch(PlainJob, {"lastRun": "now"})
