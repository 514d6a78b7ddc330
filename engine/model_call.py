"""One model call with its attempts: retries with backoff, then the fallback model.

Each attempt is its own LLMCall row, written before the request and completed after it. The
completed row, what the caller derives from the answer (an assistant message, a summary), the
run's token and cost totals and the agent's daily usage commit together, so a completed call
is never made again; a row left `started` by a dead worker is closed as interrupted and the
call is attempted anew.

An answer the caller cannot use (`check`: an empty one, say) is an attempt like a failed one:
recorded with its tokens, then retried. An error saying the request was too long ends the call
at once (ContextOverflow: the caller may fold the context and call again); one saying a mode is
unsupported (streaming with tools, on llama.cpp) sends the same attempt again unstreamed, without
using up a retry, and the model config remembers it for later calls.

Cost uses the model config's prices read at call time (in the same query as its API key), so
a price changed mid-run applies from the next call on; the `llm_call.completed` event records
the prices used.
"""

import logging
import time
import zoneinfo
from collections.abc import Callable
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from agents.models import ModelConfig
from agents.providers import LLMResponse, ProviderError, get_provider
from agents.services import agent_usage_add
from agents.snapshot import AgentSnapshot, snapshot_models
from conversations import events
from conversations.events import EventType
from conversations.models import LLMCall, Run
from conversations.services import run_event_append
from engine.deltas import DeltaRelay
from platform_site.backoff import backoff_delay
from platform_site.dbpool import release_connection
from platform_site.logs import bind
from platform_site.text import scrub_nul

log = logging.getLogger(__name__)

_MILLION = Decimal(1_000_000)
_PRICES = ("price_input_per_million", "price_output_per_million", "price_cached_input_per_million")


class ModelStepFailed(Exception):
    """Every attempt on every configured model failed, or the call cannot be made at all."""


class EmptyAnswer(ModelStepFailed):
    """Every attempt answered with neither text nor tool calls."""


class ContextOverflow(ModelStepFailed):
    """The server said the request does not fit the model's context."""


class DeadlineReached(Exception):
    """The run's wall-clock deadline passed while it was waiting on the model."""


def call_cost(prices: dict, response: LLMResponse) -> Decimal:
    usage = response.usage
    uncached = max(usage.prompt_tokens - usage.cached_tokens, 0)
    return (
        Decimal(uncached) * Decimal(prices["price_input_per_million"])
        + Decimal(usage.cached_tokens) * Decimal(prices["price_cached_input_per_million"])
        + Decimal(usage.completion_tokens) * Decimal(prices["price_output_per_million"])
    ) / _MILLION


def backoff_seconds(attempt: int, retry_after: float | None) -> float:
    return backoff_delay(
        attempt,
        base=settings.AGENTRY_RETRY_BASE_SECONDS,
        cap=settings.AGENTRY_RETRY_MAX_SECONDS,
        retry_after=retry_after,
    )


def seconds_left(deadline) -> float | None:
    """Seconds until the run's deadline; DeadlineReached once it has passed."""
    if deadline is None:
        return None
    left = (deadline - timezone.now()).total_seconds()
    if left <= 0:
        raise DeadlineReached()
    return left


def _close_interrupted_attempts(run: Run, purpose: str, iteration: int) -> int:
    """Returns the next attempt number for this call."""
    calls = LLMCall.objects.filter(run=run, purpose=purpose, iteration=iteration)
    statuses = list(calls.values_list("status", flat=True))
    if LLMCall.Status.STARTED in statuses:
        calls.filter(status=LLMCall.Status.STARTED).update(
            status=LLMCall.Status.FAILED,
            error="interrupted: the worker stopped before the call completed",
            finished_at=timezone.now(),
        )
    return len(statuses) + 1


def _live_settings(model: dict) -> tuple[str, dict, bool]:
    """API key, prices and whether streaming with tools was learned to fail, read at call time."""
    row = (
        ModelConfig.objects.filter(pk=model["id"]).values_list("api_key", "stream_tools_unsupported", *_PRICES).first()
    )
    if row is None:  # the config is protected from deletion; the snapshot's prices are the fallback
        return "", {name: model[name] for name in _PRICES}, False
    return row[0] or "", {name: str(value) for name, value in zip(_PRICES, row[2:])}, row[1]


def _learn_stream_tools_unsupported(model: dict) -> None:
    # Guarded, so concurrent runs learning the same thing write (and log) it once.
    if ModelConfig.objects.filter(pk=model["id"], stream_tools_unsupported=False).update(stream_tools_unsupported=True):
        log.warning(
            "model config %s: streamed requests with tools are refused; sending them unstreamed from now on",
            model["name"],
        )


