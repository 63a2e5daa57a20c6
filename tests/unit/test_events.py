"""events.k8s.io/v1 Events as the recorder builds them: the fields, the name that makes a
repeat find its Event, the series patch, and what the API server would refuse.

Recording against the API server (series, kubectl describe) is in
tests/cluster/test_events_cluster.py."""

from __future__ import annotations

import datetime
import re
from typing import Any

import pytest

from operator_kit.client import events
from operator_kit.client.events import (
    NOTE_LIMIT,
    check_field,
    clip_note,
    micro_time,
    new_event,
    occurrences,
    reference,
    reporting_controller,
    series_patch,
)

WIDGET: dict[str, Any] = {
    "apiVersion": "example.com/v1", "kind": "Widget",
    "metadata": {"name": "w", "namespace": "team-a", "uid": "u-1", "resourceVersion": "7"},
    "spec": {"size": 2}}


def event(**overrides: Any) -> dict[str, Any]:
    args: dict[str, Any] = {"controller": "widget-operator", "instance": "widget-operator-0",
                            "action": "Reconcile", "warning": False, "reason": "Configured",
                            "note": "size is 2", "now": "2026-12-05T06:00:00.000001Z"}
    return new_event(WIDGET, **{**args, **overrides})


def test_an_event_carries_every_events_k8s_io_field() -> None:
    body = event()
    assert body["apiVersion"] == "events.k8s.io/v1" and body["kind"] == "Event"
    assert body["metadata"]["namespace"] == "team-a"
    assert body["regarding"] == {"apiVersion": "example.com/v1", "kind": "Widget", "name": "w",
                                 "namespace": "team-a", "uid": "u-1", "resourceVersion": "7"}
    assert (body["reportingController"], body["reportingInstance"], body["action"]) == (
        "widget-operator", "widget-operator-0", "Reconcile")
    assert (body["type"], body["reason"], body["note"]) == ("Normal", "Configured", "size is 2")
    assert body["eventTime"] == "2026-12-05T06:00:00.000001Z"
    # What the API server refuses on an events.k8s.io create: the deprecated core fields.
    assert not {"series", "related", "deprecatedCount", "deprecatedSource",
                "deprecatedFirstTimestamp"} & set(body)
    assert event(warning=True)["type"] == "Warning"


def test_a_related_object_is_referenced_and_makes_another_event() -> None:
    cron = {"apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": "w", "namespace": "team-a", "uid": "u-2"}}
    body = event(related=cron)
    assert body["related"] == {"apiVersion": "batch/v1", "kind": "CronJob", "name": "w",
                               "namespace": "team-a", "uid": "u-2"}
    assert body["metadata"]["name"] != event()["metadata"]["name"]


def test_the_same_event_has_the_same_name_whenever_and_wherever_it_is_recorded() -> None:
    first = event()
    later = event(now="2026-12-05T07:00:00.000000Z", instance="widget-operator-1")
    moved = new_event({**WIDGET, "metadata": {**WIDGET["metadata"], "resourceVersion": "8"}},
                      controller="widget-operator", instance="x", action="Reconcile",
                      warning=False, reason="Configured", note="size is 2")
    assert first["metadata"]["name"] == later["metadata"]["name"] == moved["metadata"]["name"]
    assert re.fullmatch(r"w\.[0-9a-f]{12}", first["metadata"]["name"])


@pytest.mark.parametrize("change", [
    {"reason": "Resized"}, {"note": "size is 3"}, {"warning": True}, {"action": "Cleanup"},
    {"controller": "other-operator"}])
def test_what_tells_two_events_apart_gives_them_different_names(change: dict[str, Any]) -> None:
    assert event(**change)["metadata"]["name"] != event()["metadata"]["name"]


def test_a_cluster_scoped_object_s_event_lives_in_default() -> None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "u-n"}}
    body = new_event(node, controller="c", instance="i", action="Reconcile", warning=False,
                     reason="Seen", note="")
    assert body["metadata"]["namespace"] == "default"
    assert "namespace" not in body["regarding"]


def test_an_object_name_that_is_no_dns_subdomain_still_names_a_valid_event() -> None:
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "system:Controller:" + "x" * 300, "uid": "u-r"}}
    name = new_event(role, controller="c", instance="i", action="Reconcile", warning=False,
                     reason="Seen", note="")["metadata"]["name"]
    assert len(name) <= 253
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", name), name


def test_a_repeat_patches_the_series_guarded_by_the_version_last_seen() -> None:
    assert series_patch(1, "41", now="t") == {
        "series": {"count": 2, "lastObservedTime": "t"}, "metadata": {"resourceVersion": "41"}}
    assert series_patch(5, "", now="t") == {"series": {"count": 6, "lastObservedTime": "t"}}
    assert occurrences({"series": {"count": 6}}) == 6
    assert occurrences({"note": "first"}) == 1


def test_micro_time_has_microseconds_in_utc() -> None:
    when = datetime.datetime(2026, 12, 5, 7, 8, 9, 123456,
                             tzinfo=datetime.timezone(datetime.timedelta(hours=1)))
    assert micro_time(when) == "2026-12-05T06:08:09.123456Z"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", micro_time())


def test_a_long_note_is_cut_to_the_api_limit_in_bytes_not_inside_a_character() -> None:
    assert clip_note("short") == "short"
    cut = clip_note("é" * 600)  # 1,200 bytes
    assert len(cut.encode()) <= NOTE_LIMIT and cut == "é" * 512
    assert event(note="x" * 5000)["note"] == "x" * NOTE_LIMIT


@pytest.mark.parametrize(("what", "value"), [("reason", ""), ("action", "A" * 129)])
def test_a_reason_or_action_the_api_server_refuses_is_a_value_error(what: str,
                                                                      value: str) -> None:
    with pytest.raises(ValueError, match=f"an Event's {what} must be 1 to 128 characters"):
        check_field(what, value)


def test_the_reporting_controller_is_made_a_qualified_name() -> None:
    assert reporting_controller("backup-operator") == "backup-operator"
    assert reporting_controller("example.com/backup") == "example.com/backup"
    assert reporting_controller("My Operator!") == "My-Operator"
    assert reporting_controller("x" * 80) == "x" * 63
    assert reporting_controller("!!") == "operator"


def test_the_reference_leaves_out_what_the_object_does_not_have() -> None:
    assert reference({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}) == {
        "apiVersion": "v1", "kind": "ConfigMap", "name": "c"}


def test_the_instance_is_the_pod_name_else_the_host_name(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "backup-operator-5d8f-abcde")
    assert events.default_instance() == "backup-operator-5d8f-abcde"
    monkeypatch.delenv("POD_NAME")
    monkeypatch.setattr(events.socket, "gethostname", lambda: "build-host")
    assert events.default_instance() == "build-host"
