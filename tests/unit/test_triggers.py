"""Why a reconcile ran: the pure parts -- which fields changed, coalescing, the queue's
hand-over of a key's triggers."""

from __future__ import annotations

from typing import Any

from operator_kit.runtime.changes import WatchEvent
from operator_kit.runtime.queueing import WorkQueue
from operator_kit.runtime.triggers import MAX_KEPT, Trigger, Triggers, changed_fields


def config_map(labels: dict[str, str] | None = None, data: str = "a",
               version: str = "1") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "ns", "resourceVersion": version,
                         "labels": labels or {}},
            "data": {"k": data}}


def test_a_spec_change_names_spec_only() -> None:
    old = {"metadata": {"name": "a", "resourceVersion": "1", "generation": 1},
           "spec": {"x": 1}, "status": {"ok": True}}
    new = {"metadata": {"name": "a", "resourceVersion": "2", "generation": 2},
           "spec": {"x": 2}, "status": {"ok": True}}
    assert changed_fields(old, new) == ("spec",)


def test_a_label_edit_names_metadata_labels() -> None:
    assert changed_fields(config_map(), config_map({"x": "y"}, version="2")) == (
        "metadata.labels",)


def test_fields_added_and_removed_both_count() -> None:
    old = {"metadata": {"name": "a", "annotations": {"k": "v"}}, "spec": {}}
    new = {"metadata": {"name": "a"}, "spec": {}, "status": {"phase": "Ready"}}
    assert changed_fields(old, new) == ("metadata.annotations", "status")


def test_only_the_resource_version_changed_is_no_field() -> None:
    assert changed_fields(config_map(version="1"), config_map(version="2")) == ()


def test_no_old_object_is_no_field() -> None:
    assert changed_fields(None, config_map()) == ()


def test_shared_values_are_compared_by_identity_first() -> None:
    class Loud(dict[str, Any]):
        def __eq__(self, other: object) -> bool:
            raise AssertionError("compared by equality although it is the same object")

        __hash__ = None  # type: ignore[assignment]

    spec = Loud(x=1)
    assert changed_fields({"spec": spec, "status": {}}, {"spec": spec, "status": {"a": 1}}) \
        == ("status",)


def test_trigger_of_an_update_names_the_object_and_its_changed_fields() -> None:
    event = WatchEvent("MODIFIED", config_map({"x": "y"}, version="2"), config_map())
    trigger = Trigger.of_event("owned", event)
    assert trigger == Trigger("owned", "ConfigMap", "ns", "c", "MODIFIED",
                              ("metadata.labels",))
    assert str(trigger) == "owned ConfigMap ns/c MODIFIED [metadata.labels]"
    assert trigger.as_dict() == {"source": "owned", "kind": "ConfigMap", "namespace": "ns",
                                 "name": "c", "event": "MODIFIED",
                                 "changed": ["metadata.labels"]}


def test_what_a_list_brings_is_a_resync_whatever_its_handler() -> None:
    event = WatchEvent("ADDED", config_map(), from_list=True)
    assert Trigger.of_event("primary", event).source == "resync"


def test_a_watched_trigger_says_its_mapper_and_the_kind_when_the_object_does_not() -> None:
    obj = {"metadata": {"name": "s", "namespace": "ns"}}
    trigger = Trigger.of_event("watched", WatchEvent("DELETED", obj), "Secret", via="to_app")
    assert str(trigger) == "watched Secret ns/s DELETED via to_app"


def test_triggers_keep_the_first_few_and_count_all_by_source() -> None:
    triggers = Triggers()
    for i in range(MAX_KEPT + 3):
        triggers.add(Trigger("primary", "Backup", "ns", f"b{i}", "MODIFIED", ("spec",)))
    triggers.add(Trigger("requeue"))
    assert [t.name for t in triggers] == [f"b{i}" for i in range(MAX_KEPT)]
    assert len(triggers) == triggers.total == MAX_KEPT + 4
    assert triggers.counts == {"primary": MAX_KEPT + 3, "requeue": 1}
    assert triggers.sources() == ["primary", "requeue"]
    assert str(triggers).endswith("; and 4 more")


