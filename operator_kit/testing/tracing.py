"""OpenTelemetry spans for a test: a tracer provider with an in-memory exporter, set for
the test alone (``operator_kit.tracing`` reads the global provider on every call).

Needs ``opentelemetry-sdk`` (the ``test`` extra has it)::

    def test_traced(spans: InMemorySpanExporter) -> None:
        ...
        names = [span.name for span in spans.get_finished_spans()]
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

__all__ = ["recorded_spans"]


@contextmanager
def recorded_spans() -> Iterator[InMemorySpanExporter]:
    """While the block runs, the spans operator_kit records, finished, in the exporter
    yielded. The global provider is swapped for the block, not set for good (OpenTelemetry
    lets a program set it once), so tests do not leak tracing into each other."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    original = trace.get_tracer_provider
    trace.get_tracer_provider = lambda: provider
    try:
        yield exporter
    finally:
        trace.get_tracer_provider = original
        provider.shutdown()
