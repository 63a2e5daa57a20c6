"""Cache transforms: what an object becomes before an informer caches it."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

import pytest

from operator_kit import Controller, CustomResource, Owns, Watch
from operator_kit.runtime.transforms import Transformer, drop_fields, drop_managed_fields
from operator_kit.runtime.watching import Informers


def config_map(name: str = "a", **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "ns", "uid": "u-1",
                         "resourceVersion": "7", "labels": {"app": "web"},
                         "managedFields": [{"manager": "kubectl"}]},
            "data": dict(data)}


def test_the_default_transform_drops_managed_fields_and_nothing_else() -> None:
    cached = Transformer()(config_map(key="value"))
    assert "managedFields" not in cached["metadata"]
    assert cached["data"] == {"key": "value"}
    assert cached["metadata"]["labels"] == {"app": "web"}


def test_without_a_default_objects_are_cached_whole() -> None:
    cached = Transformer(None)(config_map())
    assert cached["metadata"]["managedFields"] == [{"manager": "kubectl"}]


def test_the_kinds_transform_runs_after_the_default() -> None:
    seen: list[dict[str, Any]] = []

    def spy(obj: dict[str, Any]) -> dict[str, Any]:
        seen.append(dict(obj["metadata"]))
        return obj

    Transformer(drop_managed_fields, spy)(config_map())
    assert "managedFields" not in seen[0], "the kind's transform sees the default's result"


def test_a_transform_may_return_a_new_object() -> None:
    def summary(obj: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": obj["apiVersion"], "kind": obj["kind"],
                "metadata": obj["metadata"], "keys": sorted(obj["data"])}

    cached = Transformer(None, summary)(config_map(b="2", a="1"))
    assert cached["keys"] == ["a", "b"] and "data" not in cached


def test_drop_fields_removes_nested_paths_where_present() -> None:
    obj = config_map(key="v")
    obj["spec"] = {"template": {"big": "x"}, "replicas": 2}
    cached = drop_fields("data", "spec.template", "status.absent", "metadata.labels")(obj)
    assert "data" not in cached
    assert cached["spec"] == {"replicas": 2}
    assert "labels" not in cached["metadata"]


@pytest.mark.parametrize("path", ["metadata", "metadata.name", "metadata.resourceVersion",
                                  "kind", "apiVersion", "data..x"])
def test_drop_fields_refuses_what_identifies_the_object(path: str) -> None:
    with pytest.raises(ValueError, match="cannot drop"):
        drop_fields(path)


def test_a_transform_that_raises_is_logged_once_at_error_and_the_object_still_cached(
        caplog: pytest.LogCaptureFixture) -> None:
    def broken(obj: dict[str, Any]) -> dict[str, Any]:
        del obj["metadata"]["name"]  # changed in place, then
        raise KeyError("boom")

    transformer = Transformer(drop_managed_fields, broken, description="configmaps in ns")
    with caplog.at_level(logging.DEBUG, logger="operator_kit.cache"):
        first = transformer(config_map("a", key="v"))
        second = transformer(config_map("b"))
    assert first["metadata"]["name"] == "a" and first["data"] == {"key": "v"}
    assert second["metadata"]["name"] == "b"
    levels = [r.levelno for r in caplog.records if "broken" in r.getMessage()]
    assert levels == [logging.ERROR, logging.DEBUG]
    assert caplog.records[0].exc_info is not None, "the traceback is logged"
    assert "configmaps in ns" in caplog.records[0].getMessage()


@pytest.mark.parametrize("bad", [
    lambda obj: None,
    lambda obj: {**obj, "metadata": {**obj["metadata"], "resourceVersion": "8"}},
    lambda obj: {k: v for k, v in obj.items() if k != "kind"},
    lambda obj: {**obj, "metadata": {"name": obj["metadata"]["name"]}},
])
def test_a_transform_that_loses_the_objects_identity_is_not_applied(
        bad: Any, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="operator_kit.cache"):
        cached = Transformer(drop_managed_fields, bad)(config_map(key="v"))
    assert cached["metadata"]["resourceVersion"] == "7" and cached["kind"] == "ConfigMap"
    assert cached["metadata"]["uid"] == "u-1" and cached["data"] == {"key": "v"}
    assert "is cached without it" in caplog.text


@dataclass
class ThingSpec:
    size: int = 0


class Thing(CustomResource):
    group = "t.example.com"
    version = "v1"
    kind = "Thing"
    plural = "things"
    spec: ThingSpec


def strip(obj: dict[str, Any]) -> dict[str, Any]:
    obj.pop("spec", None)
    return obj


class Stripping(Controller[Thing]):
    resource = Thing
    transform = strip  # a plain function in the class body: not made a method


class StrippingByMethod(Controller[Thing]):
    resource = Thing

    @staticmethod
    def transform(obj: dict[str, Any]) -> dict[str, Any]:
        return strip(obj)


def test_a_controllers_transform_is_the_function_declared() -> None:
    assert Stripping().primary_transform() is strip
    declared = StrippingByMethod().primary_transform()
    assert declared is not None and declared({"spec": 1, "metadata": {}}) == {"metadata": {}}
    assert Controller.primary_transform(Stripping()) is strip


def test_a_controller_transform_that_is_not_a_function_is_refused() -> None:
    class Wrong(Controller[Thing]):
        resource = Thing
        transform = "data"  # type: ignore[assignment]

    with pytest.raises(TypeError, match="must be a function of the object"):
        Wrong().primary_transform()


def test_owns_and_watch_carry_a_transform() -> None:
    only_names = drop_fields("data")
    assert Owns("v1/ConfigMap", transform=only_names).transform is only_names
    assert Watch("v1/Secret", lambda s, o: [], transform=only_names).transform is only_names


def test_informers_with_different_transforms_are_different_caches() -> None:
    from operator_kit.client.transport import Resource

    informers = Informers(None, threading.Event(), streaming=True)  # type: ignore[arg-type]
    resource = Resource("", "v1", "configmaps", "ConfigMap", True)
    plain = informers.informer(resource)
    dropped = drop_fields("data")
    stripped = informers.informer(resource, transform=dropped)
    assert stripped is not plain and informers.informer(resource, transform=dropped) is stripped
    assert informers.of(resource) == [plain, stripped], "untransformed caches first"
    assert "transform drop_fields('data')" in stripped.description
