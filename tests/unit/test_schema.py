"""operator_kit.schema: type hints -> OpenAPI v3 schema, and the JSON codec beside it."""

from __future__ import annotations

import collections
import datetime as dt
import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Union

import pytest
from dataclasses_json import LetterCase, config, dataclass_json

from operator_kit.api.schema import InvalidValue, SchemaError, schema_for, shape_of
from operator_kit.api.shapes import json_copy


class Mode(enum.Enum):
    FULL = "full"
    INCREMENTAL = "incremental"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@dataclass
class Retention:
    """How long backups are kept."""

    days: int
    keep_last: int = 3


@dataclass
class BackupSpec:
    """What to back up and when."""

    schedule: str = field(metadata={"description": "Cron schedule"})
    database: str
    retain: int = 7
    tags: dict[str, str] = field(default_factory=dict)


@dataclass
class Everything:
    name: str
    count: int
    ratio: float
    enabled: bool
    when: dt.datetime
    day: dt.date
    mode: Mode
    level: Level
    kind: Literal["a", "b"]
    port: int | str
    items: list[str]
    seq: Sequence[int]
    labels: dict[str, int]
    free: dict[str, Any]
    anything: Any
    retention: Retention
    retentions: list[Retention]
    maybe: Optional[str] = None  # noqa: UP045 - Optional must keep working
    maybe_too: str | None = None


@dataclass
class Node:
    name: str
    children: list[Node] = field(default_factory=list)


# ---------------------------------------------------------------------------- schema


def test_scalars_map_to_openapi_types() -> None:
    assert schema_for(str) == {"type": "string"}
    assert schema_for(int) == {"type": "integer"}
    assert schema_for(float) == {"type": "number"}
    assert schema_for(bool) == {"type": "boolean"}


def test_dataclass_is_an_object_with_properties_in_field_order() -> None:
    schema = schema_for(Everything)
    assert schema["type"] == "object"
    assert list(schema["properties"]) == [
        "name", "count", "ratio", "enabled", "when", "day", "mode", "level", "kind", "port",
        "items", "seq", "labels", "free", "anything", "retention", "retentions", "maybe",
        "maybe_too",
    ]  # fmt: skip


def test_fields_without_default_are_required() -> None:
    assert schema_for(BackupSpec)["required"] == ["schedule", "database"]


def test_required_is_omitted_when_every_field_has_a_default() -> None:
    @dataclass
    class AllDefaults:
        a: int = 1
        b: list[str] = field(default_factory=list)

    assert "required" not in schema_for(AllDefaults)


def test_optional_field_is_nullable_and_not_required() -> None:
    schema = schema_for(Everything)
    assert schema["properties"]["maybe"] == {"type": "string", "nullable": True}
    assert schema["properties"]["maybe_too"] == {"type": "string", "nullable": True}
    assert "maybe" not in schema["required"]


def test_optional_field_without_default_is_required_but_nullable() -> None:
    @dataclass
    class Status:
        last_run: str | None

    schema = schema_for(Status)
    assert schema["required"] == ["last_run"]
    assert schema["properties"]["last_run"] == {"type": "string", "nullable": True}


def test_list_and_sequence_are_arrays_with_items() -> None:
    props = schema_for(Everything)["properties"]
    assert props["items"] == {"type": "array", "items": {"type": "string"}}
    assert props["seq"] == {"type": "array", "items": {"type": "integer"}}


def test_dict_with_str_keys_is_an_object_with_additional_properties() -> None:
    props = schema_for(Everything)["properties"]
    assert props["labels"] == {"type": "object", "additionalProperties": {"type": "integer"}}


def test_dict_of_any_and_any_preserve_unknown_fields() -> None:
    props = schema_for(Everything)["properties"]
    assert props["free"] == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    assert props["anything"] == {"x-kubernetes-preserve-unknown-fields": True}


