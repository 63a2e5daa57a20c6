"""OpenTelemetry traces, when the operator sets up OpenTelemetry: from a watch event
through the work queue to the reconcile and its API calls.

**Experimental** (docs/stability.md): span names and attributes may change in a minor
release; the first span recorded warns once (`operator_kit.ExperimentalWarning`).

Optional: install ``operator_kit[tracing]`` (``opentelemetry-api``) and configure a
tracer provider with the OpenTelemetry SDK and an exporter, as any Python program does
(``opentelemetry.trace.set_tracer_provider``). Until a provider is set -- or without the
package -- every function here returns at once and nothing is recorded.

One reconcile's trace::

    ADDED Backup                    the watch event (a root span, CONSUMER, instant)
    ├── queue                       from the event to a worker taking the key
    └── reconcile backup            the reconcile (INTERNAL; the error, if it failed)
        ├── GET                     every API call it made (CLIENT; ``url.path``, the
        └── PATCH                   status code), the trace context sent as ``traceparent``

The reconcile's parent is the first event that queued its key; the other events it
coalesced (up to `operator_kit.runtime.triggers.MAX_KEPT`) are its span links. A
reconcile that a requeue, a retry or a list (``resync``) caused starts a trace of its
own: a list's events are not recorded one by one (a relist of 20,000 objects would be
20,000 traces). API calls are traced only inside a reconcile, so watches and Lease
renewals do not fill the exporter.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, MutableMapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol

from operator_kit._stability import experimental

try:
    from opentelemetry import propagate, trace
except ImportError:  # the optional extra is not installed: tracing stays off
    trace = None  # type: ignore[assignment]
    propagate = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from opentelemetry.trace import Span, SpanContext, Tracer

__all__ = ["Caused", "EventSpan", "enabled", "end_call", "reconcile", "start_call", "watch_event"]

SCOPE = "operator_kit"
"""The instrumentation scope (tracer) name on every span operator_kit records."""

EventSpan = tuple["SpanContext", int]
"""A recorded watch event: its span's context and its time (ns since the epoch)."""


class Caused(Protocol):
    """What queued a key, as tracing reads it (`operator_kit.runtime.triggers.Trigger`):
    the event span it recorded, if any."""

    span: EventSpan | None


def enabled() -> bool:
    """True when opentelemetry-api is installed and a tracer provider has been set."""
    if trace is None:
        return False
    provider = trace.get_tracer_provider()
    if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        return False
    experimental("operator_kit.tracing")  # once: the first span recorded
    return True


def _tracer() -> Tracer:
    return trace.get_tracer_provider().get_tracer(SCOPE)


def watch_event(event: str, kind: str, namespace: str, name: str) -> EventSpan | None:
    """Record a watch event that queued a key (an instant root span); what its reconcile
    links to. None when tracing is off."""
    if not enabled():
        return None
    now = time.time_ns()
    span = _tracer().start_span(
        f"{event} {kind}", context=trace.set_span_in_context(trace.INVALID_SPAN),
        kind=trace.SpanKind.CONSUMER, start_time=now,
        attributes=_object(kind, namespace, name) | {"operator_kit.event": event})
    span.end(end_time=now)
    return span.get_span_context(), now


def _object(kind: str, namespace: str, name: str) -> dict[str, str]:
    attributes = {"operator_kit.object.kind": kind, "k8s.object.name": name}
    if namespace:
        attributes["k8s.namespace.name"] = namespace
    return attributes


@contextmanager
def reconcile(controller: str, kind: str, namespace: str, name: str,
              triggers: Iterable[Caused]) -> Iterator[Span | None]:
    """The reconcile's span, current while the body runs (so its API calls are its
    children); child of the first recorded event of `triggers` after a ``queue`` span
    from that event to now, linked to the others' events. An exception is recorded on it
    and raised on. Yields None when tracing is off."""
    if not enabled():
        yield None
        return
    tracer = _tracer()
    events = [trigger.span for trigger in triggers if trigger.span is not None]
    parent = None
    if events:
        first, queued_at = events[0]
        parent = trace.set_span_in_context(trace.NonRecordingSpan(first))
        tracer.start_span("queue", context=parent, start_time=queued_at).end()
    else:
        parent = trace.set_span_in_context(trace.INVALID_SPAN)  # a root, not a caller's child
    links = [trace.Link(context) for context, _ in events[1:]]
    attributes = _object(kind, namespace, name) | {
        "operator_kit.controller": controller, "operator_kit.triggers": str(triggers)}
    with tracer.start_as_current_span(f"reconcile {controller}", context=parent, links=links,
                                      attributes=attributes) as span:
        yield span


def start_call(method: str, path: str, headers: MutableMapping[str, str]) -> Span | None:
    """A CLIENT span for one API call made inside a reconcile, with its trace context put
    into `headers` (W3C ``traceparent``: an API server with tracing on continues the
    trace). None -- and `headers` untouched -- outside a reconcile or with tracing off."""
    if trace is None or not trace.get_current_span().is_recording():
        return None
    span = _tracer().start_span(method, kind=trace.SpanKind.CLIENT, attributes={
        "http.request.method": method, "url.path": path})
    propagate.inject(headers, context=trace.set_span_in_context(span))
    return span


def end_call(span: Span | None, status: str) -> None:
    """End `start_call`'s span with the response's status code (``<error>``: none)."""
    if span is None:
        return
    if status.isdigit():
        span.set_attribute("http.response.status_code", int(status))
        if int(status) >= 400:
            span.set_status(trace.Status(trace.StatusCode.ERROR))
    else:
        span.set_status(trace.Status(trace.StatusCode.ERROR, "no response"))
    span.end()
