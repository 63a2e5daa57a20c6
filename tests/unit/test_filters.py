"""Event filters: the built-ins judge MODIFIED events and let creations and deletions by."""

from __future__ import annotations

from typing import Any

from operator_kit.runtime import filters
from operator_kit.runtime.changes import WatchEvent


def meta(generation: int | None = 1, **fields: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "x", "resourceVersion": "1", **fields}
    if generation is not None:
        metadata["generation"] = generation
    return {"metadata": metadata}


def modified(old: dict[str, Any], new: dict[str, Any]) -> WatchEvent:
    return WatchEvent("MODIFIED", new, old)


def test_generation_changed_passes_spec_changes_only() -> None:
    assert filters.generation_changed(modified(meta(1), meta(2)))
    assert not filters.generation_changed(modified(meta(1), meta(1, labels={"a": "b"})))
    assert filters.generation_changed(modified(meta(None), meta(None, labels={"a": "b"}))), \
        "a kind without a generation: every change counts"


def test_labels_and_annotations_changed() -> None:
    relabelled = modified(meta(labels={"a": "1"}), meta(labels={"a": "2"}))
    assert filters.labels_changed(relabelled)
    assert not filters.annotations_changed(relabelled)
    annotated = modified(meta(), meta(annotations={"n": "v"}))
    assert filters.annotations_changed(annotated)
    assert not filters.labels_changed(annotated)


def test_spec_changed_ignores_status_only_updates() -> None:
    old, new = meta(1), meta(1)
    new["status"] = {"phase": "Ready"}
    new["metadata"]["resourceVersion"] = "2"
    assert not filters.spec_changed(modified(old, new))
    assert filters.spec_changed(modified(meta(1), meta(1, finalizers=["f"])))


def test_built_ins_let_creations_and_deletions_through() -> None:
    for f in (filters.generation_changed, filters.labels_changed,
              filters.annotations_changed, filters.spec_changed):
        assert f(WatchEvent("ADDED", meta()))
        assert f(WatchEvent("DELETED", meta()))


def test_any_of_passes_what_one_of_them_passes() -> None:
    either = filters.any_of(filters.generation_changed, filters.labels_changed)
    assert either(modified(meta(labels={"a": "1"}), meta(labels={"a": "2"})))
    assert not either(modified(meta(), meta(annotations={"n": "v"})))
    assert "generation_changed" in either.__qualname__


def test_deletion_started_is_true_once_the_timestamp_appears() -> None:
    deleting = meta(deletionTimestamp="2026-01-01T00:00:00Z")
    assert filters.deletion_started(modified(meta(), deleting))
    assert not filters.deletion_started(modified(deleting, deleting))
    assert filters.deletion_started(WatchEvent("DELETED", meta()))
