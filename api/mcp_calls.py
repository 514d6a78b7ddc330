"""The database side of the MCP server (api.mcp_server): which agents a token lists as tools,
a tool call admitted as a run, and where that run stands. Synchronous: the server calls each
in one hop to a thread (platform_site.asyncdb).

A call is an ordinary message: the same rule of who may use which agent (agents_usable_by,
with `mcp_exposed` on top), the same admission (engine.admission, trigger "mcp") with its
limits per end user and per workspace, and afterwards the same queue, worker, guardrails,
memory and approvals as for any other way in.
"""

import uuid
from dataclasses import dataclass, field

from django.conf import settings
from django.utils.translation import gettext as _

from agents.models import Agent
from agents.selectors import agent_usable_by, agents_usable_by
from api.async_auth import AsyncApiError, throttle_check
from api.throttles import RunStartThrottle
from conversations.end_users import EndUserInvalid, end_user_clean
from conversations.models import Approval, RunStatus, RunTrigger, StopReason
from conversations.selectors import conversation_for_post, run_with_final_answer
from engine.admission import AgentOutsideWorkspace, ConversationBusy, conversation_start, message_submit
from platform_site.refusals import InputRefused, LimitReached
from workspaces.access import may_start_runs

INPUT_SCHEMA = {
    "type": "object",
    "properties": {
        "message": {"type": "string", "minLength": 1, "description": "What to ask the agent."},
        "conversation_id": {
            "type": "string",
            "format": "uuid",
            "description": "Continue this conversation (the conversation_id of an earlier call's result).",
        },
        "end_user": {
            "type": "string",
            "description": "Your id for the person you act for: the agent's memory and limits per end user go by it.",
        },
    },
    "required": ["message"],
    "additionalProperties": False,
}
OUTPUT_SCHEMA = {
    "type": "object",
    "properties": {
        "status": {"type": "string", "description": "The run's status: completed, awaiting_approval, running..."},
        "run_id": {"type": "string"},
        "conversation_id": {"type": "string"},
        "answer": {"type": ["string", "null"]},
    },
    "required": ["status", "run_id", "conversation_id"],
}
ARGUMENTS = frozenset(INPUT_SCHEMA["properties"])


class UnknownTool(Exception):
    """No agent of that name is listed for the caller: a JSON-RPC error, as the spec has it."""


class CallRefused(Exception):
    """The call is refused as sent or by a limit: a tool result marked as an error, whose text
    the client's model can read and act on."""


@dataclass
class ToolListing:
    name: str
    title: str
    description: str


@dataclass
class CallState:
    """Where a call's run stands: its answer once completed, the tools it waits on while parked."""

    run_id: uuid.UUID
    conversation_id: uuid.UUID
    status: str
    terminal: bool
    answer: str | None = None
    # The answer parsed, when the agent holds its answers to a schema (docs/quality.md).
    output_parsed: object = None
    detail: str = ""
    waiting_on: list[str] = field(default_factory=list)


def mcp_agents(*, user) -> list[ToolListing]:
    """The agents the token's user may use that are reachable over MCP, by slug."""
    agents = agents_usable_by(user=user).filter(mcp_exposed=True).order_by("slug")
    return [
        ToolListing(name=slug, title=name, description=description or name)
        for slug, name, description in agents.values_list("slug", "name", "description")
    ]


def _mcp_agent(*, user, name: str) -> Agent:
    agent = agent_usable_by(user=user, slug=name) if isinstance(name, str) and len(name) <= 100 else None
    if agent is None or not agent.mcp_exposed:
        raise UnknownTool(_("There is no tool %(name)r on this server.") % {"name": str(name)[:100]})
    return agent


def _text(value, name: str, *, limit: int) -> str:
    if not isinstance(value, str):
        raise CallRefused(_("%(name)s must be a string.") % {"name": name})
    if len(value) > limit:
        raise CallRefused(_("%(name)s must be at most %(count)s characters.") % {"name": name, "count": limit})
    if "\x00" in value or any("\ud800" <= char <= "\udfff" for char in value):
        raise CallRefused(_("%(name)s must not hold NUL characters or lone surrogates.") % {"name": name})
    return value


