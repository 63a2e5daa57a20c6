"""What a Watch mapper returns, read as primary keys (operator_kit.runtime.mapping), and
how the runner reports what names none: no cluster needed (no request is sent)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes.client import ApiClient, V1ConfigMap, V1ObjectMeta
from prometheus_client import REGISTRY

from operator_kit.api.resources import CustomResource
from operator_kit.client.events import EventRecorder
from operator_kit.client.transport import Api
from operator_kit.runtime.changes import WatchEvent
from operator_kit.runtime.controller import Controller, Watch
from operator_kit.runtime.mapping import Mapped, accepted, primary_keys
from operator_kit.runtime.objects import Objects
from operator_kit.runtime.runner import ControllerRunner
from operator_kit.runtime.watching import Informers, Key


@dataclass
class Spec:
    size: int = 1


class Web(CustomResource):
    group = "mapping.operator-kit.test"
    version = "v1"
    kind = "Web"
    plural = "webs"
    spec: Spec


class Site(CustomResource):  # cluster-scoped
    group = "mapping.operator-kit.test"
    version = "v1"
    kind = "Site"
    plural = "sites"
    namespaced = False
    spec: Spec


class Gadget(CustomResource):  # another kind of the same group
    group = "mapping.operator-kit.test"
    version = "v1"
    kind = "Gadget"
    plural = "gadgets"
    spec: Spec


def config_map(name: str = "cm", namespace: str | None = "ns") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {}}


CM = config_map()
NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}  # cluster-scoped


def web_dict(name: str, namespace: str = "ns", api_version: str = "mapping.operator-kit.test/v1"
             ) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": "Web",
            "metadata": {"name": name, "namespace": namespace}}


def keys(result: object, primary: type[CustomResource] = Web,
         changed: dict[str, Any] = CM) -> list[Key]:
    mapped = primary_keys(result, primary, changed)
    assert not mapped.errors, mapped.errors
    return mapped.keys


def errors(result: object, primary: type[CustomResource] = Web,
           changed: dict[str, Any] = CM) -> list[str]:
    mapped = primary_keys(result, primary, changed)
    assert not mapped.keys, mapped.keys
    return mapped.errors


# -- what names primaries ---------------------------------------------------------------

@pytest.mark.parametrize("result", [None, [], (), iter(())], ids=["None", "[]", "()", "iter"])
def test_none_or_an_empty_result_is_nothing_to_reconcile(result: object) -> None:
    assert primary_keys(result, Web, CM) == Mapped([], [])


def test_names_are_in_the_changed_objects_namespace() -> None:
    assert keys(["a", "b"]) == [("ns", "a"), ("ns", "b")]


def test_keys_objects_and_dicts_of_the_primary_kind_name_their_own_namespace() -> None:
    web = Web("w", Spec(), namespace="other")
    assert keys([("elsewhere", "k"), web, web_dict("d", "third")]) == [
        ("elsewhere", "k"), ("other", "w"), ("third", "d")]


def test_a_dict_of_another_version_of_the_primary_kind_names_it() -> None:
    assert keys([web_dict("d", api_version="mapping.operator-kit.test/v2")]) == [("ns", "d")]


def test_any_iterable_works_and_repeats_count_once() -> None:
    def generate() -> Iterator[Any]:
        yield "a"
        yield ("ns", "a")
        yield "b"

    assert keys(generate()) == [("ns", "a"), ("ns", "b")]
    assert keys(("a", "b")) == [("ns", "a"), ("ns", "b")], "a tuple result: a list of names"


def test_a_cluster_scoped_primary_takes_names_and_ignores_namespaces() -> None:
    site = Site("s", Spec())
    assert keys(["a", ("ns", "b"), (None, "c"), ("", "d"), site], Site, CM) == [
        ("", "a"), ("", "b"), ("", "c"), ("", "d"), ("", "s")]
    assert keys(["a"], Site, NODE) == [("", "a")]


# -- what names none: an error each, valid items kept ----------------------------------

def test_a_str_is_an_error_not_iterated_into_letters() -> None:
    [message] = errors("web")
    assert message.startswith("str 'web'") and "not iterated" in message


def test_the_changed_object_itself_is_an_error_alone_or_in_a_list() -> None:
    [alone] = errors(CM)
    assert alone == "dict (v1/ConfigMap) ns/cm by itself (not in a list)"
    [listed] = errors([CM])
    assert listed == "dict (v1/ConfigMap) ns/cm (not a Web)"
    model = V1ConfigMap(metadata=V1ObjectMeta(name="cm", namespace="ns"))
    assert errors(model) == ["V1ConfigMap ns/cm by itself (not in a list)"]
    assert errors([model]) == ["V1ConfigMap ns/cm (not a Web)"]


def test_objects_of_another_kind_or_without_a_kind_are_errors() -> None:
    assert errors([Gadget("g", Spec(), namespace="ns")]) == ["Gadget ns/g (not a Web)"]
    assert errors([{"metadata": {"name": "w", "namespace": "ns"}}]) == [
        "dict (no kind) ns/w (not a Web)"]
    other_group = web_dict("w", api_version="elsewhere.example.com/v1")
    assert errors([other_group]) == ["dict (elsewhere.example.com/v1/Web) ns/w (not a Web)"]
    assert errors([{**web_dict("w"), "metadata": {"namespace": "ns"}}]) == [
        "dict (mapping.operator-kit.test/v1/Web) ns/None (metadata.name and .namespace "
        "must be str)"]


@pytest.mark.parametrize("item", [("a",), ("ns", "a", "b"), (1, "a"), ("ns", 5), ["ns", "a"],
                                  5, None, b"web"])
def test_anything_else_in_the_result_is_an_error_naming_its_type(item: object) -> None:
    [message] = errors([item])
    assert message.startswith(type(item).__name__ + " "), message


@pytest.mark.parametrize("result", [5, object(), b"web"])
def test_a_result_that_is_not_an_iterable_of_items_is_an_error(result: object) -> None:
    [message] = errors(result)
    assert message.startswith(type(result).__name__ + " "), message


def test_a_namespaced_primary_needs_a_namespace() -> None:
    assert errors([("", "a"), (None, "b"), Web("w", Spec())]) == [
        "tuple ('', 'a') (no namespace, and Web is namespaced)",
        "tuple (None, 'b') (no namespace, and Web is namespaced)",
        "Web w (no namespace, and Web is namespaced)"]
    [message] = errors(["a"], Web, NODE)
    assert "changed object's namespace, and it has none" in message
    assert keys([("ns", "a")], Web, NODE) == [("ns", "a")]


def test_an_empty_name_is_an_error() -> None:
    assert errors(["", ("ns", "")]) == ["str '' (no name)", "tuple ('ns', '') (no name)"]


def test_the_valid_items_of_a_result_with_errors_still_count() -> None:
    mapped = primary_keys(["a", 7, ("x", "b"), CM, Web("c", Spec(), namespace="ns")], Web, CM)
    assert mapped.keys == [("ns", "a"), ("x", "b"), ("ns", "c")]
    assert mapped.errors == ["int 7 (not a name, a key or an object)",
                             "dict (v1/ConfigMap) ns/cm (not a Web)"]


def test_a_long_value_is_clipped_in_its_message() -> None:
    [message] = errors("x" * 500)
    assert len(message) < 150


def test_what_is_accepted_is_said_for_the_primarys_scope() -> None:
    assert "(namespace, name) keys or Web objects" in accepted(Web)
    assert "keys ('', name) or Site objects" in accepted(Site)
    assert "None or [] for none" in accepted(Web)


# -- the runner: logged once per mapper, counted every time ------------------------------

def to_str(obj: Any, objects: Objects) -> Any:
    return "web"


def to_itself(obj: Any, objects: Objects) -> Any:
    return [obj]


def mixed(obj: Any, objects: Objects) -> Any:
    return ["a", ("ns", "b"), obj, Web("c", Spec(), namespace="ns"), 7]


def nothing(obj: Any, objects: Objects) -> Any:
    return None


def raising(obj: Any, objects: Objects) -> Any:
    raise RuntimeError("mapper bug")


class WebController(Controller[Web]):
    resource = Web
    # A watched kind declared in code: no discovery, so no API server is asked.
    watches = (Watch(Gadget, to_str), Watch(Gadget, to_itself), Watch(Gadget, mixed),
               Watch(Gadget, nothing), Watch(Gadget, raising))


@pytest.fixture
def runner() -> Iterator[ControllerRunner]:
    api = Api(ApiClient())
    stop = threading.Event()
    yield ControllerRunner(WebController(), api, field_manager="test",
                           recorder=EventRecorder(api, "test"), stop=stop,
                           informers=Informers(api, stop))
    stop.set()


def queued(runner: ControllerRunner) -> list[Key]:
    found = []
    while (key := runner.queue.get(timeout=0)) is not None:
        found.append(key)
        runner.queue.done(key)
    return found


def gadget_event(name: str) -> WatchEvent:
    return WatchEvent("ADDED", Gadget(name, Spec(), namespace="ns").to_dict())


def mapper_errors(mapper: str) -> float:
    return REGISTRY.get_sample_value("operator_kit_mapper_errors_total",
                                     {"controller": "web", "cluster": "", "mapper": mapper}) or 0.0


def handler(runner: ControllerRunner, index: int) -> Any:
    return runner._sources[index][1]


def test_every_mappers_series_starts_at_zero(runner: ControllerRunner) -> None:
    assert REGISTRY.get_sample_value("operator_kit_mapper_errors_total",
                                     {"controller": "web", "cluster": "",
                                      "mapper": "nothing"}) is not None


def test_a_bad_result_is_logged_once_per_mapper_then_at_debug_and_counted_each_time(
        runner: ControllerRunner, caplog: pytest.LogCaptureFixture) -> None:
    before = mapper_errors("to_str")
    with caplog.at_level(logging.DEBUG, logger="operator_kit.controller"):
        for name in ("g1", "g2", "g3"):
            handler(runner, 0)(gadget_event(name))
    assert queued(runner) == [], "nothing named w, e or b"
    lines = [(r.levelno, r.getMessage()) for r in caplog.records if "to_str" in r.getMessage()]
    assert [level for level, _ in lines] == [logging.ERROR, logging.DEBUG, logging.DEBUG]
    message = lines[0][1]
    assert message.startswith("web: mapper to_str returned str 'web' (a str is not iterated")
    assert "for mapping.operator-kit.test/v1/Gadget ns/g1" in message
    assert accepted(Web) in message
    assert mapper_errors("to_str") == before + 3


def test_the_changed_object_returned_is_reported_and_queues_nothing(
        runner: ControllerRunner, caplog: pytest.LogCaptureFixture) -> None:
    before = mapper_errors("to_itself")
    with caplog.at_level(logging.ERROR, logger="operator_kit.controller"):
        handler(runner, 1)(gadget_event("g"))
    assert queued(runner) == []
    [message] = [r.getMessage() for r in caplog.records if "to_itself" in r.getMessage()]
    assert "returned Gadget ns/g (not a Web)" in message
    assert mapper_errors("to_itself") == before + 1


def test_the_valid_items_of_a_bad_result_are_queued(runner: ControllerRunner,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    before = mapper_errors("mixed")
    with caplog.at_level(logging.ERROR, logger="operator_kit.controller"):
        handler(runner, 2)(gadget_event("g"))
    assert queued(runner) == [("ns", "a"), ("ns", "b"), ("ns", "c")]
    [message] = [r.getMessage() for r in caplog.records if "mixed" in r.getMessage()]
    assert "Gadget ns/g (not a Web); int 7 (not a name, a key or an object)" in message
    assert mapper_errors("mixed") == before + 1


def test_none_is_nothing_to_reconcile_and_not_logged(runner: ControllerRunner,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    before = mapper_errors("nothing")
    with caplog.at_level(logging.DEBUG, logger="operator_kit.controller"):
        handler(runner, 3)(gadget_event("g"))
    assert queued(runner) == []
    assert not [r for r in caplog.records if "nothing" in r.getMessage()]
    assert mapper_errors("nothing") == before


def test_a_mapper_that_raises_is_logged_each_time_and_counted(
        runner: ControllerRunner, caplog: pytest.LogCaptureFixture) -> None:
    before = mapper_errors("raising")
    with caplog.at_level(logging.ERROR, logger="operator_kit.controller"):
        handler(runner, 4)(gadget_event("g1"))
        handler(runner, 4)(gadget_event("g2"))
    assert queued(runner) == []
    lines = [r for r in caplog.records if "mapper raising failed" in r.getMessage()]
    assert len(lines) == 2 and all(r.exc_info for r in lines)
    assert mapper_errors("raising") == before + 2
