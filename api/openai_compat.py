"""POST /v1/chat/completions: OpenAI's chat completions API, where `model` is an agent slug.

Authenticated with the same API tokens (`Authorization: Bearer …`). The run goes through the
real queue and workers; this view only waits for it, on the event loop. Errors use OpenAI's
shape (`{"error": {...}}`) because that is what OpenAI clients read.
"""

import asyncio
import contextlib
import json

from django.conf import settings
from django.http import JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions

from agents.selectors import agents_usable_by
from api.async_auth import AsyncApiError, authenticate, throttle, throttle_check, token_user
from api.common import runs_start_check
from api.completions import (
    CompletionRequest,
    CompletionRequestError,
    completion_agent,
    completion_outcome,
    completion_request_parse,
    completion_start,
    completion_usage,
)
from api.throttles import ApiUserThrottle, RunStartThrottle
from conversations.events import TERMINAL_EVENT_TYPES, EventType
from conversations.live import run_event_batches
from conversations.models import Run
from conversations.wakeups import get_waker
from platform_site.asyncdb import db
from platform_site.http_methods import require_GET, require_POST
from platform_site.json_input import JSONInputError, json_loads_checked

ANSWER_EVENTS = TERMINAL_EVENT_TYPES | {EventType.RUN_AWAITING_APPROVAL}
UTF8 = {"ensure_ascii": False}


def _error(status: int, message: str, *, code: str, param: str | None = None, headers=None) -> JsonResponse:
    error_type = "invalid_request_error" if status < 500 else "server_error"
    return JsonResponse(
        {"error": {"message": message, "type": error_type, "param": param, "code": code}},
        status=status,
        headers=headers,
        json_dumps_params=UTF8,
    )


def body_max_bytes() -> int:
    """A request may carry its images, audio and files inline (data: URLs, base64): its JSON may
    be as large as an attachment's upload (platform_site.body_limit lets that much in)."""
    return max(settings.AGENTRY_MAX_ATTACHMENT_BODY_BYTES, settings.DATA_UPLOAD_MAX_MEMORY_SIZE)


def _body(request):
    limit = body_max_bytes()
    too_large = CompletionRequestError(
        f"The request body is larger than {limit} bytes.", status=413, code="request_too_large"
    )
    if int(request.META.get("CONTENT_LENGTH") or 0) > limit:
        raise too_large
    # Read here rather than through request.body, whose limit (DATA_UPLOAD_MAX_MEMORY_SIZE) is
    # for form fields and JSON without files.
    body = request.read(limit + 1)
    if len(body) > limit:
        raise too_large
    try:
        return json_loads_checked(body)
    except JSONInputError as exc:
        raise CompletionRequestError(str(exc)) from None


async def _follow(run_id):
    """The run's event batches until it ends or parks, or the configured wait runs out."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settings.AGENTRY_COMPLETION_TIMEOUT_SECONDS
    async with run_event_batches(run_id, until=ANSWER_EVENTS) as batches:
        async for batch in batches:
            yield batch
            if loop.time() > deadline:
                return


def _completion(run, model: str) -> dict:
    return {
        "id": f"chatcmpl-{run.pk.hex}",
        "created": int(run.created_at.timestamp()),
        "model": model,
        "system_fingerprint": None,
    }


async def _settled(run_id):
    """The run's outcome once it has ended or parked, or where it stands when the configured wait
    runs out. It is woken only by the events that may settle the run (and by its timed poll), and
    each wake-up reads the run, and its answer with it once settled, in one hop to a thread: a
    plain answer needs no events (the streamed one follows them, see _chunks)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settings.AGENTRY_COMPLETION_TIMEOUT_SECONDS
    async with get_waker().watch(run_id, settles_only=True) as wake:
        while True:
            wake.clear()
            waiting = loop.time() < deadline
            outcome = await db(completion_outcome, run_id=run_id, settled_only=waiting)
            if outcome is not None:
                return outcome
            # Past the deadline the next read answers with where the run stands.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout_at(deadline):
                    await wake.wait()


