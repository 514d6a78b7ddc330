"""OpenTelemetry tracing for this process, configured by the standard OTEL_* variables.

Tracing is on when an OTLP endpoint is named (OTEL_EXPORTER_OTLP_ENDPOINT or
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) and OTEL_SDK_DISABLED is not true; the exporter, the
batch processor, the sampler and the resource read the rest of the OTEL_* variables themselves.
When it is off, `tracer()` is None and every hook returns after that one check: the run loop's
hot path allocates nothing for tracing.

The SDK starts a background export thread, so the provider is built lazily in each process
(after a prefork pool's fork, never before) and rebuilt if the process id changed.

The span ids of a run's invoke_agent span are chosen when the run is created, long before the
span is emitted (engine.tracing explains why); `preset_ids` makes the next span started in this
context take them, through the SDK's public IdGenerator extension point.
"""

import contextlib
import contextvars
import logging
import os
import threading

from django.conf import settings
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Tracer, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from platform_site.around_middleware import AroundMiddleware

log = logging.getLogger(__name__)

TRACER_NAME = "agentry"
_PRESET: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar("agentry_preset_ids", default=None)
_propagator = TraceContextTextMapPropagator()


class _PresetIdGenerator(RandomIdGenerator):
    """Random ids, unless a span's ids were fixed in advance (preset_ids)."""

    def generate_span_id(self) -> int:
        preset = _PRESET.get()
        return preset[1] if preset else super().generate_span_id()

    def generate_trace_id(self) -> int:
        preset = _PRESET.get()
        return preset[0] if preset else super().generate_trace_id()


@contextlib.contextmanager
def preset_ids(trace_id: int, span_id: int):
    token = _PRESET.set((trace_id, span_id))
    try:
        yield
    finally:
        _PRESET.reset(token)


class _Tracing:
    def __init__(self):
        self._lock = threading.Lock()
        self._pid: int | None = None
        self._provider: TracerProvider | None = None
        self._tracer: Tracer | None = None
        self._endpoint: str | None = None

    def tracer(self) -> Tracer | None:
        if self._pid == os.getpid():
            return self._tracer
        if not settings.OTEL_TRACES_ENABLED and self._endpoint is None:
            self._pid = os.getpid()
            return None
        with self._lock:
            if self._pid != os.getpid():
                self._build()
        return self._tracer

    def _build(self) -> None:
        # The exporter reads OTEL_EXPORTER_OTLP_* (endpoint, headers, timeout, compression) itself.
        exporter = OTLPSpanExporter(endpoint=self._endpoint) if self._endpoint else OTLPSpanExporter()
        provider = TracerProvider(resource=Resource.create(), id_generator=_PresetIdGenerator())
        provider.add_span_processor(BatchSpanProcessor(exporter))
        self._provider = provider
        self._tracer = provider.get_tracer(TRACER_NAME)
        self._pid = os.getpid()
        log.info("tracing on: spans are exported over OTLP/HTTP")

    def start(self, *, endpoint: str) -> None:
        """Trace to `endpoint` (an OTLP/HTTP traces URL) whatever the settings say."""
        with self._lock:
            self._shutdown()
            self._endpoint = endpoint
            self._build()

    def flush(self) -> None:
        if self._provider is not None:
            self._provider.force_flush()

    def stop(self) -> None:
        with self._lock:
            self._shutdown()
            self._endpoint = None

    def _shutdown(self) -> None:
        if self._provider is not None and self._pid == os.getpid():
            self._provider.shutdown()
        self._provider = self._tracer = None
        self._pid = None


tracing = _Tracing()


def tracer() -> Tracer | None:
    """This process's tracer, or None when tracing is off."""
    return tracing.tracer()


def incoming_span_context(headers) -> trace.SpanContext:
    """The caller's span from a W3C `traceparent` header (invalid if there is none)."""
    carrier = {"traceparent": headers.get("traceparent", ""), "tracestate": headers.get("tracestate", "")}
    return trace.get_current_span(_propagator.extract(carrier)).get_span_context()


@contextlib.contextmanager
def _caller_context(request):
    """The caller's span as the current context while the request runs, when the request names
    one and tracing is on."""
    if "traceparent" not in request.headers or tracer() is None:
        yield
        return
    parent = incoming_span_context(request.headers)
    if not parent.is_valid:
        yield
        return
    token = otel_context.attach(trace.set_span_in_context(trace.NonRecordingSpan(parent)))
    try:
        yield
    finally:
        otel_context.detach(token)


class TraceContextMiddleware(AroundMiddleware):
    """Continue the caller's trace: a request's W3C traceparent becomes the current context, so
    a run it creates is a child of the caller's span (engine.admission records it on the run)."""

    def around(self, request):
        return _caller_context(request)
