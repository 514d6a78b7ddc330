"""One model call with its attempts: retries with backoff, then the fallback model.

Each attempt is its own LLMCall row, written (with its event) before the request and completed
after it. The completed row, what the caller derives from the answer (an assistant message, a
summary), the run's token and cost totals, the agent's daily usage and the event commit
together, so a completed call is never made again; a row left `started` by a dead worker is
closed as interrupted when the call is attempted anew. Each of these records is one ledger
batch (conversations.batch) fenced by the run's lease: one statement on PostgreSQL.

The caller says what to ask as a value (ModelRequest) and gets the answer back as a value
(Answer), not yet recorded: it decides what the answer leads to, then records it with its own
writes in the same commit (answer_writes, then answer_record). An answer the request turns down
(`reject_empty`: one with neither text nor tool calls) is an attempt like a failed one: recorded
with its tokens, then retried. An error saying the request was too long ends the call
at once (ContextOverflow: the caller may fold the context and call again); one saying a mode is
unsupported (streaming with tools, on llama.cpp) sends the same attempt again unstreamed, without
using up a retry, and the model config remembers it for later calls.

A server that reports no usage gets an estimate, scaled by what the model config learned from its
calls that did report usage (agents.providers.calibration): the sums it learns from ride the
statement that completes such a call, for the config's first calls and then a sample.

Cost uses the model config's prices read at call time, with its API key (in the statement that
writes the first attempt's row, unless the model streams: then before the request is built), so
a price changed mid-run applies from the next call on; the `llm_call.completed` event records
the prices used.
"""

import logging
import time
import zoneinfo
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from decimal import Decimal
from functools import partial
from typing import Protocol

from django.conf import settings
from django.db import connection
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from agents.models import ModelConfig
from agents.providers import LLMResponse, ProviderError, get_provider
from agents.providers.caching import cache_key
from agents.providers.calibration import Calibration, calibration_sample
from agents.providers.media import MediaTokens, has_parts, is_part, media_tokens
from agents.services import agent_usage_add
from agents.snapshot import AgentSnapshot, ModelSnapshot, snapshot_models
from attachments.inline import AttachmentUnavailable, inlined
from conversations import events
from conversations.batch import (
    Batch,
    Plus,
    Update,
    batch_commit,
    count,
    event_add,
    row_insert,
    row_update,
    run_event_append,
    run_guard,
    run_listened_for,
)
from conversations.events import EventType
from conversations.fencing import LeaseLost
from conversations.models import LLMCall, Run
from conversations.selectors import STEP_RUN_COLUMNS
from conversations.usage import PROMPT_SHARES, USAGE_FIELDS, usage_values
from engine.tracing import chat_span
from engine.window import fitted
from platform_site import green
from platform_site.backoff import backoff_delay
from platform_site.dbpool import release_connection
from platform_site.logs import bind
from platform_site.rows import Columns
from platform_site.text import scrub_nul

log = logging.getLogger(__name__)

_MILLION = Decimal(1_000_000)
_PRICES = ("price_input_per_million", "price_output_per_million", "price_cached_input_per_million")
# Priced apart only where the config says so (else as input tokens), and only then in a call's prices.
_AUDIO_PRICE = "price_audio_input_per_million"
_CACHE_WRITE_PRICE = "price_cache_write_per_million"
_APART = (_AUDIO_PRICE, _CACHE_WRITE_PRICE)


class ModelStepFailed(Exception):
    """Every attempt on every configured model failed, or the call cannot be made at all."""


class EmptyAnswer(ModelStepFailed):
    """Every attempt answered with neither text nor tool calls."""


class ContextOverflow(ModelStepFailed):
    """The server said the request does not fit the model's context (`server_said`: its words)."""

    def __init__(self, server_said: str):
        super().__init__(f"The request does not fit the model's context: {server_said}")
        self.server_said = server_said


class DeadlineReached(Exception):
    """The run's wall-clock deadline passed while it was waiting on the model."""


