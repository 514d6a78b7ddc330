"""Remote agents as tools: another agent reached over the A2A protocol with the official `a2a-sdk`.

An operator points a tool of kind "a2a" at an agent card URL and picks one of the card's
skills. The card is fetched through the outbound guard when the tool is saved (or refreshed)
and cached on the tool's row: calls use that cached card, so a remote cannot move its endpoint
under a tool without an operator seeing the new card. Every connection (the card, the calls,
a cancel) goes through the guard, like HTTP tools.

A call sends one A2A message (the model's text, and the ids of a remote conversation or of a
remote task that asked for input, to continue them) and follows the task: streamed when the
card says the agent streams (message/stream), else one send. What it learns as it goes (the
remote task's id and state) is reported to the engine, which records it on the invocation and
as `tool.progress` events. A task that ends waiting for input or authorisation comes back as a
result saying so, with its ids, instead of waiting. When the run is cancelled, or the tool's
timeout is near, the remote task is cancelled (tasks/cancel) before the call returns.
"""

import asyncio
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
from a2a.client import ClientConfig, ClientFactory
from a2a.client.card_resolver import parse_agent_card
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    TaskState,
)
from a2a.utils.errors import A2AError
from django.utils import timezone
from django.utils.translation import gettext as _
from google.protobuf.json_format import MessageToDict, ParseDict, ParseError

from platform_site import outbound
from tools.models import secret_mapping
from tools.registry import ToolError

# The arguments of every remote agent tool.
PARAMETERS = {
    "type": "object",
    "properties": {
        "message": {"type": "string", "minLength": 1, "description": "What to ask or tell the remote agent."},
        "context_id": {
            "type": "string",
            "description": "The context_id of an earlier answer of this agent, to continue that conversation.",
        },
        "task_id": {
            "type": "string",
            "description": "The task_id of a remote task that asked for input, to answer it with the message.",
        },
    },
    "required": ["message"],
    "additionalProperties": False,
}
CARD_MAX_BYTES = 512_000
CARD_TIMEOUT_SECONDS = 15
# How often a call looks whether its run was cancelled (one small read each time).
CANCEL_POLL_SECONDS = 1.0
# A call stops this much before the tool's timeout, so the remote task is cancelled in time.
CANCEL_MARGIN_SECONDS = 2.0
CANCEL_TIMEOUT_SECONDS = 5.0
# A remote that streams without end cannot fill the worker's memory: pieces past this are dropped
# (the result is cut to the tool's own limit anyway).
MAX_ANSWER_CHARS = 1_000_000
# The remote task's metadata is kept on the invocation up to this size (as JSON).
MAX_METADATA_CHARS = 4000
# Streamed artifact pieces are reported at most this often.
REPORT_EVERY_SECONDS = 0.5

_STATES = {
    TaskState.TASK_STATE_SUBMITTED: "submitted",
    TaskState.TASK_STATE_WORKING: "working",
    TaskState.TASK_STATE_COMPLETED: "completed",
    TaskState.TASK_STATE_FAILED: "failed",
    TaskState.TASK_STATE_CANCELED: "canceled",
    TaskState.TASK_STATE_INPUT_REQUIRED: "input-required",
    TaskState.TASK_STATE_REJECTED: "rejected",
    TaskState.TASK_STATE_AUTH_REQUIRED: "auth-required",
}
INTERRUPTED = {"input-required", "auth-required"}
ACTIVE = {"submitted", "working"}
# How often the task of an agent that does not stream is read again while it works.
POLL_SECONDS = 1.0


class CardError(Exception):
    """The agent card could not be fetched or read; the message is for the operator."""


@dataclass(frozen=True)
class Skill:
    id: str
    name: str
    description: str


def card_skills(card: dict) -> list[Skill]:
    return [
        Skill(str(s.get("id", "")), str(s.get("name", "")), str(s.get("description", "")))
        for s in (card or {}).get("skills") or []
    ]


def card_fetch(*, url: str, headers: dict[str, str]) -> dict:
    """The agent card at `url` (through the outbound guard), parsed by the SDK and kept as its
    JSON form; CardError when it cannot be had."""
    try:
        fetched = outbound.guarded_request(
            "GET",
            url,
            headers={"Accept": "application/json", **headers},
            timeout_seconds=CARD_TIMEOUT_SECONDS,
            max_bytes=CARD_MAX_BYTES,
            secret_headers=tuple(headers),
        )
    except outbound.OutboundBlocked as exc:
        raise CardError(exc.message) from exc
    except httpx.HTTPError as exc:
        raise CardError(_("The agent card could not be fetched (%(error)s).") % {"error": exc}) from exc
    if fetched.response.status_code != 200:
        raise CardError(_("The agent card URL answered HTTP %(status)s.") % {"status": fetched.response.status_code})
    if fetched.truncated:
        raise CardError(_("The agent card is larger than %(bytes)s bytes.") % {"bytes": CARD_MAX_BYTES})
    try:
        card = parse_agent_card(httpx.Response(200, content=fetched.body).json())
    except (ValueError, ParseError, RecursionError) as exc:
        raise CardError(_("This is not an agent card: %(error)s") % {"error": str(exc)[:300]}) from exc
    if not card.supported_interfaces:
        raise CardError(_("The agent card names no interface to call the agent at."))
    return MessageToDict(card)