def test_carried_over_triggers_merge_without_exceeding_the_bound() -> None:
    first, second = Triggers(), Triggers()
    for i in range(MAX_KEPT - 1):
        first.add(Trigger("owned", name=f"o{i}"))
    second.add(Trigger("retry"))
    second.add(Trigger("requeue"))
    first.add(second)
    assert len(first.kept) == MAX_KEPT and first.kept[-1].source == "retry"
    assert first.total == MAX_KEPT + 1
    assert first.counts == {"owned": MAX_KEPT - 1, "retry": 1, "requeue": 1}


def test_no_triggers_say_so() -> None:
    assert str(Triggers()) == "none recorded" and Triggers().total == 0


def test_the_queue_coalesces_triggers_with_the_key_and_hands_them_out() -> None:
    queue: WorkQueue[tuple[str, str]] = WorkQueue("triggers-coalesce")
    key = ("ns", "a")
    queue.add(key, trigger=Trigger("primary", "Backup", "ns", "a", "MODIFIED", ("spec",)))
    queue.add(key, trigger=Trigger("owned", "ConfigMap", "ns", "c", "MODIFIED"))
    assert queue.triggers(key).total == 0  # not handed out yet
    assert queue.get(timeout=0) == key
    assert [t.source for t in queue.triggers(key)] == ["primary", "owned"]
    # A change during the reconcile belongs to the next one, not to this one.
    queue.add(key, trigger=Trigger("owned", "ConfigMap", "ns", "c", "DELETED"))
    assert queue.triggers(key).total == 2
    queue.done(key)
    assert queue.get(timeout=0) == key
    assert [(t.source, t.event) for t in queue.triggers(key)] == [("owned", "DELETED")]
    queue.done(key)
    assert queue.triggers(key).total == 0


def test_a_failure_is_a_retry_trigger_and_a_delayed_requeue_joins_a_sooner_change() -> None:
    now = [0.0]
    queue: WorkQueue[str] = WorkQueue("triggers-retry", clock=lambda: now[0])
    queue.add("k", trigger=Trigger("primary", name="k"))
    assert queue.get(timeout=0) == "k"
    queue.add_failure("k")
    queue.done("k")
    now[0] += 10
    assert queue.get(timeout=0) == "k"
    assert [t.source for t in queue.triggers("k")] == ["retry"]
    queue.forget("k")
    queue.add("k", delay=30, trigger=Trigger("requeue"))
    queue.done("k")
    queue.add("k", trigger=Trigger("primary", name="k"))  # sooner: the requeue is merged
    assert queue.get(timeout=0) == "k"
    assert queue.triggers("k").sources() == ["primary", "requeue"]


def test_the_fields_are_compared_when_first_read_not_when_the_event_comes() -> None:
    compared: list[str] = []

    class Counted(dict[str, Any]):
        def __eq__(self, other: object) -> bool:
            compared.append("spec")
            return dict.__eq__(self, other)  # type: ignore[arg-type]

        def __ne__(self, other: object) -> bool:
            return not self == other

        __hash__ = None  # type: ignore[assignment]

    old = {"metadata": {"name": "a"}, "spec": Counted(x=1)}
    new = {"metadata": {"name": "a"}, "spec": Counted(x=2)}
    trigger = Trigger.of_event("primary", WatchEvent("MODIFIED", new, old))
    assert compared == []
    assert trigger.changed == ("spec",) and trigger.changed == ("spec",)
    assert len(compared) == 1  # once, then remembered


def test_a_relist_update_names_no_fields() -> None:
    event = WatchEvent("MODIFIED", config_map({"x": "y"}), config_map(), from_list=True)
    assert Trigger.of_event("owned", event).changed == ()