def _arguments(arguments) -> tuple[str, str | None, str]:
    if not isinstance(arguments, dict):
        raise CallRefused(_("The arguments must be an object with a message."))
    stray = sorted(set(arguments) - ARGUMENTS)
    if stray:
        raise CallRefused(_("Unknown argument %(name)r.") % {"name": str(stray[0])[:100]})
    message = _text(arguments.get("message"), "message", limit=settings.AGENTRY_MESSAGE_MAX_CHARS)
    if not message.strip():
        raise CallRefused(_("message must not be empty."))
    conversation_id = arguments.get("conversation_id")
    if conversation_id is not None:
        conversation_id = _text(conversation_id, "conversation_id", limit=100)
    try:
        end_user = end_user_clean(_text(arguments.get("end_user", ""), "end_user", limit=1000))
    except EndUserInvalid as exc:
        raise CallRefused(_("end_user: %(error)s") % {"error": exc}) from None
    return message, conversation_id, end_user


def _continued(*, user, agent: Agent, conversation_id: str, content: str, end_user: str):
    conversation = conversation_for_post(user=user, conversation_id=conversation_id)
    if conversation is None or conversation.agent_id != agent.pk or conversation.owner_id != user.pk:
        raise CallRefused(
            _("There is no conversation %(id)s of this agent that you may continue.") % {"id": conversation_id}
        )
    if end_user and end_user != conversation.end_user:
        raise CallRefused(_("end_user differs from the conversation's; leave it out to continue."))
    try:
        return message_submit(conversation=conversation, content=content, user=user, trigger=RunTrigger.MCP).run
    except ConversationBusy as exc:
        raise CallRefused(
            _(
                "Conversation %(conversation)s already has an active run (%(run)s, %(status)s) and its agent does "
                "not take a new message until it ends."
            )
            % {"conversation": conversation.pk, "run": exc.run.pk, "status": exc.run.status}
        ) from None


def mcp_call_start(*, request, user, name: str, arguments) -> CallState:
    """The run that answers a tool call, queued; UnknownTool or CallRefused when nothing starts."""
    agent = _mcp_agent(user=user, name=name)
    if not may_start_runs(user):
        raise CallRefused(_("Your token may not start runs in this workspace."))
    message, conversation_id, end_user = _arguments(arguments)
    try:
        throttle_check(request, user, [RunStartThrottle])
    except AsyncApiError as exc:
        raise CallRefused(exc.message) from None
    try:
        if conversation_id is not None:
            run = _continued(
                user=user, agent=agent, conversation_id=conversation_id, content=message, end_user=end_user
            )
        else:
            run = conversation_start(agent=agent, user=user, content=message, end_user=end_user, trigger=RunTrigger.MCP)
    except (LimitReached, InputRefused) as exc:
        raise CallRefused(exc.message) from None
    except AgentOutsideWorkspace:
        raise UnknownTool(_("There is no tool %(name)r on this server.") % {"name": name}) from None
    return CallState(run.pk, run.conversation_id, run.status, terminal=False)


def mcp_call_state(*, run_id) -> CallState:
    run, final = run_with_final_answer(run_id=run_id)
    state = CallState(run.pk, run.conversation_id, run.status, terminal=run.is_terminal)
    if run.status == RunStatus.COMPLETED:
        state.answer = final.content if final is not None else ""
        state.output_parsed = run.output_parsed
    elif run.is_terminal:
        internal = run.stop_reason == StopReason.INTERNAL_ERROR
        state.detail = _("an internal error") if internal else (run.error or run.stop_reason)
    elif run.status == RunStatus.AWAITING_APPROVAL:
        tools = Approval.objects.filter(run_id=run.pk, status=Approval.Status.PENDING)
        state.waiting_on = sorted(set(tools.values_list("invocation__tool_name", flat=True)))
    return state
