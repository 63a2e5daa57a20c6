"""OpenTelemetry traces (operator_kit.tracing): off until a tracer provider is set; then a
watch event, the queue, the reconcile and its API calls are spans of one trace."""

from __future__ import annotations

import pytest
from opentelemetry import trace

from operator_kit import tracing
from operator_kit.runtime.changes import WatchEvent
from operator_kit.runtime.triggers import Trigger, Triggers
from operator_kit.testing.tracing import recorded_spans


def widget(name: str = "a") -> dict[str, object]:
    return {"kind": "Widget", "metadata": {"name": name, "namespace": "ns"}, "spec": {}}


def test_without_a_tracer_provider_nothing_is_recorded_and_no_header_is_sent() -> None:
    assert not tracing.enabled()
    assert Trigger.of_event("primary", WatchEvent("ADDED", widget())).span is None
    headers: dict[str, str] = {}
    assert tracing.start_call("GET", "/api/v1/namespaces", headers) is None
    assert headers == {}
    with tracing.reconcile("ctl", "Widget", "ns", "a", []) as span:
        assert span is None


def test_an_event_queue_reconcile_and_its_calls_are_one_trace() -> None:
    with recorded_spans() as spans:
        assert tracing.enabled()
        first = Trigger.of_event("primary", WatchEvent("ADDED", widget()))
        second = Trigger.of_event("owned", WatchEvent("MODIFIED", {
            "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns"}}))
        triggers = Triggers()
        triggers.add(first)
        triggers.add(second)
        headers: dict[str, str] = {}
        with tracing.reconcile("ctl", "Widget", "ns", "a", triggers):
            call = tracing.start_call("PATCH", "/apis/x/v1/namespaces/ns/widgets/a", headers)
            tracing.end_call(call, "200")
            tracing.end_call(tracing.start_call("GET", "/api/v1/nope", {}), "404")
    by_name = {span.name: span for span in spans.get_finished_spans()}
    event, queue = by_name["ADDED Widget"], by_name["queue"]
    reconcile, patch, get = by_name["reconcile ctl"], by_name["PATCH"], by_name["GET"]
    assert event.parent is None and event.kind == trace.SpanKind.CONSUMER
    assert event.attributes == {"operator_kit.object.kind": "Widget", "k8s.object.name": "a",
                                "k8s.namespace.name": "ns", "operator_kit.event": "ADDED"}
    trace_id = event.context.trace_id
    assert queue.parent.span_id == event.context.span_id and queue.context.trace_id == trace_id
    assert queue.start_time == event.start_time and queue.end_time >= queue.start_time
    assert reconcile.parent.span_id == event.context.span_id
    assert reconcile.context.trace_id == trace_id
    assert [link.context.span_id for link in reconcile.links] == \
        [by_name["MODIFIED ConfigMap"].context.span_id]
    assert reconcile.attributes["operator_kit.controller"] == "ctl"
    assert "owned ConfigMap ns/a MODIFIED" in reconcile.attributes["operator_kit.triggers"]
    assert patch.parent.span_id == reconcile.context.span_id
    assert patch.kind == trace.SpanKind.CLIENT
    assert patch.attributes == {"http.request.method": "PATCH", "http.response.status_code": 200,
                                "url.path": "/apis/x/v1/namespaces/ns/widgets/a"}
    assert get.status.status_code == trace.StatusCode.ERROR
    version, sent_trace, sent_span, _flags = headers["traceparent"].split("-")
    assert version == "00"
    assert (int(sent_trace, 16), int(sent_span, 16)) == (trace_id, patch.context.span_id)


def test_a_failed_reconcile_records_its_error_and_raises_it_on() -> None:
    with recorded_spans() as spans:
        with pytest.raises(RuntimeError), tracing.reconcile("ctl", "Widget", "ns", "a", []):
            raise RuntimeError("broken")
    (span,) = spans.get_finished_spans()
    assert span.parent is None  # a retry's or requeue's reconcile starts a trace of its own
    assert span.status.status_code == trace.StatusCode.ERROR
    assert [event.name for event in span.events] == ["exception"]


def test_calls_outside_a_reconcile_and_a_lists_events_are_not_recorded() -> None:
    with recorded_spans() as spans:
        headers: dict[str, str] = {}
        assert tracing.start_call("GET", "/apis/coordination.k8s.io/v1/leases", headers) is None
        listed = WatchEvent("ADDED", widget(), from_list=True)
        assert Trigger.of_event("primary", listed).span is None
    assert headers == {} and spans.get_finished_spans() == ()