# Streamed text is relayed to the run's events while the model is still answering, coalesced
# for a short window: a chatty stream (a few characters a chunk) costs a handful of event rows a
# second instead of one a chunk.
FLUSH_INTERVAL_SECONDS = 0.02


class DeltaRelay:
    def __init__(self, *, run_id, llm_call_id: int):
        self.run_id = run_id
        self.llm_call_id = llm_call_id
        self._buffer: list[str] = []
        self._last_flush = time.monotonic()
        # Whether a listener hears the run's deltas (chat answers edited as they stream): read
        # once per model call, not once per delta.
        self._listening: bool | None = None

    def push(self, text: str) -> None:
        self._buffer.append(text)
        if time.monotonic() - self._last_flush >= FLUSH_INTERVAL_SECONDS:
            self.flush()

    def flush(self) -> None:
        if self._buffer:
            text, self._buffer = "".join(self._buffer), []
            if self._listening is None:
                self._listening = run_listened_for(run_id=self.run_id, type=EventType.MESSAGE_DELTA)
            run_event_append(
                run_id=self.run_id,
                type=EventType.MESSAGE_DELTA,
                payload=events.message_delta(llm_call_id=self.llm_call_id, text=text),
                listening=self._listening,
            )
            # Back to waiting on the stream: do not hold a pooled connection meanwhile.
            release_connection()
        self._last_flush = time.monotonic()


def call_cost(prices: dict, response: LLMResponse) -> Decimal:
    """Prompt tokens at the input price (cached ones at theirs; images are input tokens to both
    providers), audio tokens and cache writes at their prices where the config sets them, the
    answer at the output price."""
    usage = response.usage
    audio, written = usage.audio_tokens, usage.cache_write_tokens
    uncached = max(usage.prompt_tokens - usage.cached_tokens - audio - written, 0)
    cost = (
        Decimal(uncached) * Decimal(prices["price_input_per_million"])
        + Decimal(usage.cached_tokens) * Decimal(prices["price_cached_input_per_million"])
        + Decimal(usage.completion_tokens) * Decimal(prices["price_output_per_million"])
    )
    for tokens, price in ((audio, _AUDIO_PRICE), (written, _CACHE_WRITE_PRICE)):
        if tokens:
            cost += Decimal(tokens) * Decimal(prices.get(price) or prices["price_input_per_million"])
    return cost / _MILLION


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


# Read at call time, not from the snapshot: a rotated key or a changed price applies at once.
_CALIBRATION = tuple(field.name for field in fields(Calibration))
_SETTINGS = Columns(
    ModelConfig, ("id", "api_key", "stream_tools_unsupported", *_PRICES, *_APART, *_CALIBRATION), "config"
)
_SETTINGS_SQL = f'SELECT {_SETTINGS.sql} FROM "{ModelConfig._meta.db_table}" config WHERE config."id" = %s'
_SETTINGS_COLUMNS = tuple(field.column for field in _SETTINGS.fields)


@dataclass(frozen=True)
class _Live:
    """A model config's settings read at call time."""

    api_key: str
    prices: dict
    stream_tools_unsupported: bool
    calibration: Calibration


def _live_settings(model: dict, values: list | None = None) -> _Live:
    """API key, prices, whether streaming with tools was learned to fail and the estimates'
    calibration, read at call time: `values`, the columns as an attempt's batch read them, or
    else read here."""
    if values is None:
        with connection.cursor() as cursor:
            cursor.execute(_SETTINGS_SQL, [model["id"]])
            values = cursor.fetchone()
    if values is None or values[0] is None:
        # The config is protected from deletion; the snapshot's prices are the fallback.
        prices = {name: model[name] for name in _PRICES}
        prices.update({name: model[name] for name in _APART if model.get(name)})
        return _Live("", prices, False, Calibration())
    config = _SETTINGS.instance(values)
    # Plain notation: str() of a zero price read back from the database is "0E-6".
    prices = {name: format(getattr(config, name), "f") for name in _PRICES}
    prices.update({name: format(getattr(config, name), "f") for name in _APART if getattr(config, name)})
    return _Live(config.api_key or "", prices, config.stream_tools_unsupported, Calibration.of(config))


