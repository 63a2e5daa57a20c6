"""OpenTelemetry traces against a real API server: a Widget's creation is one trace from
its watch event through the queue to the reconcile and the API calls the reconcile made,
with the trace context sent to the API server on each call."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan

from operator_kit import Action, Context, Controller, Operator
from operator_kit.testing import Namespace, eventually
from operator_kit.testing.tracing import recorded_spans

from .conftest import Widget, create_widget

pytestmark = pytest.mark.usefixtures("widget_kind")


class Traced(Controller[Widget]):
    """Keeps a ConfigMap per Widget and sets its status."""

    resource = Widget
    owns = ("v1/ConfigMap",)
    name = "traced"

    def reconcile(self, obj: Widget, ctx: Context) -> Action:
        ctx.apply_owned(obj, {"apiVersion": "v1", "kind": "ConfigMap",
                              "metadata": {"name": obj.name}, "data": {"size": "1"}})
        ctx.patch_status(obj, {"observed_size": obj.spec.size})
        return Action.await_change()


def tree(spans: tuple[ReadableSpan, ...], root: ReadableSpan, depth: int = 0) -> list[str]:
    """`root` and its descendants, indented, as the docs show a trace."""
    attributes = root.attributes or {}
    took = ((root.end_time or 0) - (root.start_time or 0)) / 1e6
    lines = [f"{'  ' * depth}{root.name} {attributes.get('url.path', '')} "
             f"{attributes.get('http.response.status_code', '')} {took:.1f} ms"]
    for span in spans:
        if span.parent is not None and span.parent.span_id == root.context.span_id:
            lines += tree(spans, span, depth + 1)
    return lines


def test_a_created_widget_is_one_trace_from_its_event_to_its_api_calls(
        namespace: Namespace, run_operator: Callable[..., Operator]) -> None:
    with recorded_spans() as exporter:
        run_operator(Traced())
        create_widget(namespace, "traced")

        def reconciled() -> list[ReadableSpan]:
            return [span for span in exporter.get_finished_spans()
                    if span.name == "reconcile traced"
                    and span.attributes.get("k8s.object.name") == "traced"
                    and span.attributes.get("k8s.namespace.name") == namespace.name
                    and span.parent is not None]

        reconcile = eventually(20, reconciled)[0]
        spans = exporter.get_finished_spans()
    event = next(span for span in spans if span.context.span_id == reconcile.parent.span_id)
    assert event.name == "ADDED Widget" and event.parent is None
    assert event.attributes["k8s.namespace.name"] == namespace.name
    print("\n" + "\n".join(tree(spans, event)))
    children = [span for span in spans if span.parent is not None
                and span.parent.span_id == reconcile.context.span_id]
    calls: dict[str, Any] = {span.attributes["url.path"]: span for span in children}
    config_map = f"/api/v1/namespaces/{namespace.name}/configmaps/traced"
    assert config_map in calls, sorted(calls)
    applied = calls[config_map]
    assert applied.name == "PATCH" and applied.kind == trace.SpanKind.CLIENT
    assert applied.attributes["http.response.status_code"] in (200, 201)
    status = calls[f"/apis/ctl.operator-kit.test/v1/namespaces/{namespace.name}/widgets/traced"
                   "/status"]
    assert status.name == "PATCH" and status.attributes["http.response.status_code"] == 200
    assert all(span.context.trace_id == event.context.trace_id for span in children)
    assert any(span.name == "queue" and span.parent.span_id == event.context.span_id
               for span in spans)
