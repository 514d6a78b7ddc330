"""One model step: call the model (with retries and the fallback model) and record it.

Each attempt is its own LLMCall row, written before the request and completed after it. The
completed row, the assistant message and the run's token totals commit together, so a
completed call is never made again; a row left `started` by a dead worker is closed as
interrupted and the step is attempted anew.
"""

import logging
import random
import time
from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from agents.engine.context import build_wire_messages
from agents.engine.deltas import DeltaRelay
from agents.leases import lease_fence
from agents.models import ModelConfig
from agents.providers import LLMResponse, ProviderError, get_provider
from conversations.models import LLMCall, Message, Run
from conversations.services import messages_append, run_event_append
from platform_site.logs import bind

log = logging.getLogger(__name__)

_MILLION = Decimal(1_000_000)


class ModelStepFailed(Exception):
    """Every attempt on every configured model failed."""


@dataclass
class StepResult:
    message: Message
    response: LLMResponse


def call_cost(model: dict, response: LLMResponse) -> Decimal:
    usage = response.usage
    uncached = max(usage.prompt_tokens - usage.cached_tokens, 0)
    return (
        Decimal(uncached) * Decimal(model["price_input_per_million"])
        + Decimal(usage.cached_tokens) * Decimal(model["price_cached_input_per_million"])
        + Decimal(usage.completion_tokens) * Decimal(model["price_output_per_million"])
    ) / _MILLION


def backoff_seconds(attempt: int, retry_after: float | None) -> float:
    cap = settings.AGENTRY_RETRY_MAX_SECONDS
    if retry_after is not None:
        return min(retry_after, cap)
    delay = min(settings.AGENTRY_RETRY_BASE_SECONDS * (2 ** (attempt - 1)), cap)
    return delay + random.uniform(0, delay / 4)


def _close_interrupted_attempts(run: Run, iteration: int) -> int:
    """Returns the next attempt number for this iteration."""
    calls = LLMCall.objects.filter(run=run, purpose=LLMCall.Purpose.STEP, iteration=iteration)
    calls.filter(status=LLMCall.Status.STARTED).update(
        status=LLMCall.Status.FAILED, error="interrupted: the worker stopped before the call completed",
        finished_at=timezone.now(),
    )
    return calls.count() + 1


def _normalised_tool_calls(response: LLMResponse, run: Run, iteration: int) -> list[dict]:
    """Some providers (seed 000's) send tool calls without ids; results must be matched to
    calls, so every call gets a stable id before it is stored."""
    calls, seen = [], set()
    for index, call in enumerate(response.tool_calls):
        call_id = call.id or f"call_{run.pk.hex[:12]}_{iteration}_{index}"
        if call_id in seen:
            call_id = f"{call_id}_{index}"
        seen.add(call_id)
        calls.append({"id": call_id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}})
    return calls


def _record_success(*, run, owner, call, model, response, started, iteration) -> Message:
    usage = response.usage
    cost = call_cost(model, response)
    tool_calls = _normalised_tool_calls(response, run, iteration)
    with transaction.atomic():
        lease_fence(run_id=run.pk, owner=owner)
        LLMCall.objects.filter(pk=call.pk).update(
            status=LLMCall.Status.SUCCEEDED, response=response.raw, http_status=response.http_status,
            finish_reason=response.finish_reason, prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens, cached_tokens=usage.cached_tokens,
            reasoning_tokens=usage.reasoning_tokens, total_tokens=usage.total_tokens,
            usage_estimated=usage.estimated, cost=cost, latency_ms=int((time.monotonic() - started) * 1000),
            finished_at=timezone.now(),
        )
        Run.objects.filter(pk=run.pk).update(
            iterations=F("iterations") + 1, prompt_tokens=F("prompt_tokens") + usage.prompt_tokens,
            completion_tokens=F("completion_tokens") + usage.completion_tokens,
            cached_tokens=F("cached_tokens") + usage.cached_tokens,
            reasoning_tokens=F("reasoning_tokens") + usage.reasoning_tokens,
            total_tokens=F("total_tokens") + usage.total_tokens, cost=F("cost") + cost,
        )
        [message] = messages_append(
            conversation_id=run.conversation_id, run_id=run.pk,
            messages=[{"role": Message.Role.ASSISTANT, "content": response.content,
                       "tool_calls": tool_calls or None, "llm_call_id": call.pk}],
        )
        run_event_append(run_id=run.pk, type="llm_call.completed", payload={
            "llm_call_id": call.pk, "iteration": iteration, "attempt": call.attempt,
            "finish_reason": response.finish_reason, "tool_calls": [c["function"]["name"] for c in tool_calls],
            "usage": usage.__dict__, "cost": str(cost),
        })
    return message