def _learn_stream_tools_unsupported(model: dict) -> None:
    # Guarded, so concurrent runs learning the same thing write (and log) it once.
    if ModelConfig.objects.filter(pk=model["id"], stream_tools_unsupported=False).update(stream_tools_unsupported=True):
        log.warning(
            "model config %s: streamed requests with tools are refused; sending them unstreamed from now on",
            model["name"],
        )


def _record_failure(*, run, owner, call, error: ProviderError, started) -> None:
    batch = Batch()
    run_guard(batch, run_id=run.pk, lease_owner=owner)
    row_update(
        batch,
        "call",
        call,
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
    event_add(batch, run_id=run.pk, type=EventType.LLM_CALL_FAILED, payload=payload)
    batch_commit(batch, run.pk, asynchronous=False)
    chat_span(call=call, started=started, error=error)


# Added to the run's totals by the fenced UPDATE of the run row that guards the batch.
_TOTALS = ("iterations", *USAGE_FIELDS, "cost")


class Guard(Protocol):
    """A guard an answer's commit may be tried with instead of the lease's fence (engine.llm_step):
    it adds the batch's guard on the run's row, given the answer's own assignments there (its
    totals: `sets`, field: Plus or value) and the columns to return (conversations.batch.run_guard)."""

    def __call__(self, batch: Batch, *, sets: dict[str, object], returning: tuple[str, ...]) -> None: ...


@dataclass(frozen=True)
class ModelRequest:
    """What a model call asks, as values: each attempt's body is built from it for the model
    config tried (fitted to that model's window)."""

    messages: list[dict]
    tools: list[dict] = field(default_factory=list)
    tool_choice: str = "auto"
    tool_name: str = ""
    parallel_tool_calls: bool = True
    # Summaries and moderation verdicts are prose, whatever the agent's answers must look like.
    plain_text: bool = False
    # An answer with neither text nor tool calls is turned down: retried, EmptyAnswer at the end.
    reject_empty: bool = False
    # The answer's text deltas are relayed to the run's streams as they arrive.
    relay_deltas: bool = False
    # Tried instead of the agent's models (a moderation rule's own model).
    models: list[ModelSnapshot] | None = None
    # The JSON Schema the answer must match, asked of the models whose config says they can
    # constrain their output to one (ModelConfig.structured_output); others are asked for text.
    answer_schema: dict | None = None
    # More writes of each attempt's first batch, the one that records the attempt started (the
    # memories it is shown: engine.memory.Recall), so every attempt says what it was sent,
    # answered or not. In that batch `{call.id}` is the attempt's row.
    attempt_writes: Callable[[Batch], None] | None = None
    # Sent instead of a chat request to each model tried (a transcription: engine.part_conversion).
    custom: "CustomCall | None" = None
    # Why these models are tried (engine.routing): recorded on each attempt's row, the fallback's
    # marked so; with `routing_store`, set on the run too, in each attempt's first batch.
    routing: dict | None = None
    routing_store: bool = False


@dataclass(frozen=True)
class CustomCall:
    """A call that is not a chat completion, made with a model call's attempts, retries, ledger
    rows and totals: `body(model)` is what the call's row records, `send(model=, api_key=, body=,
    timeout_cap=)` makes it (an LLMResponse, or a ProviderError), `cost(model, response)` prices
    its answer (instead of its tokens at the config's prices)."""

    body: Callable[[dict], dict]
    send: Callable[..., LLMResponse]
    cost: Callable[[dict, LLMResponse], Decimal]


def request_body(provider, model: dict, request: ModelRequest, *, key: str = "") -> dict:
    """The request's body for one model config; `key` groups it on the provider's prompt cache."""
    if request.answer_schema is not None and model.get("structured_output"):
        model = {**model, "response_format": "json_schema", "response_schema": request.answer_schema}
    elif request.plain_text:
        model = {**model, "response_format": "text", "response_schema": None}
    return provider.build_request(
        model=fitted(model, messages=request.messages, tools=request.tools),
        messages=request.messages,
        tools=request.tools,
        tool_choice=request.tool_choice,
        parallel_tool_calls=request.parallel_tool_calls,
        tool_name=request.tool_name,
        cache_key=key,
    )


EMPTY_ANSWER_MESSAGE = _(
    "I could not produce an answer: the model replied with no text and no tool calls, also when asked "
    "again. Please try again, or rephrase the question."
)


def _turned_down(request: ModelRequest, response: LLMResponse) -> ModelStepFailed | None:
    """Why the request turns the answer down, if it does (small models answer with nothing)."""
    if request.reject_empty and not response.content.strip() and not response.tool_calls:
        # The ledger records the rejected attempt with this text; the user reads it in the agent's
        # language (engine.loop, via engine.speech).
        return EmptyAnswer(EMPTY_ANSWER_MESSAGE)
    return None


@dataclass(frozen=True)
class Answer:
    """An attempt that came back with an answer the request accepts, not recorded yet, and what
    accounting for it needs (answer_writes)."""

    run: Run
    owner: str
    call: LLMCall
    response: LLMResponse
    prices: dict
    started: float
    time_zone: str
    # When the answer arrived (time.monotonic()): its chat span ends there.
    arrived: float = field(default_factory=time.monotonic)
    # What the answer adds to its model config's calibration sums (calibration_sample), if any.
    learned: dict | None = None
    # Its price when it is not its tokens at the config's prices (a CustomCall's).
    cost: Decimal | None = None


def _account(
    batch, answered: Answer, *, status: str, error: str = "", returning=(), guard: Guard | None = None
) -> tuple:
    """Adds to `batch` the completion of the call row with its answer, and its tokens and cost
    on the run (in the batch's guard: `guard`, else the lease's fence, which returns the run's
    `returning` columns too) and on the agent's day. Returns (usage, cost)."""
    run, call, response = answered.run, answered.call, answered.response
    usage = response.usage
    cost = answered.cost if answered.cost is not None else call_cost(answered.prices, response)
    step = call.purpose == LLMCall.Purpose.STEP and status == LLMCall.Status.SUCCEEDED
    amounts = (1 if step else 0, *usage_values(usage).values(), cost)
    sets: dict[str, object] = {name: Plus(amount) for name, amount in zip(_TOTALS, amounts, strict=True)}
    if usage.estimated:
        sets["usage_estimated"] = True
    if guard is None:
        guard = partial(run_guard, run_id=run.pk, lease_owner=answered.owner)
    guard(batch, sets=sets, returning=returning)
    row_update(
        batch,
        "call",
        call,
        status=status,
        response=response.raw,
        http_status=response.http_status,
        finish_reason=response.finish_reason[:32],
        **usage_values(usage),
        **_media_values(usage),
        usage_estimated=usage.estimated,
        cost=cost,
        latency_ms=int((time.monotonic() - answered.started) * 1000),
        error=error,
        finished_at=timezone.now(),
    )
    if answered.learned:
        _calibration_add(batch, call.model_config_id, answered.learned)
    agent_usage_add(
        agent_id=run.agent_id,
        run_id=run.pk,
        day=timezone.now().astimezone(zoneinfo.ZoneInfo(answered.time_zone)).date(),
        tokens=usage.total_tokens,
        cost=cost,
        batch=batch,
    )
    return usage, cost


def _media_values(usage) -> dict[str, int]:
    """The call's image and audio tokens, written only where it sent some: a text call's
    statement stays as it was."""
    return {name: value for name in PROMPT_SHARES if (value := getattr(usage, name))}


def _calibration_add(batch, model_config_id: int, learned: dict) -> None:
    # A write of the call's own statement: no round trip, and only if the call is recorded.
    batch.add("calibration", Update(ModelConfig).add(**learned).where(id=model_config_id))


def _calibrated(live: _Live, provider, body: dict, call: LLMCall, response: LLMResponse, media: MediaTokens | None):
    """The answer with an estimated usage scaled by the config's calibration, and what an answer
    with reported usage teaches it (None when it is not sampled)."""
    calibration = live.calibration
    if response.usage.estimated:
        return replace(response, usage=calibration.apply(response.usage)), None
    if not calibration.learns_from(call.pk):
        return response, None
    estimated = provider.estimate_usage(body=body, response=response)
    if media is not None:
        estimated = replace(estimated, prompt_tokens=estimated.prompt_tokens + media.total)
    return response, calibration_sample(reported=response.usage, estimated=estimated)


def _record_rejected(answered: Answer, *, reason: str) -> None:
    """An answer that came back but cannot be used: a failed attempt that still cost tokens."""
    answered = replace(answered, response=scrub_nul(answered.response))
    run, call, response = answered.run, answered.call, answered.response
    batch = Batch()
    _account(batch, answered, status=LLMCall.Status.FAILED, error=reason)
    payload = events.llm_call_failed(
        llm_call_id=call.pk,
        purpose=call.purpose,
        attempt=call.attempt,
        error=reason,
        http_status=response.http_status,
        retryable=True,
        usage=response.usage.__dict__,
    )
    event_add(batch, run_id=run.pk, type=EventType.LLM_CALL_FAILED, payload=payload)
    batch_commit(batch, run.pk, asynchronous=False)
    chat_span(call=call, started=answered.started, response=response, error=reason, ended=answered.arrived)


def answer_writes(answer: Answer, *, guard: Guard | None = None) -> Batch:
    """The batch that records `answer`: the call completed, its tokens and cost on the run (in
    the batch's guard: `guard`, else the lease's fence) and on the agent's day, and its event,
    the first of the batch's (whatever the answer starts comes after it). The caller adds what
    it makes of the answer, then commits it (answer_record). The guard returns the run as the
    commit leaves it (conversations.selectors.STEP_RUN_COLUMNS): the next step starts from it."""
    call, response = answer.call, answer.response
    batch = Batch()
    usage, cost = _account(batch, answer, status=LLMCall.Status.SUCCEEDED, returning=STEP_RUN_COLUMNS, guard=guard)
    payload = events.llm_call_completed(
        llm_call_id=call.pk,
        purpose=call.purpose,
        iteration=call.iteration,
        attempt=call.attempt,
        finish_reason=response.finish_reason,
        tool_calls=[c.name for c in response.tool_calls],
        usage=usage.__dict__,
        cost=format(cost, "f"),
        prices=answer.prices,
    )
    event_add(batch, run_id=answer.run.pk, type=EventType.LLM_CALL_COMPLETED, payload=payload)
    return batch


def answer_record(answer: Answer, batch: Batch | None = None, *, tentative: bool = False) -> dict | None:
    """Commit `batch` (answer_writes' batch with the caller's writes; just the answer if None):
    what its writes returned. A `tentative` batch, tried under a guard of its own, may match
    nothing (a cancel was accepted meanwhile, say): then None, and nothing was written; otherwise
    that is a lost lease (LeaseLost).

    Asynchronously (conversations.batch): whatever the answer leads to outside the database (a
    tool, the next request, the run's end) commits synchronously first, unless it is made by this
    commit, which is then synchronous itself (Batch.durable)."""
    results = (batch or answer_writes(answer)).execute(asynchronous_commit=True)
    if results is None:
        if tentative:
            return None
        raise LeaseLost(str(answer.run.pk))
    chat_span(call=answer.call, started=answer.started, response=answer.response, ended=answer.arrived)
    return results


# An attempt's error when its worker stopped before it completed: the next attempt, or the
# sweeper (engine.sweeper), closes it with this prefix.
INTERRUPTED = "interrupted: the worker stopped before the call completed"


def _start_attempt(
    *,
    run,
    owner,
    model,
    body,
    purpose,
    iteration,
    read_settings: bool,
    writes: Callable[[Batch], None] | None,
    routing: dict | None = None,
    run_sets: dict | None = None,
) -> tuple[LLMCall, list | None]:
    """The attempt's row (started) and its event, committed before the request is sent. It is
    numbered after the rows this call already has; those a dead worker left started are closed
    as interrupted, in the same batch. With `read_settings`, the model config's live settings
    are read in it too (their columns are returned, for _live_settings)."""
    same_call = {"run_id": run.pk, "purpose": purpose, "iteration": iteration}
    call = LLMCall(
        run_id=run.pk,
        iteration=iteration,
        purpose=purpose,
        model_config_id=model["id"],
        provider=model["provider"],
        model_name=model["model"],
        request=body,
        routing=routing,
    )
    batch = Batch()
    run_guard(batch, run_id=run.pk, lease_owner=owner, sets=run_sets)
    interrupted = Update(LLMCall).set(status=LLMCall.Status.FAILED, error=INTERRUPTED, finished_at=timezone.now())
    batch.add("interrupted", interrupted.where(**same_call, status=LLMCall.Status.STARTED))
    attempt = count(LLMCall, plus=1, **same_call)
    row_insert(batch, "call", call, exprs={"attempt": attempt}, returning=("id", "attempt"))
    if writes is not None:
        writes(batch)
    payload = events.llm_call_started(
        llm_call_id=None, purpose=purpose, iteration=iteration, attempt=None, model=model["name"]
    )
    fill = {"llm_call_id": "call.id", "attempt": "call.attempt"}
    event_add(batch, run_id=run.pk, type=EventType.LLM_CALL_STARTED, payload=payload, fill=fill)
    if read_settings:
        batch.read("settings", _SETTINGS_SQL, [model["id"]], _SETTINGS_COLUMNS)
    results = batch_commit(batch, run.pk, asynchronous=False)
    call.attempt = results["call"]["attempt"]
    return call, list(results["settings"].values()) if read_settings else None


def _attachments_sent(messages: list[dict]) -> set[str]:
    """The ids of the attachments whose parts `messages` carry (attachments.parts)."""
    return {
        block["attachment"]
        for message in messages
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if is_part(block)
    }


def _with_bytes(body: dict, attachment_ids: set[str]) -> dict:
    """The body to send: its attachments' references replaced by their bytes (attachments.inline).
    An attachment gone since the message was posted fails the call for good."""
    try:
        return inlined(body, attachment_ids=attachment_ids)
    except AttachmentUnavailable as exc:
        raise ProviderError(str(exc), retryable=False) from exc


def _with_media(response: LLMResponse, media: MediaTokens) -> LLMResponse:
    """The answer's usage with the tokens of the parts sent: images by the provider's rule,
    audio as the server reports it, else by the rule; an estimated prompt gains them all (the
    estimate of a body counts none of its attachments)."""
    usage = response.usage
    prompt = usage.prompt_tokens + media.total if usage.estimated else usage.prompt_tokens
    total = usage.total_tokens + media.total if usage.estimated else usage.total_tokens
    audio = min(usage.audio_tokens or media.audio, prompt)
    image = min(media.image, prompt - audio)
    usage = replace(usage, prompt_tokens=prompt, total_tokens=total, image_tokens=image, audio_tokens=audio)
    return replace(response, usage=usage)


def _wait_before_retry(run: Run, try_number: int, retry_after: float | None) -> None:
    wait = backoff_seconds(try_number, retry_after)
    left = seconds_left(run.deadline)
    # On a worker's engine loop other runs go on meanwhile (platform_site.green).
    green.sleep(wait if left is None else min(wait, left))


def model_call(
    *,
    run: Run,
    owner: str,
    snapshot: AgentSnapshot,
    purpose: str,
    iteration: int,
    request: ModelRequest,
) -> Answer:
    """Ask `request` of the agent's model (then its fallback) until one attempt gives an answer
    the request accepts; returns it, not recorded yet (answer_writes, answer_record)."""
    last_error: ProviderError | None = None
    rejected: ModelStepFailed | None = None
    made = 0
    # Each model config's last error: a run that tried the fallback too says what failed where.
    errors: dict[str, ProviderError] = {}
    time_zone = snapshot["agent"]["time_zone"]
    # A request with parts: their bytes go in at sending, their tokens by each provider's rule.
    attachment_ids = _attachments_sent(request.messages) if has_parts(request.messages) else set()
    key = cache_key(agent_id=snapshot["agent"]["id"], version_id=run.agent_version_id, purpose=purpose)
    run_sets = {"routing": request.routing} if request.routing_store else None
    for tried, model in enumerate(request.models or snapshot_models(snapshot)):
        routing = {**request.routing, "fallback": True} if tried and request.routing else request.routing
        media = media_tokens(request.messages, model["provider"]) if attachment_ids else None
        # A streamed request's body depends on what was learned about the server, so the live
        # settings are read first; otherwise they come with the first attempt's row.
        live = _live_settings(model) if model.get("stream") else None
        try:
            provider = get_provider(model["provider"])
            body = request.custom.body(model) if request.custom else request_body(provider, model, request, key=key)
            if live and live.stream_tools_unsupported and body.get("stream") and body.get("tools"):
                body = request_body(provider, {**model, "stream": False}, request, key=key)
        except ProviderError as exc:
            last_error, rejected = exc, None
            errors[model["name"]] = exc
            continue
        try_number = 1
        while try_number <= model["max_retries"] + 1:
            cap = seconds_left(run.deadline)
            call, values = _start_attempt(
                run=run,
                owner=owner,
                model=model,
                body=body,
                purpose=purpose,
                iteration=iteration,
                read_settings=live is None,
                writes=request.attempt_writes,
                routing=routing,
                run_sets=run_sets,
            )
            live = live or _live_settings(model, values)
            api_key, prices = live.api_key, live.prices
            made += 1
            # Log lines from here on (this attempt, and the tool calls it asks for) name this call.
            bind(llm_call_id=call.pk)
            started = time.monotonic()
            relay = DeltaRelay(run_id=run.pk, llm_call_id=call.pk) if request.relay_deltas else None
            try:
                sent = _with_bytes(body, attachment_ids) if attachment_ids else body
                release_connection()
                if request.custom:
                    response = request.custom.send(model=model, api_key=api_key, body=sent, timeout_cap=cap)
                else:
                    response = provider.send(
                        model=model, api_key=api_key, body=sent, on_delta=relay.push if relay else None, timeout_cap=cap
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
                errors[model["name"]] = exc
                if exc.context_overflow:
                    raise ContextOverflow(exc.message) from exc
                if exc.stream_unsupported and body.get("stream"):
                    # The same attempt again in the mode that works: no retry is used up.
                    if body.get("tools"):
                        _learn_stream_tools_unsupported(model)
                    body = request_body(provider, {**model, "stream": False}, request, key=key)
                    continue
                if not exc.retryable:
                    break
                if try_number <= model["max_retries"]:
                    _wait_before_retry(run, try_number, exc.retry_after)
                try_number += 1
                continue
            if relay:
                relay.flush()
            if media is not None:
                response = _with_media(response, media)
            if request.custom:
                learned, cost = None, request.custom.cost(model, response)
            else:
                (response, learned), cost = _calibrated(live, provider, body, call, response, media), None
            log.info(
                "model call %s.%s (%s) to %s: %s, %s tokens",
                iteration,
                call.attempt,
                purpose,
                model["name"],
                response.finish_reason,
                response.usage.total_tokens,
            )
            problem = _turned_down(request, response)
            if problem is None:
                # Stored text may hold no NUL (PostgreSQL refuses it), whoever records it.
                return Answer(
                    run, owner, call, scrub_nul(response), prices, started, time_zone, learned=learned, cost=cost
                )
            _record_rejected(
                Answer(run, owner, call, response, prices, started, time_zone, learned=learned), reason=str(problem)
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
    what = "; ".join(f"{name}: {error}" for name, error in errors.items()) if len(errors) > 1 else str(last_error)
    if not made:
        raise ModelStepFailed(f"The model call could not be made: {what}")
    raise ModelStepFailed(f"The model call failed after {made} attempt{'s' if made != 1 else ''}: {what}")
