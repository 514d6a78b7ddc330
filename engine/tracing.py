"""A run's spans, after the OpenTelemetry semantic conventions for generative AI.

A run is an `invoke_agent` span, each model attempt a `chat` span and each tool call an
`execute_tool` span; approvals are events of the run's span. A run outlives the processes that
carry it (it parks for approvals, is requeued between slices, is taken over after a crash), so
its span cannot be one in-memory span held open for its life. Instead:

- The run's trace context is fixed once and stored on the row: the trace id, the id of its
  invoke_agent span and the id of the caller's span (a W3C traceparent on the API request that
  created it). Admission sets it where the caller's span is current; a run created while tracing
  was off gets it at its first slice.
- Each slice makes the run's span current, as a non-recording span with the stored ids, in the
  slice's own context (each greenlet a worker's engine loop carries has its own contextvars), so
  chat and execute_tool spans are children of the run whichever worker takes the slice.
- The invoke_agent span itself is emitted once, after the run's terminal state commits
  (run_trace_end), with the stored ids, the run's creation and end times, its totals, and its
  approvals as events read from the ledger with the times they happened.

Chat and tool spans are emitted after the fact with their measured start time, so no span is
held open across a wait. With tracing off every hook returns after one check.
"""

import contextlib
import time
from functools import partial

from django.db import transaction
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from conversations.models import Approval, LLMCall, Run, RunStatus, ToolInvocation
from platform_site.telemetry import preset_ids, tracer

_OFF = contextlib.nullcontext()
_NO_FIELDS: dict = {}
_ids = RandomIdGenerator()
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
# The semantic conventions' provider names for the wire formats the engine speaks.
_PROVIDER_NAMES = {"openai_compatible": "openai", "anthropic": "anthropic"}
_FAILED = {RunStatus.FAILED, RunStatus.EXPIRED}


def _hex(value: int, width: int) -> str:
    return format(value, f"0{width}x")


def _new_trace_fields() -> dict:
    """The run's trace context: a child of the current span (the API request's caller), if any."""
    caller = trace.get_current_span().get_span_context()
    trace_id = caller.trace_id if caller.is_valid else _ids.generate_trace_id()
    return {
        "trace_id": _hex(trace_id, 32),
        "trace_span_id": _hex(_ids.generate_span_id(), 16),
        "trace_parent_span_id": _hex(caller.span_id, 16) if caller.is_valid else "",
    }


def run_trace_fields() -> dict:
    """The trace fields of a run being created (none when tracing is off)."""
    if tracer() is None:
        return _NO_FIELDS
    return _new_trace_fields()


def _run_span_context(trace_id: str, span_id: str) -> SpanContext:
    return SpanContext(trace_id=int(trace_id, 16), span_id=int(span_id, 16), is_remote=False, trace_flags=_SAMPLED)


def run_slice(run_id):
    """A context in which the spans of one slice of the run are the run's children."""
    if tracer() is None:
        return _OFF
    return _slice(run_id)


@contextlib.contextmanager
def _slice(run_id):
    ids = Run.objects.filter(pk=run_id).values_list("trace_id", "trace_span_id").first()
    if ids is not None and not ids[0]:
        # Created while tracing was off: traced from here on, as a trace of its own.
        Run.objects.filter(pk=run_id, trace_id="").update(**_new_trace_fields())
        ids = Run.objects.filter(pk=run_id).values_list("trace_id", "trace_span_id").first()
    if ids is None:
        yield
        return
    span = NonRecordingSpan(_run_span_context(*ids))
    token = otel_context.attach(trace.set_span_in_context(span))
    try:
        yield
    finally:
        otel_context.detach(token)


def _started_ns(started: float) -> int:
    """Wall-clock nanoseconds of a time.monotonic() reading."""
    return time.time_ns() - int((time.monotonic() - started) * 1e9)


