"""Enforcing an agent's guardrails (agents.guardrails) on a run, from the run's snapshot.

Input: the run's user message is checked once, before its first model call (`input_check`).
A match of a blocking rule ends the run (completed, stop reason guardrail_blocked, like a limit:
the platform did its job and says why in the agent's language); a redacting rule's matches are
replaced by placeholders in what the model is sent, at every step and in later runs of the
conversation too (`wire_filtered`: the history is filtered again each time it is sent, without
a query), and in the stored message as well if the agent says so; a flagging rule lets the run
go on and lists it for review.

Output: the model's final answer (a message without tool calls) is checked before it is stored
(`output_review`, inside the batch that records it). Blocked, the stored answer is the fixed
message and the run ends with guardrail_blocked; redacted, the stored and delivered answer is
the redacted one. The model's own text stays in its LLMCall row's response, for auditors. An
agent whose output rules may change an answer does not stream it (llm_step relays no deltas):
text the user already saw cannot be taken back.

Every match is a GuardrailTrigger row; each check that matched is one `guardrail.triggered`
event. An agent without rules has no "guardrails" key in its snapshot: each function here
returns at the first lookup, with no query and no statement.
"""

from dataclasses import dataclass, field

from django.utils.translation import gettext_lazy as _

from agents import guardrails
from agents.guardrails import Hit
from agents.snapshot import AgentSnapshot, snapshot_guardrails
from conversations import events
from conversations.batch import Batch
from conversations.events import EventType
from conversations.fencing import LeaseLost
from conversations.models import GuardrailTrigger, Message, Run, StopReason
from conversations.services import event_add, row_insert, row_update, run_event_append, run_guard
from engine.next_step import Finish
from engine.speech import agent_says

INPUT_BLOCKED_MESSAGE = _(
    "I cannot respond to this message: it contains something this agent is not allowed to handle. "
    "Please rephrase it without that content."
)
OUTPUT_BLOCKED_MESSAGE = _(
    "I cannot give the answer I came up with: it contains something this agent is not allowed to say. "
    "Please rephrase the question."
)

OUTCOME_BLOCKED, OUTCOME_REDACTED, OUTCOME_FLAGGED = "blocked", "redacted", "flagged"


def _outcome(hits: list[Hit]) -> str:
    if guardrails.blocked(hits):
        return OUTCOME_BLOCKED
    if any(hit.action == guardrails.ACTION_REDACT for hit in hits):
        return OUTCOME_REDACTED
    return OUTCOME_FLAGGED


def _triggers_add(batch: Batch, *, run_id, side: str, hits: list[Hit]) -> list[dict]:
    """A GuardrailTrigger row per match, as writes of `batch`; returns them as the event lists them."""
    listed = []
    for index, hit in enumerate(hits):
        row = GuardrailTrigger(
            run_id=run_id, side=side, rule_id=hit.rule_id, kind=hit.kind, action=hit.action, matched=hit.masked
        )
        row_insert(batch, f"guardrail_{side}_{index}", row)
        listed.append({"rule_id": hit.rule_id, "kind": hit.kind, "action": hit.action, "matched": hit.masked})
    return listed


def input_check(*, run: Run, owner: str, snapshot: AgentSnapshot, messages: list[Message]) -> Finish | None:
    """Check the run's user message(s) against the input rules, recording what matched (with the
    redacted text stored, if the agent says so). Returns how the run ends if a rule blocks it."""
    config = snapshot_guardrails(snapshot)
    rules = guardrails.side_rules(config, guardrails.SIDE_INPUT)
    if not rules:
        return None
    own = [m for m in messages if m.run_id == run.pk and m.role == Message.Role.USER]
    found = [(message, hits) for message in own if (hits := guardrails.scan(rules, message.content))]
    if not found:
        return None
    hits = [hit for _message, message_hits in found for hit in message_hits]
    outcome = _outcome(hits)
    batch = Batch()
    run_guard(batch, run_id=run.pk, lease_owner=owner)
    triggers = _triggers_add(batch, run_id=run.pk, side=GuardrailTrigger.Side.INPUT, hits=hits)
    if outcome == OUTCOME_REDACTED and config and config["redact_stored"]:
        for index, (message, message_hits) in enumerate(found):
            text = guardrails.redacted(message.content, message_hits)
            if text != message.content:
                row_update(batch, f"redacted_{index}", message, content=text)
    payload = events.guardrail_triggered(side=GuardrailTrigger.Side.INPUT, outcome=outcome, triggers=triggers)
    event_add(batch, run_id=run.pk, type=EventType.GUARDRAIL_TRIGGERED, payload=payload)
    if batch.execute() is None:
        raise LeaseLost(str(run.pk))
    if outcome == OUTCOME_BLOCKED:
        return Finish(StopReason.GUARDRAIL_BLOCKED, agent_says(snapshot, INPUT_BLOCKED_MESSAGE))
    return None


def wire_filtered(snapshot: AgentSnapshot, wire_messages: list[dict]) -> list[dict]:
    """The messages a model call sends, with the user messages as the input rules let the model
    see them: redacted, or replaced by a placeholder where a rule blocks them."""
    rules = guardrails.side_rules(snapshot_guardrails(snapshot), guardrails.SIDE_INPUT)
    if not rules:
        return wire_messages
    return [
        {**wire, "content": guardrails.filtered(rules, wire["content"])}
        if wire["role"] == Message.Role.USER and isinstance(wire.get("content"), str)
        else wire
        for wire in wire_messages
    ]


def streams_answer(snapshot: AgentSnapshot) -> bool:
    """Whether the answer may reach the user as the model streams it (no output rule may change it)."""
    return not guardrails.rewrites_output(snapshot_guardrails(snapshot))


@dataclass
class OutputReview:
    """What the output rules made of a final answer: the text to store and deliver, the matches
    and their rows (as the event lists them)."""

    content: str
    outcome: str
    triggers: list[dict] = field(default_factory=list)


def output_review(batch: Batch, *, run_id, snapshot: AgentSnapshot, content: str) -> OutputReview | None:
    """Check a final answer against the output rules; what matched is recorded by writes of
    `batch` (the one that stores the answer). None if no rule matched."""
    rules = guardrails.side_rules(snapshot_guardrails(snapshot), guardrails.SIDE_OUTPUT)
    if not rules:
        return None
    hits = guardrails.scan(rules, content)
    if not hits:
        return None
    outcome = _outcome(hits)
    if outcome == OUTCOME_BLOCKED:
        content = agent_says(snapshot, OUTPUT_BLOCKED_MESSAGE)
    else:
        content = guardrails.redacted(content, hits)
    triggers = _triggers_add(batch, run_id=run_id, side=GuardrailTrigger.Side.OUTPUT, hits=hits)
    return OutputReview(content=content, outcome=outcome, triggers=triggers)


def output_enforce(*, run: Run, owner: str, review: OutputReview) -> Finish | None:
    """After the answer is stored: its event, and how the run ends if a rule blocked it (the
    stored answer already says why)."""
    payload = events.guardrail_triggered(
        side=GuardrailTrigger.Side.OUTPUT, outcome=review.outcome, triggers=review.triggers
    )
    run_event_append(run_id=run.pk, type=EventType.GUARDRAIL_TRIGGERED, payload=payload, lease_owner=owner)
    if review.outcome == OUTCOME_BLOCKED:
        return Finish(StopReason.GUARDRAIL_BLOCKED)
    return None