def _record_failure(*, run, owner, call, error: ProviderError, started) -> None:
    with transaction.atomic():
        lease_fence(run_id=run.pk, owner=owner)
        LLMCall.objects.filter(pk=call.pk).update(
            status=LLMCall.Status.FAILED, response=error.raw, http_status=error.http_status,
            error=error.message, latency_ms=int((time.monotonic() - started) * 1000), finished_at=timezone.now(),
        )
        run_event_append(run_id=run.pk, type="llm_call.failed", payload={
            "llm_call_id": call.pk, "attempt": call.attempt, "error": error.message,
            "http_status": error.http_status, "retryable": error.retryable,
        })


def llm_step(*, run: Run, owner: str, snapshot: dict, messages: list[Message]) -> StepResult:
    iteration = run.iterations + 1
    attempt = _close_interrupted_attempts(run, iteration)
    wire_messages = build_wire_messages(run=run, snapshot=snapshot, messages=messages)
    agent = snapshot["agent"]
    last_error = None
    for model in filter(None, [snapshot["model"], snapshot.get("fallback_model")]):
        provider = get_provider(model["provider"])
        api_key = ModelConfig.objects.filter(pk=model["id"]).values_list("api_key", flat=True).first() or ""
        body = provider.build_request(
            model=model, messages=wire_messages, tools=snapshot["tools"],
            tool_choice=agent["tool_choice"], parallel_tool_calls=agent["parallel_tool_calls"],
        )
        for try_number in range(1, model["max_retries"] + 2):
            with transaction.atomic():
                lease_fence(run_id=run.pk, owner=owner)
                call = LLMCall.objects.create(
                    run=run, iteration=iteration, attempt=attempt, model_config_id=model["id"],
                    provider=model["provider"], model_name=model["model"], request=body,
                )
                run_event_append(run_id=run.pk, type="llm_call.started", payload={
                    "llm_call_id": call.pk, "iteration": iteration, "attempt": attempt, "model": model["name"],
                })
            attempt += 1
            # Log lines from here on (this attempt, and the tool calls it asks for) name this call.
            bind(llm_call_id=call.pk)
            started = time.monotonic()
            relay = DeltaRelay(run_id=run.pk, llm_call_id=call.pk)
            try:
                response = provider.send(model=model, api_key=api_key, body=body, on_delta=relay.push)
            except ProviderError as exc:
                relay.flush()
                _record_failure(run=run, owner=owner, call=call, error=exc, started=started)
                log.warning("model call %s.%s to %s failed: %s", iteration, call.attempt, model["name"], exc.message)
                last_error = exc
                if not exc.retryable:
                    break
                if try_number <= model["max_retries"]:
                    time.sleep(backoff_seconds(try_number, exc.retry_after))
                continue
            relay.flush()
            message = _record_success(run=run, owner=owner, call=call, model=model, response=response,
                                      started=started, iteration=iteration)
            log.info("model call %s.%s to %s: %s, %s tokens", iteration, call.attempt, model["name"],
                     response.finish_reason, response.usage.total_tokens)
            return StepResult(message, response)
    raise ModelStepFailed(str(last_error) if last_error else "no model configured")