def chat_span(*, call: LLMCall, started: float, response=None, error=None, ended: float | None = None) -> None:
    """One model attempt: its model, tokens by kind and finish reason, or its error. `started`
    and `ended` (else now) are time.monotonic() readings; an answer's span ends when it arrived,
    before its record (which may end the run: engine.runs.AnswerEnding)."""
    t = tracer()
    if t is None:
        return
    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": _PROVIDER_NAMES.get(call.provider, call.provider),
        "gen_ai.request.model": call.model_name,
        "agentry.llm_call.id": call.pk,
        "agentry.llm_call.purpose": call.purpose,
        "agentry.llm_call.attempt": call.attempt,
    }
    if response is not None:
        usage = response.usage
        raw = response.raw if isinstance(response.raw, dict) else {}
        attributes.update(
            {
                "gen_ai.response.model": str(raw.get("model") or call.model_name),
                "gen_ai.response.finish_reasons": [response.finish_reason or ""],
                "gen_ai.usage.input_tokens": usage.prompt_tokens,
                "gen_ai.usage.output_tokens": usage.completion_tokens,
                "gen_ai.usage.cache_read.input_tokens": usage.cached_tokens,
                "gen_ai.usage.reasoning.output_tokens": usage.reasoning_tokens,
            }
        )
        if raw.get("id"):
            attributes["gen_ai.response.id"] = str(raw["id"])
    span = t.start_span(
        f"chat {call.model_name}", kind=SpanKind.CLIENT, start_time=_started_ns(started), attributes=attributes
    )
    if error is not None:
        # A provider error by its HTTP status when it has one; an answer turned down by the engine.
        kind = "answer_rejected" if isinstance(error, str) else getattr(error, "http_status", None)
        span.set_attribute("error.type", str(kind or type(error).__name__))
        span.set_status(Status(StatusCode.ERROR, str(error)[:500]))
    span.end(end_time=None if ended is None else _started_ns(ended))


def tool_span(*, invocation: ToolInvocation, started: float, status: str, error: str = "") -> None:
    """One tool call that ran."""
    t = tracer()
    if t is None:
        return
    span = t.start_span(
        f"execute_tool {invocation.tool_name}",
        kind=SpanKind.INTERNAL,
        start_time=_started_ns(started),
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": invocation.tool_name,
            "gen_ai.tool.call.id": invocation.tool_call_id,
            "gen_ai.tool.type": "function",
            "agentry.tool_invocation.id": invocation.pk,
            "agentry.tool_invocation.status": status,
        },
    )
    if status != ToolInvocation.Status.SUCCEEDED:
        span.set_attribute("error.type", error or status)
        span.set_status(Status(StatusCode.ERROR, error or status))
    span.end()


def run_trace_end(*, run_id) -> None:
    """Emit the run's invoke_agent span once its terminal state has committed."""
    if tracer() is None:
        return
    transaction.on_commit(partial(_emit_run_span, run_id), robust=True)


def _ns(moment) -> int:
    return int(moment.timestamp() * 1e9)


def _emit_run_span(run_id) -> None:
    t = tracer()
    run = Run.objects.select_related("agent", "agent_version").filter(pk=run_id).first()
    if t is None or run is None or not run.trace_id or not run.is_terminal:
        return
    # Explicitly empty without a caller: the run may end inside one of its own slices, whose
    # current span is the run's (run_slice).
    parent = otel_context.Context()
    if run.trace_parent_span_id:
        caller = SpanContext(
            trace_id=int(run.trace_id, 16),
            span_id=int(run.trace_parent_span_id, 16),
            is_remote=True,
            trace_flags=_SAMPLED,
        )
        parent = trace.set_span_in_context(NonRecordingSpan(caller))
    attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.id": str(run.agent_id),
        "gen_ai.agent.name": run.agent.name,
        "gen_ai.agent.version": str(run.agent_version.number),
        "gen_ai.conversation.id": str(run.conversation_id),
        "gen_ai.usage.input_tokens": run.prompt_tokens,
        "gen_ai.usage.output_tokens": run.completion_tokens,
        "gen_ai.usage.cache_read.input_tokens": run.cached_tokens,
        "gen_ai.usage.reasoning.output_tokens": run.reasoning_tokens,
        "agentry.run.id": str(run.pk),
        "agentry.run.status": run.status,
        "agentry.run.stop_reason": run.stop_reason,
        "agentry.run.iterations": run.iterations,
        "agentry.run.cost": float(run.cost),
    }
    with preset_ids(int(run.trace_id, 16), int(run.trace_span_id, 16)):
        span = t.start_span(
            f"invoke_agent {run.agent.name}",
            context=parent,
            kind=SpanKind.INTERNAL,
            start_time=_ns(run.created_at),
            attributes=attributes,
        )
    for approval in Approval.objects.filter(run_id=run.pk).select_related("invocation").order_by("created_at"):
        named = {"gen_ai.tool.name": approval.invocation.tool_name, "gen_ai.tool.call.id": approval.tool_call_id}
        span.add_event("agentry.approval.requested", attributes=named, timestamp=_ns(approval.created_at))
        if approval.decided_at is not None:
            decided = {
                **named,
                "agentry.approval.status": approval.status,
                "agentry.approval.channel": approval.channel,
            }
            span.add_event("agentry.approval.decided", attributes=decided, timestamp=_ns(approval.decided_at))
    if run.status in _FAILED:
        span.set_attribute("error.type", run.stop_reason or run.status)
        span.set_status(Status(StatusCode.ERROR, (run.error or run.stop_reason)[:500]))
    span.end(end_time=_ns(run.finished_at or run.created_at))
