"""The prompt playground's writes and reads: a test message answered by the edited draft and by
the live version side by side, through the real queue; "save as draft"; an eval run on the draft.

Both runs are sandboxed as forks are (Run.sandbox, engine.invocations._sandbox_decision): read
tools may run live, a write tool never runs (the same call as one the chosen past run made gets
that call's recorded result; any other write fails unrun). A sandbox keeps them out of the
production figures, as forks and evaluations are, and their trigger is RunTrigger.PLAYGROUND."""

from dataclasses import dataclass

from django.db import transaction
from django.utils.translation import gettext as _

from agents.models import Agent, AgentVersion
from agents.playground import PlaygroundEdits, playground_snapshot, playground_version
from agents.releases import version_by_id
from agents.run_choices import run_choice_check
from agents.services import agent_version_current
from agents.snapshot import snapshot_hash
from conversations.models import TERMINAL_STATUSES, Message, Run, RunTrigger
from conversations.services import conversation_create, messages_append
from engine.admission import message_submit
from engine.forks import recorded_calls
from evals.models import EvalRun, EvalSuite
from evals.services import eval_run_start

# The past runs the page offers to replay: the latest few, not the agent's whole history.
PAST_RUNS = 20
DRAFT, LIVE = "draft", "live"


class PastRunInvalid(ValueError):
    """The chosen past run cannot be played again (it has no user message)."""


@dataclass(frozen=True)
class Turns:
    """What both sides are sent: the conversation before, and the user message."""

    history: list[dict]
    content: str
    recorded: list[dict]


@dataclass(frozen=True)
class PlaygroundPair:
    draft: Run
    live: Run
    content: str  # the user message both answer


def past_runs(*, agent: Agent):
    """The agent's latest ended production runs (no fork's, evaluation's or playground's), to
    try again with the draft: a bounded list, newest first."""
    return (
        Run.objects.filter(agent=agent, sandbox__isnull=True, parent_run__isnull=True, status__in=TERMINAL_STATUSES)
        .only("id", "created_at", "status", "conversation_id")
        .order_by("-created_at")[:PAST_RUNS]
    )


def turns_of(*, run: Run) -> Turns:
    """The run's user message and the conversation's earlier turns, with the calls its tree made
    (a write made again gets its recorded result, as in a fork)."""
    user_message = Message.objects.filter(run=run, role=Message.Role.USER).order_by("order").first()
    if user_message is None:
        raise PastRunInvalid(_("This run has no user message to send again."))
    earlier = Message.objects.filter(conversation_id=run.conversation_id, order__lt=user_message.order).order_by(
        "order"
    )
    history = [
        {
            "role": m.role,
            "content": m.content,
            "tool_calls": m.tool_calls,
            "tool_call_id": m.tool_call_id,
            "name": m.name,
            "reasoning": m.reasoning,
            "screened_content": m.screened_content,
        }
        for m in earlier
    ]
    return Turns(history=history, content=user_message.content, recorded=recorded_calls(run=run))


def live_version(*, agent: Agent) -> AgentVersion:
    """What live traffic runs (agents.releases): the published version, else the saved draft."""
    if agent.published_version_id is not None:
        return version_by_id(version_id=agent.published_version_id)
    return agent_version_current(agent=agent)


def _sandbox(recorded: list[dict]) -> dict:
    # A fork's sandbox (engine.forks._sandbox) with no source of its own: reads run live, the
    # past run's recorded calls are given back, any other write is refused unrun; delegate
    # calls start children sandboxed the same way.
    return {"playground": True, "recorded": recorded, "results": {}, "live_reads": True, "delegate": True}


def _side_start(*, agent: Agent, user, version: AgentVersion, turns: Turns, side: str, source: Run | None) -> Run:
    metadata = {"source": "playground", "playground_side": side}
    if source is not None:
        metadata["from_run"] = str(source.pk)
    conversation = conversation_create(
        agent=agent,
        owner=user,
        title=f"Playground ({side}): {turns.content[:80]}",
        metadata=metadata,
    )
    if turns.history:
        messages_append(conversation_id=conversation.pk, run_id=None, messages=turns.history)
    return message_submit(
        conversation=conversation,
        content=turns.content,
        user=user,
        version=version,
        sandbox=_sandbox(turns.recorded),
        trigger=RunTrigger.PLAYGROUND,
    ).run


def playground_send(
    *, agent: Agent, user, edits: PlaygroundEdits, content: str = "", source: Run | None = None
) -> PlaygroundPair:
    """Two runs queued once this commits, each in a new conversation of `user`: the edited
    draft's (a playground version) and the live version's, answering `content`, or `source`'s
    user message after its conversation's earlier turns. ValidationError on a bad edit,
    PastRunInvalid, engine.admission_limits.AdmissionRefused at the workspace's limits;
    agents.run_choices.RunChoiceRefused when the user may not run what the draft chose."""
    draft_version = playground_version(agent=agent, snapshot=playground_snapshot(agent=agent, edits=edits))
    # The one rule for what a caller may choose to run (as a posted version or a fork's model):
    # a draft of a published agent is a version never published, and another model config bills
    # another key.
    run_choice_check(user=user, agent_id=agent.pk, version=draft_version, model_config=edits.model_config)
    turns = turns_of(run=source) if source is not None else Turns(history=[], content=content, recorded=[])
    live = live_version(agent=agent)
    with transaction.atomic():
        draft_run = _side_start(agent=agent, user=user, version=draft_version, turns=turns, side=DRAFT, source=source)
        live_run = _side_start(agent=agent, user=user, version=live, turns=turns, side=LIVE, source=source)
    return PlaygroundPair(draft=draft_run, live=live_run, content=turns.content)


def playground_eval(*, agent: Agent, user, edits: PlaygroundEdits, suite: EvalSuite) -> EvalRun:
    """An eval run of `suite` on the edited draft (evals.services, as the admin and the command
    start one); evals.services.EvalNotAllowed as there. A draft with no unsaved edits is
    evaluated as the agent's own draft version, so that the run counts for its release gate
    (evals.gate reads the eval runs of the version to publish); otherwise as a playground version."""
    snapshot = playground_snapshot(agent=agent, edits=edits)
    saved = agent_version_current(agent=agent)
    if saved.config_hash != snapshot_hash(snapshot):
        saved = playground_version(agent=agent, snapshot=snapshot)
    return eval_run_start(suite=suite, agent_version=saved, repetitions=1, user=user)