def card_refresh(*, tool) -> None:
    """Fetch the tool's card again and cache it on the row (not saved here); its parameters are
    the remote agent's, and its description defaults to the skill's."""
    tool.a2a_card = card_fetch(url=tool.a2a_card_url, headers=secret_mapping(tool.a2a_secret_headers))
    tool.a2a_card_fetched_at = timezone.now()
    tool.parameters = PARAMETERS
    skill = next((s for s in card_skills(tool.a2a_card) if s.id == tool.a2a_skill), None)
    if skill is not None and not (tool.description or "").strip():
        tool.description = f"{tool.a2a_card.get('name', '')}: {skill.description or skill.name}".strip(": ")


@dataclass
class _Follow:
    """What the call has learnt of the remote task so far."""

    report: Callable[[dict], None] | None
    task_id: str = ""
    context_id: str = ""
    state: str = ""
    status_text: str = ""
    artifacts: dict[str, list[str]] = field(default_factory=dict)
    answer_message: str = ""
    reported_at: float = 0.0
    reported: dict = field(default_factory=dict)
    kept: int = 0  # characters of streamed artifacts kept so far
    metadata: dict = field(default_factory=dict)

    def details(self) -> dict:
        known = {"task_id": self.task_id, "context_id": self.context_id, "state": self.state}
        return {"a2a": known | ({"metadata": self.metadata} if self.metadata else {})}

    def take(self, event: StreamResponse) -> bool:
        """Learn from one event; whether it is worth a report."""
        kind = event.WhichOneof("payload")
        changed = False
        if kind == "message":
            self.answer_message = _text(event.message.parts)
            self.context_id = self.context_id or event.message.context_id
            self.state = self.state or "completed"
            changed = True
        elif kind == "task":
            task = event.task
            changed = self._status(task.id, task.context_id, task.status)
            # An artifact's parts are the pieces a stream would have appended one by one.
            for artifact in task.artifacts:
                self.artifacts[artifact.artifact_id] = [p.text for p in artifact.parts if p.HasField("text")]
        elif kind == "status_update":
            update = event.status_update
            changed = self._status(update.task_id, update.context_id, update.status)
        elif kind == "artifact_update":
            update = event.artifact_update
            pieces = self.artifacts.setdefault(update.artifact.artifact_id, [])
            if not update.append:
                pieces.clear()
            if self.kept < MAX_ANSWER_CHARS:
                texts = [p.text for p in update.artifact.parts if p.HasField("text")]
                pieces.extend(texts)
                self.kept += sum(map(len, texts))
            changed = time.monotonic() - self.reported_at >= REPORT_EVERY_SECONDS
        return changed

    async def send(self, *, unless_same: bool = False) -> None:
        """Report what is known (`unless_same`: only if it changed since the last report), on a
        thread: the engine's report writes to the database, which Django does not do on a loop."""
        if self.report is None or not self.task_id or (unless_same and self.reported == self.details()):
            return
        self.reported_at, self.reported = time.monotonic(), self.details()
        await asyncio.to_thread(self.report, self.details())

    def _status(self, task_id: str, context_id: str, status) -> bool:
        state = _STATES.get(status.state, "unknown")
        text = _text(status.message.parts) if status.HasField("message") else ""
        changed = (task_id, state) != (self.task_id, self.state) or bool(text)
        self.task_id, self.context_id, self.state = task_id or self.task_id, context_id or self.context_id, state
        if text:
            self.status_text = text
        return changed

    def answer(self) -> str:
        texts = ["".join(pieces) for pieces in self.artifacts.values()]
        return self.answer_message or "\n".join(t for t in texts if t) or self.status_text


def _text(parts) -> str:
    return "\n".join(part.text for part in parts if part.HasField("text"))


def _blocked(exc: BaseException) -> outbound.OutboundBlocked | None:
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, outbound.OutboundBlocked):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


@dataclass(frozen=True)
class RemoteCall:
    card: dict
    skill: str
    headers: dict[str, str]
    timeout_seconds: float


def _request(call: RemoteCall, arguments: dict) -> SendMessageRequest:
    message = Message(
        role=Role.ROLE_USER,
        message_id=uuid.uuid4().hex,
        parts=[Part(text=str(arguments["message"]))],
        context_id=str(arguments.get("context_id") or ""),
        task_id=str(arguments.get("task_id") or ""),
    )
    message.metadata.update({"skill": call.skill})
    return SendMessageRequest(message=message)