async def _plain(run, model: str) -> JsonResponse:
    outcome = await _settled(run.pk)
    headers = {"X-Agentry-Run-Id": str(run.pk)}
    if outcome.error:
        status = 504 if not outcome.run.is_terminal else 502
        return _error(status, outcome.error, code=outcome.run.stop_reason or "timeout", headers=headers)
    body = {
        **_completion(run, model),
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": outcome.text, "refusal": None},
                "finish_reason": outcome.finish_reason,
                "logprobs": None,
            }
        ],
        "usage": completion_usage(outcome.run),
        "agentry": {
            "run_id": str(run.pk),
            "conversation_id": str(run.conversation_id),
            "status": outcome.run.status,
            "stop_reason": outcome.run.stop_reason,
        },
    }
    return JsonResponse(body, headers=headers, json_dumps_params=UTF8)


async def _chunks(run, model: str, include_usage: bool):
    base = {**_completion(run, model), "object": "chat.completion.chunk"}

    def chunk(delta: dict, finish_reason=None, **extra) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
        return "data: " + json.dumps({**base, "choices": [choice], **extra}, ensure_ascii=False) + "\n\n"

    streamed_calls: list[int] = []

    def deltas(batch) -> str:
        parts = []
        for event in batch:
            if event["type"] != EventType.MESSAGE_DELTA:
                continue
            call_id = event["payload"]["llm_call_id"]
            if call_id not in streamed_calls:
                # Text of an earlier model step (before its tool calls) stays apart from the next.
                parts.append("\n\n" if streamed_calls else "")
                streamed_calls.append(call_id)
            parts.append(event["payload"]["text"])
        return "".join(parts)

    yield chunk({"role": "assistant", "content": ""})
    async for batch in _follow(run.pk):
        if not batch:
            yield ": keepalive\n\n"
        elif text := deltas(batch):
            yield chunk({"content": text})
    outcome = await db(completion_outcome, run_id=run.pk)
    if outcome.error:
        error = {
            "message": outcome.error,
            "type": "server_error",
            "param": None,
            "code": outcome.run.stop_reason or "timeout",
        }
        yield "data: " + json.dumps({"error": error}, ensure_ascii=False) + "\n\n"
        return
    if outcome.text and outcome.final_llm_call_id not in streamed_calls:
        yield chunk({"content": ("\n\n" if streamed_calls else "") + outcome.text})
    yield chunk({}, outcome.finish_reason, agentry={"run_id": str(run.pk), "status": outcome.run.status})
    if include_usage:
        yield "data: " + json.dumps({**base, "choices": [], "usage": completion_usage(outcome.run)}) + "\n\n"
    yield "data: [DONE]\n\n"


def _admit(request) -> tuple[CompletionRequest, Run]:
    """Everything before the run is queued (token, throttles, body, agent, the run itself) in one
    hop to a thread: each hop is a hand-over between the loop and a thread, and a single run
    waits for them one after another. A message the agent's limits per end user refuse raises
    AdmissionRefused, answered in OpenAI's shape by platform_site.refusals.LimitReachedMiddleware."""
    # Bearer tokens only: without cookies there is no cross-site request to forge.
    user = token_user(request)
    try:
        runs_start_check(user)
    except exceptions.PermissionDenied as exc:
        raise AsyncApiError(403, str(exc.detail), code="permission_denied") from None
    throttle_check(request, user, [ApiUserThrottle, RunStartThrottle])
    parsed = completion_request_parse(_body(request))
    agent = completion_agent(user=user, slug=parsed.model)
    return parsed, completion_start(user=user, agent=agent, request=parsed)


@csrf_exempt
@require_POST
async def chat_completions(request):
    try:
        parsed, run = await db(_admit, request)
    except AsyncApiError as exc:
        return _error(exc.status, exc.message, code=exc.code, headers=exc.headers)
    except CompletionRequestError as exc:
        return _error(exc.status, exc.message, code=exc.code, param=exc.param)
    if not parsed.stream:
        return await _plain(run, parsed.model)
    response = StreamingHttpResponse(_chunks(run, parsed.model, parsed.include_usage), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    response["X-Agentry-Run-Id"] = str(run.pk)
    return response


def _models(user) -> list[dict]:
    return [
        {"id": slug, "object": "model", "created": int(created.timestamp()), "owned_by": "agentry"}
        for slug, created in agents_usable_by(user=user).order_by("slug").values_list("slug", "created_at")
    ]


@require_GET
async def models(request):
    try:
        user = await authenticate(request, allow_session=False)
        await throttle(request, user, [ApiUserThrottle])
    except AsyncApiError as exc:
        return _error(exc.status, exc.message, code=exc.code, headers=exc.headers)
    return JsonResponse({"object": "list", "data": await db(_models, user)})