def _record_failure(*, run, owner, call, error: ProviderError, started) -> None:
    with transaction.atomic():
        LLMCall.objects.filter(pk=call.pk).update(
            status=LLMCall.Status.FAILED,
            response=error.raw,
            http_status=error.http_status,
            error=error.message,
            latency_ms=int((time.monotonic() - started) * 1000),
            finished_at=timezone.now(),
        )
        payload = events.llm_call_failed(
            llm_call_id=call.pk,
            purpose=call.purpose,
            attempt=call.attempt,
            error=error.message,
            http_status=error.http_status,
            retryable=error.retryable,
        )
        run_event_append(run_id=run.pk, type=EventType.LLM_CALL_FAILED, lease_owner=owner, payload=payload)


def _account(*, run, call, response, prices, started, time_zone, status: str, error: str = "") -> tuple:
    """Completes the call row with its answer and adds its tokens and cost to the run and the
    agent's day. Returns (usage, cost). Runs inside the caller's transaction."""
    usage = response.usage
    cost = call_cost(prices, response)
    LLMCall.objects.filter(pk=call.pk).update(
        status=status,
        response=response.raw,
        http_status=response.http_status,
        finish_reason=response.finish_reason[:32],
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        cached_tokens=usage.cached_tokens,
        reasoning_tokens=usage.reasoning_tokens,
        total_tokens=usage.total_tokens,
        usage_estimated=usage.estimated,
        cost=cost,
        latency_ms=int((time.monotonic() - started) * 1000),
        error=error,
        finished_at=timezone.now(),
    )
    step = call.purpose == LLMCall.Purpose.STEP and status == LLMCall.Status.SUCCEEDED
    Run.objects.filter(pk=run.pk).update(
        iterations=F("iterations") + (1 if step else 0),
        prompt_tokens=F("prompt_tokens") + usage.prompt_tokens,
        completion_tokens=F("completion_tokens") + usage.completion_tokens,
        cached_tokens=F("cached_tokens") + usage.cached_tokens,
        reasoning_tokens=F("reasoning_tokens") + usage.reasoning_tokens,
        total_tokens=F("total_tokens") + usage.total_tokens,
        cost=F("cost") + cost,
        **({"usage_estimated": True} if usage.estimated else {}),
    )
    agent_usage_add(
        agent_id=run.agent_id,
        day=timezone.now().astimezone(zoneinfo.ZoneInfo(time_zone)).date(),
        tokens=usage.total_tokens,
        cost=cost,
    )
    return usage, cost


def _record_rejected(*, run, owner, call, response, prices, started, time_zone, reason: str) -> None:
    """An answer that came back but cannot be used: a failed attempt that still cost tokens."""
    response = scrub_nul(response)
    with transaction.atomic():
        _account(
            run=run,
            call=call,
            response=response,
            prices=prices,
            started=started,
            time_zone=time_zone,
            status=LLMCall.Status.FAILED,
            error=reason,
        )
        payload = events.llm_call_failed(
            llm_call_id=call.pk,
            purpose=call.purpose,
            attempt=call.attempt,
            error=reason,
            http_status=response.http_status,
            retryable=True,
            usage=response.usage.__dict__,
        )
        run_event_append(run_id=run.pk, type=EventType.LLM_CALL_FAILED, lease_owner=owner, payload=payload)


def _record_success(*, run, owner, call, response, prices, started, time_zone, record):
    response = scrub_nul(response)
    with transaction.atomic():
        usage, cost = _account(
            run=run,
            call=call,
            response=response,
            prices=prices,
            started=started,
            time_zone=time_zone,
            status=LLMCall.Status.SUCCEEDED,
        )
        result = record(call, response)
        payload = events.llm_call_completed(
            llm_call_id=call.pk,
            purpose=call.purpose,
            iteration=call.iteration,
            attempt=call.attempt,
            finish_reason=response.finish_reason,
            tool_calls=[c.name for c in response.tool_calls],
            usage=usage.__dict__,
            cost=str(cost),
            prices=prices,
        )
        run_event_append(run_id=run.pk, type=EventType.LLM_CALL_COMPLETED, lease_owner=owner, payload=payload)
    return result


def _start_attempt(*, run, owner, model, body, purpose, iteration, attempt) -> LLMCall:
    with transaction.atomic():
        call = LLMCall.objects.create(
            run=run,
            iteration=iteration,
            attempt=attempt,
            purpose=purpose,
            model_config_id=model["id"],
            provider=model["provider"],
            model_name=model["model"],
            request=body,
        )
        payload = events.llm_call_started(
            llm_call_id=call.pk, purpose=purpose, iteration=iteration, attempt=attempt, model=model["name"]
        )
        run_event_append(run_id=run.pk, type=EventType.LLM_CALL_STARTED, lease_owner=owner, payload=payload)
    return call


