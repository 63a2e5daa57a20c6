"""The API server enforces the constraints declared on fields, with the messages given."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Annotated, Any

import pytest
from kubernetes.client.exceptions import ApiException

from operator_kit import (
    CelRule,
    Conditions,
    CustomResource,
    ExclusiveMinimum,
    Format,
    ListType,
    Maximum,
    MaxItems,
    MaxLength,
    Minimum,
    MinItems,
    MinLength,
    MultipleOf,
    Pattern,
    cel_rules,
    set_condition,
)
from operator_kit.testing import Namespace, TestCluster


@cel_rules(CelRule("self.low <= self.high", message="low must not exceed high"),
           CelRule("self.name == oldSelf.name", message="name is immutable"))
@dataclass
class GuardedSpec:
    name: Annotated[str, MinLength(2), MaxLength(8), Pattern(r"^[a-z]+$")]
    low: Annotated[int, Minimum(0), MultipleOf(5)] = 0
    high: Annotated[int, Maximum(100)] = 10
    ratio: Annotated[float, ExclusiveMinimum(0)] = 1.0
    email: Annotated[str, Format("email")] = "a@example.com"
    tags: Annotated[list[str], MinItems(1), MaxItems(2), ListType("set")] = field(
        default_factory=lambda: ["a"])
    even: Annotated[int, CelRule("self % 2 == 0", message="even must be even")] = 0


@dataclass
class GuardedStatus:
    conditions: Conditions = field(default_factory=list)


class Guarded(CustomResource):
    group = "validation.operator-kit.test"
    version = "v1"
    kind = "Guarded"
    json_names = "camelCase"
    spec: GuardedSpec
    status: GuardedStatus


@pytest.fixture(scope="module")
def guarded(cluster: TestCluster) -> type[Guarded]:
    cluster.install_crd(Guarded)
    return Guarded


def _path(ns: Namespace, name: str = "") -> str:
    return f"/apis/{Guarded.api_version()}/namespaces/{ns.name}/guardeds" + (
        f"/{name}" if name else "")


def _create(ns: Namespace, obj_name: str, **spec: Any) -> dict[str, Any]:
    body = Guarded(obj_name, GuardedSpec(name="abc"), namespace=ns.name).to_dict()
    body["spec"].update(spec)
    result: dict[str, Any] = ns.api.request("POST", _path(ns), body=body)
    return result


@pytest.mark.parametrize(("spec", "message"), [
    ({"name": "a"}, "should be at least 2 chars long"),
    ({"name": "abcdefghij"}, "may not be more than 8 bytes"),
    ({"name": "ABC"}, "should match '^[a-z]+$'"),
    ({"low": -5}, "should be greater than or equal to 0"),
    ({"low": 3}, "should be a multiple of 5"),
    ({"high": 101}, "should be less than or equal to 100"),
    ({"ratio": 0}, "should be greater than 0"),
    ({"email": "nope"}, "must be of type email"),
    ({"tags": []}, "should have at least 1 items"),
    ({"tags": ["a", "b", "c"]}, "Too many: 3: must have at most 2 items"),
    ({"tags": ["a", "a"]}, "Duplicate value"),
    ({"even": 3}, "even must be even"),
    ({"low": 50, "high": 40}, "low must not exceed high"),
])
def test_api_server_rejects_each_violation_with_its_message(
    guarded: type[Guarded], namespace: Namespace, spec: dict[str, Any], message: str
) -> None:
    with pytest.raises(ApiException) as caught:
        _create(namespace, "bad", **spec)
    assert caught.value.status == 422
    assert message in str(caught.value.body)


def test_transition_rule_rejects_a_change_of_an_immutable_field(
    guarded: type[Guarded], namespace: Namespace
) -> None:
    _create(namespace, "ok")
    with pytest.raises(ApiException) as caught:
        namespace.api.request("PATCH", _path(namespace, "ok"), body={"spec": {"name": "xyz"}},
                              content_type="application/merge-patch+json")
    assert caught.value.status == 422
    assert "name is immutable" in str(caught.value.body)


def test_conditions_written_by_set_condition_are_accepted_and_validated(
    guarded: type[Guarded], namespace: Namespace
) -> None:
    _create(namespace, "c")
    obj = Guarded.from_dict(namespace.api.get(_path(namespace, "c")))
    set_condition(obj.status.conditions, "Ready", "True", reason="Fine",
                  observed_generation=obj.generation,
                  now=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc))
    status = obj.to_dict()["status"]
    namespace.api.request("PATCH", _path(namespace, "c") + "/status", body={"status": status},
                          content_type="application/merge-patch+json")
    got = namespace.api.get(_path(namespace, "c"))["status"]["conditions"][0]
    assert got["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert got["observedGeneration"] == 1
    bad = dict(status["conditions"][0], status="Maybe")
    with pytest.raises(ApiException) as caught:
        namespace.api.request("PATCH", _path(namespace, "c") + "/status",
                              body={"status": {"conditions": [bad]}},
                              content_type="application/merge-patch+json")
    assert caught.value.status == 422
    assert "Unsupported value" in str(caught.value.body)
    assert "Maybe" in str(caught.value.body)
