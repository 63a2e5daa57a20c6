"""The cache's Store: objects by key and by index; label selectors as kubectl reads them."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from operator_kit.runtime.cache import OWNER, LabelSelector, Store


def obj(name: str, namespace: str = "ns", *, labels: dict[str, str] | None = None,
        owner: str | None = None, rv: str = "1", **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "resourceVersion": rv,
                            "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [{"uid": "not-the-controller"},
                                   {"uid": owner, "controller": True}]
    return {"metadata": meta, "spec": spec}


def names(objects: list[dict[str, Any]]) -> list[str]:
    return [o["metadata"]["name"] for o in objects]


def test_list_is_ordered_by_namespace_then_name_and_filters_by_namespace() -> None:
    store = Store()
    for o in (obj("b", "y"), obj("a", "y"), obj("c", "x")):
        store.put(o)
    assert [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in store.list()] == [
        ("x", "c"), ("y", "a"), ("y", "b")]
    assert names(store.list("y")) == ["a", "b"]
    assert store.list("none") == []


def test_owner_index_finds_children_by_their_controller_owner_uid_only() -> None:
    store = Store()
    store.put(obj("j1", owner="u1"))
    store.put(obj("j2", owner="u1"))
    store.put(obj("j3", owner="u2"))
    assert names(store.by_index(OWNER, "u1")) == ["j1", "j2"]
    assert store.by_index(OWNER, "not-the-controller") == []


def test_indexes_follow_changes_and_deletions() -> None:
    store = Store()
    store.add_index("size", lambda o: [str(o["spec"]["size"])])
    store.put(obj("a", size=1))
    store.put(obj("a", size=2, rv="2"))
    assert store.by_index("size", "1") == []
    assert names(store.by_index("size", "2")) == ["a"]
    store.remove(("ns", "a"))
    assert store.by_index("size", "2") == []


def test_an_index_added_late_indexes_what_is_cached_and_a_relist_refiles() -> None:
    store = Store()
    store.put(obj("a", size=1))
    store.add_index("size", lambda o: [str(o["spec"]["size"])])
    assert names(store.by_index("size", "1")) == ["a"]
    old = store.replace({("ns", "b"): obj("b", size=1)})
    assert list(old) == [("ns", "a")]
    assert names(store.by_index("size", "1")) == ["b"]


def test_a_failing_index_function_is_logged_and_skips_only_that_object(
        caplog: pytest.LogCaptureFixture) -> None:
    def by_size(o: dict[str, Any]) -> list[str]:
        return [str(o["spec"]["size"])]

    store = Store("widgets")
    store.add_index("size", by_size)
    with caplog.at_level(logging.ERROR, "operator_kit.cache"):
        store.put(obj("broken"))  # no size: the function raises KeyError
    store.put(obj("fine", size=3))
    assert store.get(("ns", "broken")) is not None, "still cached"
    assert names(store.by_index("size", "3")) == ["fine"]
    assert any("by_size" in r.getMessage() and "ns/broken" in r.getMessage()
               for r in caplog.records)


def test_an_unknown_index_is_an_error_naming_the_fix() -> None:
    with pytest.raises(LookupError, match="declare it in the controller's `indexes`"):
        Store("jobs").by_index("nope", "x")


def test_two_functions_under_one_index_name_are_refused() -> None:
    store = Store()
    store.add_index("x", lambda o: [])
    with pytest.raises(ValueError, match="two different index functions"):
        store.add_index("x", lambda o: ["other"])


@pytest.mark.parametrize(("selector", "expected"), [
    ("app=web", ["a", "b"]),
    ("app==web,tier=front", ["a"]),
    ("app!=web", ["c", "d"]),
    ("tier in (front, back)", ["a", "b"]),
    ("tier notin (front)", ["b", "c", "d"]),
    ("tier", ["a", "b"]),
    ("!tier", ["c", "d"]),
])
def test_label_selectors_match_as_kubectl_does(selector: str, expected: list[str]) -> None:
    store = Store()
    store.put(obj("a", labels={"app": "web", "tier": "front"}))
    store.put(obj("b", labels={"app": "web", "tier": "back"}))
    store.put(obj("c", labels={"app": "db"}))
    store.put(obj("d"))
    assert names(store.list(labels=LabelSelector.of(selector))) == expected


def test_a_dict_selector_means_every_label_equal() -> None:
    selector = LabelSelector.of({"app": "web", "tier": "front"})
    assert selector.matches(obj("a", labels={"app": "web", "tier": "front", "x": "y"}))
    assert not selector.matches(obj("b", labels={"app": "web"}))


def test_a_selector_that_does_not_parse_says_where_in_the_api_servers_words() -> None:
    with pytest.raises(ValueError, match=r"^label selector 'app=web,\(': found '\(', "
                                         r"expected: identifier after ','$"):
        LabelSelector.of("app=web,(")