def _wait_before_retry(run: Run, try_number: int, retry_after: float | None) -> None:
    wait = backoff_seconds(try_number, retry_after)
    left = seconds_left(run.deadline)
    time.sleep(wait if left is None else min(wait, left))


def model_call(
    *,
    run: Run,
    owner: str,
    snapshot: AgentSnapshot,
    purpose: str,
    iteration: int,
    build: Callable[[object, dict], dict],
    record: Callable[[LLMCall, LLMResponse], object],
    relay_deltas: bool = False,
    check: Callable[[LLMResponse], ModelStepFailed | None] | None = None,
):
    """Call the agent's model (then its fallback) until one attempt succeeds; returns what
    `record` made of the answer inside the transaction that completed the call. `check` may
    turn down an answer (returning the error to raise if every attempt is turned down)."""
    attempt = _close_interrupted_attempts(run, purpose, iteration)
    last_error: ProviderError | None = None
    rejected: ModelStepFailed | None = None
    made = 0
    time_zone = snapshot["agent"]["time_zone"]
    for model in snapshot_models(snapshot):
        api_key, prices, stream_tools_unsupported = _live_settings(model)
        try:
            provider = get_provider(model["provider"])
            body = build(provider, model)
            if stream_tools_unsupported and body.get("stream") and body.get("tools"):
                body = build(provider, {**model, "stream": False})
        except ProviderError as exc:
            last_error, rejected = exc, None
            continue
        try_number = 1
        while try_number <= model["max_retries"] + 1:
            cap = seconds_left(run.deadline)
            call = _start_attempt(
                run=run, owner=owner, model=model, body=body, purpose=purpose, iteration=iteration, attempt=attempt
            )
            attempt += 1
            made += 1
            # Log lines from here on (this attempt, and the tool calls it asks for) name this call.
            bind(llm_call_id=call.pk)
            started = time.monotonic()
            relay = DeltaRelay(run_id=run.pk, llm_call_id=call.pk) if relay_deltas else None
            try:
                release_connection()
                response = provider.send(
                    model=model, api_key=api_key, body=body, on_delta=relay.push if relay else None, timeout_cap=cap
                )
            except ProviderError as exc:
                if relay:
                    relay.flush()
                _record_failure(run=run, owner=owner, call=call, error=exc, started=started)
                log.warning(
                    "model call %s.%s (%s) to %s failed: %s",
                    iteration,
                    call.attempt,
                    purpose,
                    model["name"],
                    exc.message,
                )
                last_error, rejected = exc, None
                if exc.context_overflow:
                    raise ContextOverflow(f"The request does not fit the model's context: {exc.message}") from exc
                if exc.stream_unsupported and body.get("stream"):
                    # The same attempt again in the mode that works: no retry is used up.
                    if body.get("tools"):
                        _learn_stream_tools_unsupported(model)
                    body = build(provider, {**model, "stream": False})
                    continue
                if not exc.retryable:
                    break
                if try_number <= model["max_retries"]:
                    _wait_before_retry(run, try_number, exc.retry_after)
                try_number += 1
                continue
            if relay:
                relay.flush()
            log.info(
                "model call %s.%s (%s) to %s: %s, %s tokens",
                iteration,
                call.attempt,
                purpose,
                model["name"],
                response.finish_reason,
                response.usage.total_tokens,
            )
            problem = check(response) if check else None
            if problem is None:
                return _record_success(
                    run=run,
                    owner=owner,
                    call=call,
                    response=response,
                    prices=prices,
                    started=started,
                    time_zone=time_zone,
                    record=record,
                )
            _record_rejected(
                run=run,
                owner=owner,
                call=call,
                response=response,
                prices=prices,
                started=started,
                time_zone=time_zone,
                reason=str(problem),
            )
            log.warning(
                "model call %s.%s (%s) to %s: answer turned down: %s",
                iteration,
                call.attempt,
                purpose,
                model["name"],
                problem,
            )
            rejected = problem
            try_number += 1
    if rejected is not None:
        raise rejected
    if last_error is None:
        raise ModelStepFailed("No model is configured for this agent.")
    if not made:
        raise ModelStepFailed(f"The model call could not be made: {last_error}")
    raise ModelStepFailed(f"The model call failed after {made} attempt{'s' if made != 1 else ''}: {last_error}")
