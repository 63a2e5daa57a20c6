"""Validation constraints, naming policy, Condition and typed defaults: schema output."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Annotated, Any

import pytest

from operator_kit import (
    CelRule,
    Conditions,
    CustomResource,
    ListType,
    Maximum,
    MaxItems,
    MaxLength,
    Minimum,
    Pattern,
    PrinterColumn,
    cel_rules,
    set_condition,
)
from operator_kit.api.schema import SchemaError, schema_for
from operator_kit.manifests import crd


@cel_rules(CelRule("self.low <= self.high", message="low above high"),
           CelRule("self.name == oldSelf.name", message="name is immutable"))
@dataclass
class Limits:
    name: Annotated[str, MaxLength(10), Pattern(r"^[a-z]+$")]
    low: Annotated[int, Minimum(0)] = 0
    high: Annotated[int, Maximum(100), CelRule("self % 2 == 0", message="even")] = 10
    tags: Annotated[list[str], MaxItems(3), ListType("set")] = field(default_factory=list)


def test_constraints_become_schema_keywords() -> None:
    schema = schema_for(Limits)
    props = schema["properties"]
    assert props["name"] == {"type": "string", "maxLength": 10, "pattern": "^[a-z]+$"}
    assert props["low"]["minimum"] == 0
    assert props["high"]["x-kubernetes-validations"] == [{"rule": "self % 2 == 0",
                                                           "message": "even"}]
    assert props["tags"]["x-kubernetes-list-type"] == "set"
    assert props["tags"]["maxItems"] == 3
    assert [r["rule"] for r in schema["x-kubernetes-validations"]] == [
        "self.low <= self.high", "self.name == oldSelf.name"]


def test_minimum_on_a_str_names_the_field_and_the_fix() -> None:
    @dataclass
    class Bad:
        name: Annotated[str, Minimum(1)]

    with pytest.raises(SchemaError, match=r"Bad\.name: Minimum applies to integer or number "
                                          r"values, not str; use MinLength"):
        schema_for(Bad, localns=locals())


def test_bad_regex_and_inverted_bounds_and_bad_cel_fail_at_declaration() -> None:
    @dataclass
    class BadRegex:
        x: Annotated[str, Pattern("([a-z")]

    @dataclass
    class Inverted:
        x: Annotated[int, Minimum(5), Maximum(1)]

    @dataclass
    class BadCel:
        x: Annotated[int, CelRule("size(self > 1")]

    with pytest.raises(SchemaError, match=r"BadRegex\.x: Pattern '\(\[a-z' is not a valid regex"):
        schema_for(BadRegex, localns=locals())
    with pytest.raises(SchemaError, match=r"Inverted\.x: minimum 5 is above maximum 1"):
        schema_for(Inverted, localns=locals())
    with pytest.raises(SchemaError, match=r"BadCel\.x: CelRule .* is not valid CEL"):
        schema_for(BadCel, localns=locals())


def test_wrongly_typed_default_fails_at_class_declaration_with_the_path() -> None:
    @dataclass
    class Spec:
        deadline: int | None = "10"  # type: ignore[assignment]

    with pytest.raises(TypeError, match=r"Job\.spec\.deadline: the default '10' does not fit"):
        class Job(CustomResource):
            group = "example.com"
            version = "v1"
            kind = "Job"
            spec: Spec


@dataclass
class PlainSpec:
    retain_days: int = 7


class Plain(CustomResource):
    group = "example.com"
    version = "v1"
    kind = "Plain"
    json_names = "camelCase"
    printer_columns = (PrinterColumn("Retain", ".spec.retainDays", type="integer"),)
    spec: PlainSpec


def test_to_dict_of_a_wrongly_typed_value_fails_with_the_path() -> None:
    obj = Plain("a", PlainSpec(retain_days="x"), namespace="ns")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"Plain ns/a: spec\.retainDays: expected int, got str"):
        obj.to_dict()


def test_camel_case_policy_names_fields_once_per_resource() -> None:
    assert Plain("a", PlainSpec()).to_dict()["spec"] == {"retainDays": 7}
    props = Plain.openapi_schema()["properties"]["spec"]["properties"]
    assert list(props) == ["retainDays"]


def test_age_column_is_added_and_a_column_no_version_has_is_an_error() -> None:
    columns = crd(Plain)["spec"]["versions"][0]["additionalPrinterColumns"]
    assert [c["name"] for c in columns] == ["Retain", "Age"]

    class Wrong(CustomResource):
        group = "example.com"
        version = "v1"
        kind = "Wrong"
        printer_columns = (PrinterColumn("R", ".spec.retain_days"),)
        json_names = "camelCase"
        spec: PlainSpec

    with pytest.raises(TypeError, match=r"'.spec.retain_days', which no version of Wrong has"):
        crd(Wrong)


def test_preferred_version_is_the_highest_priority_and_a_wrong_choice_says_how() -> None:
    class Multi(CustomResource):
        group = "example.com"
        version = "v1"
        kind = "Multi"
        preferred = True
        spec: PlainSpec

    class MultiBeta(CustomResource, version_of=Multi):
        version = "v2beta1"
        spec: PlainSpec

    assert Multi.preferred_version() is Multi

    class Multi2(CustomResource, version_of=Multi):
        version = "v2"
        spec: PlainSpec

    with pytest.raises(TypeError, match=r"set served = False on Multi2"):
        Multi.preferred_version()
    assert MultiBeta.versions()[-1] is Multi2


@dataclass
class WithConditions:
    conditions: Conditions = field(default_factory=list)


def test_condition_schema_is_metav1s() -> None:
    schema = schema_for(WithConditions)["properties"]["conditions"]
    assert schema["x-kubernetes-list-type"] == "map"
    assert schema["x-kubernetes-list-map-keys"] == ["type"]
    item: dict[str, Any] = schema["items"]
    assert item["properties"]["status"]["enum"] == ["True", "False", "Unknown"]
    assert item["properties"]["lastTransitionTime"]["format"] == "date-time"
    assert "pattern" in item["properties"]["reason"]
    assert item["required"] == ["type", "status", "reason", "message", "lastTransitionTime"]


def test_set_condition_keeps_transition_time_when_status_is_unchanged() -> None:
    conditions: Conditions = []
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    t1 = t0 + dt.timedelta(hours=1)
    set_condition(conditions, "Ready", "False", reason="Pending", observed_generation=1, now=t0)
    same = set_condition(conditions, "Ready", "False", reason="Still", observed_generation=2,
                         now=t1)
    assert (same.last_transition_time, same.reason, same.observed_generation) == (t0, "Still", 2)
    changed = set_condition(conditions, "Ready", "True", reason="Done", now=t1)
    assert changed.last_transition_time == t1
    assert len(conditions) == 1