def test_nested_dataclass_is_a_nested_object_with_its_docstring() -> None:
    props = schema_for(Everything)["properties"]
    assert props["retention"] == {
        "description": "How long backups are kept.",
        "type": "object",
        "properties": {"days": {"type": "integer"}, "keep_last": {"type": "integer", "default": 3}},
        "required": ["days"],
    }
    assert props["retentions"]["items"] == props["retention"]


def test_descriptions_come_from_field_metadata_and_class_docstring() -> None:
    schema = schema_for(BackupSpec)
    assert schema["description"] == "What to back up and when."
    assert schema["properties"]["schedule"] == {"description": "Cron schedule", "type": "string"}


def test_generated_dataclass_docstring_is_not_a_description() -> None:
    assert "description" not in schema_for(Everything)


def test_field_description_wins_over_the_nested_class_docstring() -> None:
    @dataclass
    class Holder:
        retention: Retention = field(metadata={"description": "Keep them a while"})

    prop = schema_for(Holder)["properties"]["retention"]
    assert prop["description"] == "Keep them a while"
    assert next(iter(prop)) == "description"


def test_enum_is_its_value_type_with_enum_values() -> None:
    props = schema_for(Everything)["properties"]
    assert props["mode"] == {"type": "string", "enum": ["full", "incremental"]}
    assert props["level"] == {"type": "integer", "enum": [1, 2]}


def test_literal_is_an_enum() -> None:
    assert schema_for(Everything)["properties"]["kind"] == {"type": "string", "enum": ["a", "b"]}


def test_datetime_and_date_are_formatted_strings() -> None:
    props = schema_for(Everything)["properties"]
    assert props["when"] == {"type": "string", "format": "date-time"}
    assert props["day"] == {"type": "string", "format": "date"}


def test_int_or_str_is_kubernetes_int_or_string() -> None:
    assert schema_for(Everything)["properties"]["port"] == {"x-kubernetes-int-or-string": True}


def test_defaults_are_json_values() -> None:
    @dataclass
    class Defaults:
        retain: int = 7
        mode: Mode = Mode.FULL
        when: dt.datetime = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
        names: list[str] = field(default_factory=list)
        labels: dict[str, str] = field(default_factory=dict)
        retention: Retention = field(default_factory=lambda: Retention(days=1))
        nothing: str | None = None

    props = schema_for(Defaults)["properties"]
    assert props["retain"]["default"] == 7
    assert props["mode"]["default"] == "full"
    assert props["when"]["default"] == "2024-01-02T03:04:05Z"
    assert props["names"]["default"] == []
    assert props["labels"]["default"] == {}
    assert "default" not in props["retention"]
    assert "default" not in props["nothing"]


def test_dataclasses_json_field_name_renames_the_property() -> None:
    @dataclass
    class Renamed:
        last_run: str = field(metadata=config(field_name="lastRun"))

    assert list(schema_for(Renamed)["properties"]) == ["lastRun"]
    assert schema_for(Renamed)["required"] == ["lastRun"]


def test_dataclasses_json_letter_case_renames_every_property() -> None:
    @dataclass_json(letter_case=LetterCase.CAMEL)  # type: ignore[call-overload]
    @dataclass
    class Camel:
        last_run: str
        keep_last: int = 1

    assert list(schema_for(Camel)["properties"]) == ["lastRun", "keepLast"]


def test_string_annotations_are_resolved() -> None:
    # this module uses postponed annotations: every hint is a string
    assert schema_for(Retention)["properties"]["days"] == {"type": "integer"}


def test_string_annotations_naming_function_locals_need_localns() -> None:
    @dataclass
    class Inner:
        n: int

    @dataclass
    class Outer:
        inner: Inner

    with pytest.raises(SchemaError, match=r"^Outer: cannot resolve the type hints of Outer"):
        schema_for(Outer)
    assert schema_for(Outer, localns=locals())["properties"]["inner"]["type"] == "object"


# ----------------------------------------------------------------- what it refuses


def test_set_is_refused_with_the_field_path_and_advice() -> None:
    @dataclass
    class Spec:
        tags: set[str]

    with pytest.raises(SchemaError) as e:
        schema_for(Spec, path="Backup.spec")
    assert str(e.value) == (
        "Backup.spec.tags: cannot express set[str] in an OpenAPI schema; use list[str]"
    )