async def _task_metadata(client, follow: _Follow) -> None:
    """The ended task's metadata, read once (a stream's first task event was sent before the work):
    an Agentry agent puts its run's id and usage there, which the invocation keeps."""
    try:
        task = await client.get_task(GetTaskRequest(id=follow.task_id, history_length=0))
    except (A2AError, httpx.HTTPError):
        return  # a remote that keeps no tasks; the answer is had already
    if task.HasField("metadata"):
        metadata = MessageToDict(task.metadata)
        if len(json.dumps(metadata)) <= MAX_METADATA_CHARS:
            follow.metadata = metadata


async def _watch_cancel(cancelled: Callable[[], bool]) -> None:
    while not await asyncio.to_thread(cancelled):
        await asyncio.sleep(CANCEL_POLL_SECONDS)


async def _cancel_remote(client, follow: _Follow) -> str:
    """Ask the remote to cancel the task; a sentence on what happened, for the result."""
    if not follow.task_id:
        return _("The remote agent had not started a task yet.")
    try:
        async with asyncio.timeout(CANCEL_TIMEOUT_SECONDS):
            task = await client.cancel_task(CancelTaskRequest(id=follow.task_id))
        follow.state = _STATES.get(task.status.state, follow.state)
    except (A2AError, httpx.HTTPError, TimeoutError, outbound.OutboundBlocked) as exc:
        return _("Cancelling remote task %(task)s failed: %(error)s") % {"task": follow.task_id, "error": exc}
    return _("Remote task %(task)s was cancelled.") % {"task": follow.task_id}


async def _settle(client, follow: _Follow, consuming: asyncio.Task, *, cancelled_first: bool) -> None:
    """The call's end: the stream ended (or failed), or the run was cancelled, or time ran out;
    in the last two cases the remote task is cancelled too."""
    if not consuming.done():
        consuming.cancel()
        outcome = await _cancel_remote(client, follow)
        if cancelled_first:
            raise ToolError(_("The run was cancelled. %(outcome)s") % {"outcome": outcome})
        raise ToolError(_("The remote agent did not finish within its time limit. %(outcome)s") % {"outcome": outcome})
    try:
        consuming.result()
    except (A2AError, httpx.HTTPError, outbound.OutboundBlocked) as exc:
        blocked = _blocked(exc)
        if blocked is not None:
            raise ToolError(blocked.message, detail=blocked.detail) from exc
        raise ToolError(_("The remote agent refused or failed the call: %(error)s") % {"error": exc}) from exc


async def remote_call_async(
    call: RemoteCall,
    arguments: dict,
    *,
    report: Callable[[dict], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> dict:
    """Send the message and follow the task: the result the model reads (the engine learns the
    task's ids and state through `report`).
    Raises ToolError when the remote failed, refused, or the call was stopped."""
    card = ParseDict(call.card, AgentCard(), ignore_unknown_fields=True)
    follow = _Follow(report=report)
    budget = max(call.timeout_seconds - CANCEL_MARGIN_SECONDS, call.timeout_seconds / 2)
    async with outbound.a2a_http_client(headers=call.headers, timeout_seconds=call.timeout_seconds) as http:
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=True)).create(card)

        async def consume():
            async for event in client.send_message(_request(call, arguments)):
                if follow.take(event):
                    await follow.send()
            # An agent that answered with a task still at work (it does not stream): ask again.
            while follow.task_id and follow.state in ACTIVE:
                await asyncio.sleep(POLL_SECONDS)
                if follow.take(StreamResponse(task=await client.get_task(GetTaskRequest(id=follow.task_id)))):
                    await follow.send()
            if follow.task_id:
                await _task_metadata(client, follow)

        consuming = asyncio.create_task(consume())
        waits = {consuming}
        watching = None
        if cancelled is not None:
            watching = asyncio.create_task(_watch_cancel(cancelled))
            waits.add(watching)
        try:
            done, _pending = await asyncio.wait(waits, timeout=budget, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if watching is not None:
                watching.cancel()
        try:
            await _settle(client, follow, consuming, cancelled_first=watching is not None and watching in done)
        finally:
            await follow.send(unless_same=True)
    return _result(follow)


def _result(follow: _Follow) -> dict:
    ids = {"task_id": follow.task_id, "context_id": follow.context_id}
    if follow.state in INTERRUPTED:
        note = _(
            "The remote agent is waiting for %(what)s. To answer it, call this tool again with the answer as "
            "message and these task_id and context_id; or tell the user."
        ) % {"what": _("more input") if follow.state == "input-required" else _("authorisation")}
        return {"state": follow.state, **ids, "question": follow.answer(), "note": note}
    if follow.state in ("failed", "rejected", "canceled"):
        raise ToolError(
            _("The remote agent's task %(task)s ended %(state)s: %(text)s")
            % {"task": follow.task_id, "state": follow.state, "text": follow.answer() or _("no reason given")}
        )
    return {"state": follow.state or "completed", **ids, "answer": follow.answer()}


def remote_call(call: RemoteCall, arguments: dict, **callbacks) -> dict:
    """remote_call_async on a loop of this thread's own (executors run on the tool pool's threads)."""
    return asyncio.run(remote_call_async(call, arguments, **callbacks))