def test_schema_error_is_a_type_error() -> None:
    assert issubclass(SchemaError, TypeError)


def test_path_defaults_to_the_dataclass_name() -> None:
    @dataclass
    class Spec:
        data: bytes

    with pytest.raises(SchemaError, match=r"^Spec\.data: cannot express bytes .*use str"):
        schema_for(Spec)


@pytest.mark.parametrize(
    ("tp", "message"),
    [
        (frozenset[int], r"cannot express frozenset\[int\].*use list\[int\]"),
        (tuple[int, str], r"cannot express tuple\[int, str\].*use list"),
        (bytes, r"cannot express bytes"),
        (Union[int, float], r"cannot express Union\[int, float\].*use one type"),  # noqa: UP007
        (int | float, r"cannot express int \| float"),
        (dict[int, str], r"cannot express dict\[int, str\].*use dict\[str, str\]"),
        (object, r"cannot express object.*make it a dataclass"),
        (Literal["a", 1], r"give every value the same type"),
        (type(None), r"cannot express NoneType"),
    ],
)
def test_inexpressible_types_are_refused(tp: Any, message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        schema_for(tp)


def test_nested_error_names_the_whole_path() -> None:
    class Plain:
        pass

    @dataclass
    class Inner:
        thing: Plain

    @dataclass
    class Outer:
        inners: list[Inner]
        by_name: dict[str, Inner]

    with pytest.raises(
        SchemaError, match=r"^Backup\.spec\.inners\[\]\.thing: cannot express Plain"
    ):
        schema_for(Outer, path="Backup.spec", localns=locals())


def test_recursive_dataclass_is_refused() -> None:
    with pytest.raises(SchemaError, match=r"^Node\.children\[\]: Node contains itself"):
        schema_for(Node)


def test_the_same_dataclass_twice_side_by_side_is_not_recursion() -> None:
    @dataclass
    class Pair:
        first: Retention
        second: Retention

    assert schema_for(Pair)["properties"]["second"]["type"] == "object"


# --------------------------------------------------------------------------- codec


def _everything_json() -> dict[str, Any]:
    return {
        "name": "n",
        "count": 3,
        "ratio": 0.5,
        "enabled": True,
        "when": "2024-01-02T03:04:05Z",
        "day": "2024-01-02",
        "mode": "full",
        "level": 2,
        "kind": "a",
        "port": "http",
        "items": ["x"],
        "seq": [1, 2],
        "labels": {"a": 1},
        "free": {"nested": [1, {"x": None}]},
        "anything": [1, "two"],
        "retention": {"days": 1},
        "retentions": [{"days": 2, "keep_last": 5}],
    }


def test_decode_builds_typed_values() -> None:
    obj = shape_of(Everything).decode(_everything_json(), "spec")
    assert obj.when == dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    assert obj.day == dt.date(2024, 1, 2)
    assert obj.mode is Mode.FULL
    assert obj.level is Level.HIGH
    assert obj.retention == Retention(days=1, keep_last=3)
    assert obj.retentions == [Retention(days=2, keep_last=5)]
    assert obj.seq == [1, 2]
    assert obj.maybe is None


def test_decode_then_encode_gives_back_the_same_json() -> None:
    shape = shape_of(Everything)
    data = _everything_json()
    assert shape.encode(shape.decode(data, "spec")) == data


def test_encode_writes_enums_by_value_and_datetimes_as_rfc3339_utc() -> None:
    @dataclass
    class Times:
        when: dt.datetime
        mode: Mode

    shape = shape_of(Times)
    plus_two = dt.timezone(dt.timedelta(hours=2))
    value = Times(dt.datetime(2024, 1, 2, 5, 4, 5, tzinfo=plus_two), Mode.INCREMENTAL)
    assert shape.encode(value) == {"when": "2024-01-02T03:04:05Z", "mode": "incremental"}
    naive = Times(dt.datetime(2024, 1, 2, 3, 4, 5, 120000), Mode.FULL)
    assert shape.encode(naive)["when"] == "2024-01-02T03:04:05.120000Z"


def test_decode_accepts_rfc3339_offsets_and_fractions() -> None:
    shape = shape_of(dt.datetime)
    utc = dt.timezone.utc
    assert shape.decode("2024-01-02T05:04:05.5+02:00", "t") == dt.datetime(
        2024, 1, 2, 3, 4, 5, 500000, tzinfo=utc
    )
    assert shape.decode("2024-01-02T03:04:05.123456789Z", "t").microsecond == 123456


@pytest.mark.parametrize(
    "text", ["2024-01-02", "2024-01-02T03:04:05", "yesterday", "2024-13-01T00:00:00Z"]
)
def test_decode_refuses_datetimes_without_offset_or_invalid(text: str) -> None:
    with pytest.raises(InvalidValue, match=r"^t: expected an RFC 3339 date-time"):
        shape_of(dt.datetime).decode(text, "t")


@pytest.mark.parametrize(
    ("tp", "value", "message"),
    [
        (int, "x", "spec.f: expected int, got str 'x'"),
        (int, True, "spec.f: expected int, got bool True"),
        (int, 1.5, "spec.f: expected int, got float 1.5"),
        (str, 1, "spec.f: expected str, got int 1"),
        (str, None, "spec.f: expected str, got null"),
        (bool, "true", "spec.f: expected bool, got str 'true'"),
        (float, "1", "spec.f: expected float, got str '1'"),
        (Mode, "FULL", "spec.f: expected one of 'full', 'incremental', got str 'FULL'"),
        (Level, "1", "spec.f: expected one of 1, 2, got str '1'"),
        (Literal["a", "b"], "c", "spec.f: expected one of 'a', 'b', got str 'c'"),
        (int | str, 1.5, "spec.f: expected int or str, got float 1.5"),
        (list[int], {"a": 1}, "spec.f: expected list, got dict {'a': 1}"),
        (list[int], [1, "2"], "spec.f[1]: expected int, got str '2'"),
        (dict[str, int], {"a": "1"}, "spec.f.a: expected int, got str '1'"),
        (dict[str, Any], [1], "spec.f: expected object, got list [1]"),
        (Retention, "x", "spec.f: expected object, got str 'x'"),
        (Retention, {}, "spec.f.days: required field is missing"),
        (
            list[Retention],
            [{"days": 1}, {"days": "2"}],
            "spec.f[1].days: expected int, got str '2'",
        ),
        (dt.date, "2024-01-02T00:00:00Z", "spec.f: expected a date like '2024-01-02', got str"),
    ],
)
def test_decode_never_coerces_and_names_the_field(tp: Any, value: Any, message: str) -> None:
    with pytest.raises(InvalidValue) as e:
        shape_of(tp).decode(value, "spec.f")
    assert str(e.value).startswith(message)


def test_invalid_value_is_a_value_error_with_path_and_reason() -> None:
    with pytest.raises(ValueError) as e:
        shape_of(Retention).decode({"days": "x"}, "spec.retention")
    assert isinstance(e.value, InvalidValue)
    assert e.value.path == "spec.retention.days"
    assert e.value.reason == "expected int, got str 'x'"


def test_float_accepts_a_json_integer() -> None:
    value = shape_of(float).decode(2, "f")
    assert value == 2.0 and isinstance(value, float)


def test_null_is_accepted_only_where_optional() -> None:
    assert shape_of(Optional[int]).decode(None, "f") is None  # noqa: UP045
    with pytest.raises(InvalidValue, match="expected int, got null"):
        shape_of(int).decode(None, "f")


def test_post_init_errors_become_invalid_values() -> None:
    @dataclass
    class Positive:
        n: int

        def __post_init__(self) -> None:
            if self.n <= 0:
                raise ValueError("n must be positive")

    with pytest.raises(InvalidValue, match=r"^spec: Positive: n must be positive$"):
        shape_of(Positive).decode({"n": 0}, "spec")


def test_unknown_keys_survive_at_every_nesting_level() -> None:
    shape = shape_of(Everything)
    data = _everything_json()
    data["future"] = {"x": 1}
    data["retention"]["unknown"] = [1, 2]
    data["retentions"][0]["also_unknown"] = "y"
    obj = shape.decode(data, "spec")
    obj.retention.days = 9
    out = shape.encode(obj)
    assert out["future"] == {"x": 1}
    assert out["retention"] == {"days": 9, "unknown": [1, 2]}
    assert out["retentions"][0]["also_unknown"] == "y"


def test_unknown_keys_are_copied_not_shared() -> None:
    data: dict[str, Any] = {"days": 1, "extra": {"x": 1}}
    obj = shape_of(Retention).decode(data, "r")
    data["extra"]["x"] = 2
    assert shape_of(Retention).encode(obj)["extra"] == {"x": 1}


def test_none_is_omitted_unless_the_key_came_in() -> None:
    @dataclass
    class Status:
        last_run: str | None = None
        message: str | None = None

    shape = shape_of(Status)
    assert shape.encode(Status()) == {}
    assert shape.encode(shape.decode({"last_run": None}, "status")) == {"last_run": None}


def test_defaults_filled_in_by_decode_stay_out_of_encode() -> None:
    shape = shape_of(BackupSpec)
    obj = shape.decode({"schedule": "s", "database": "d"}, "spec")
    assert (obj.retain, obj.tags) == (7, {})
    assert shape.encode(obj) == {"schedule": "s", "database": "d"}
    obj.retain = 8
    assert shape.encode(obj) == {"schedule": "s", "database": "d", "retain": 8}


def test_objects_built_in_python_encode_every_set_field() -> None:
    shape = shape_of(BackupSpec)
    assert shape.encode(BackupSpec(schedule="s", database="d")) == {
        "schedule": "s",
        "database": "d",
        "retain": 7,
        "tags": {},
    }


def test_renamed_fields_use_the_json_name_in_the_codec() -> None:
    @dataclass
    class Renamed:
        last_run: str = field(metadata=config(field_name="lastRun"))

    shape = shape_of(Renamed)
    assert shape.decode({"lastRun": "x"}, "s") == Renamed(last_run="x")
    assert shape.encode(Renamed(last_run="y")) == {"lastRun": "y"}


def test_any_values_are_copied_through() -> None:
    value = {"a": [1, {"b": None}]}
    decoded = shape_of(Any).decode(value, "x")
    assert decoded == value and decoded is not value


# -- json_copy: the deep copy objects read from the API are taken with ------------------


def test_json_copy_copies_every_dict_and_list_so_no_change_reaches_the_original() -> None:
    original = {"metadata": {"name": "a", "labels": {"app": "x"},
                             "ownerReferences": [{"uid": "u", "controller": True}]},
                "spec": {"sizes": [1, 2.5, None, "s", False]}}
    copied = json_copy(original)
    assert copied == original
    copied["metadata"]["labels"]["app"] = "y"
    copied["metadata"]["ownerReferences"][0]["uid"] = "v"
    copied["spec"]["sizes"].append(3)
    assert original["metadata"]["labels"] == {"app": "x"}
    assert original["metadata"]["ownerReferences"] == [{"uid": "u", "controller": True}]
    assert original["spec"]["sizes"] == [1, 2.5, None, "s", False]


def test_json_copy_hands_what_json_does_not_decode_to_copy_deepcopy() -> None:
    when = dt.datetime(2026, 12, 6, tzinfo=dt.timezone.utc)
    nested = collections.OrderedDict(items=[{"tags": {"a", "b"}}])
    original = {"when": when, "nested": nested, "pair": (["x"], 1)}
    copied = json_copy(original)
    assert copied == original
    assert type(copied["nested"]) is collections.OrderedDict
    assert copied["nested"] is not nested and copied["nested"]["items"][0]["tags"] is not \
        nested["items"][0]["tags"]
    assert copied["pair"][0] is not original["pair"][0]
