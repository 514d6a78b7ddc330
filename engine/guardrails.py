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

Moderation rules ask a model (the rule's own) for a verdict on the whole text: an LLMCall of
purpose `moderation` (iteration 0 for the user's message, the step's iteration for its answer),
whose tokens and cost count toward the run's like any other call. Its answer is untrusted and
parsed defensively (agents.guardrails.verdict_parse): only an explicit allow lets the text
through, an answer that cannot be read counts as a match. A moderation call that fails ends the
run like a failed model step (provider_error).

Every match is a GuardrailTrigger row; each check that matched is one `guardrail.triggered`
event. An agent without rules has no "guardrails" key in its snapshot: each function here
returns at the first lookup, with no query and no statement.
"""

from dataclasses import dataclass, field

from django.utils.translation import gettext_lazy as _

from agents import guardrails
from agents.guardrails import Hit
from agents.providers import LLMResponse
from agents.snapshot import AgentSnapshot, snapshot_guardrails
from conversations import events
from conversations.batch import Batch
from conversations.events import EventType
from conversations.fencing import LeaseLost
from conversations.models import GuardrailTrigger, LLMCall, Message, Run, RunRequest, StopReason
from conversations.services import db_value, event_add, row_insert, row_update, run_event_append, run_guard
from engine.model_call import model_call
from engine.next_step import Finish
from engine.speech import agent_says
from engine.window import fitted

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


UNREADABLE_VERDICT = "(the moderator's answer could not be read)"


def _moderation_hits(
    *, run: Run, owner: str, snapshot: AgentSnapshot, rules: list, side: str, text: str, iteration: int
) -> list[Hit]:
    """The verdicts of the moderation rules among `rules` on `text`, as matches of the whole text.
    Callers pass the text as the redacting rules left it: what they keep from the agent's model
    is kept from the moderating one too."""
    hits = []
    for rule in rules:
        if rule["kind"] != guardrails.KIND_MODERATION:
            continue
        messages = guardrails.moderation_messages(rubric=rule.get("rubric", ""), side=side, text=text)

        def build(provider, model: dict, messages=messages) -> dict:
            # A verdict is plain text whatever the model config asks of an agent's answers.
            plain = fitted({**model, "response_format": "text", "response_schema": None}, messages=messages, tools=[])
            return provider.build_request(
                model=plain, messages=messages, tools=[], tool_choice="auto", parallel_tool_calls=True
            )

        def record(call: LLMCall, response: LLMResponse, batch: Batch, planned: bool) -> tuple[str, str]:
            return guardrails.verdict_parse(response.content)

        verdict, reason = model_call(
            run=run,
            owner=owner,
            snapshot=snapshot,
            purpose=LLMCall.Purpose.MODERATION,
            iteration=iteration,
            build=build,
            record=record,
            models=[rule["model"]],
        )
        if verdict != guardrails.VERDICT_ALLOW:
            masked = reason if verdict == guardrails.VERDICT_BLOCK else UNREADABLE_VERDICT
            hits.append(Hit(rule["id"], rule["kind"], rule["action"], 0, len(text), masked))
    return hits


def input_check(*, run: Run, owner: str, snapshot: AgentSnapshot, messages: list[Message]) -> Finish | None:
    """Check the run's user message(s) against the input rules, recording what matched (with the
    redacted text stored, if the agent says so). Returns how the run ends if a rule blocks it."""
    config = snapshot_guardrails(snapshot)
    rules = guardrails.side_rules(config, guardrails.SIDE_INPUT)
    if not rules:
        return None
    found = []
    for message in messages:
        if message.run_id != run.pk or message.role != Message.Role.USER:
            continue
        hits = guardrails.scan(rules, message.content)
        if not guardrails.blocked(hits):  # a blocked message needs no verdict
            hits += _moderation_hits(
                run=run,
                owner=owner,
                snapshot=snapshot,
                rules=rules,
                side=guardrails.SIDE_INPUT,
                text=guardrails.redacted(message.content, hits),
                iteration=0,
            )
        if hits:
            found.append((message, hits))
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
                # The posted request keeps the user's text too (RunRequest.content): redacted with it.
                batch.add(
                    f"request_redacted_{index}",
                    f'UPDATE "{RunRequest._meta.db_table}" SET "content" = %s '
                    'WHERE "run_id" = %s AND "content" = %s AND {guard}',
                    [text, db_value(RunRequest, "run", run.pk), message.content],
                )
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


def output_hits(snapshot: AgentSnapshot, *, content: str, moderated: list[Hit]) -> list[Hit]:
    """What the output rules find in a final answer (`moderated`: the moderation verdicts
    output_moderation found): none when the agent has no output rule."""
    rules = guardrails.side_rules(snapshot_guardrails(snapshot), guardrails.SIDE_OUTPUT)
    return guardrails.scan(rules, content) + moderated if rules else []


@dataclass
class OutputReview:
    """What the output rules made of a final answer: the text to store and deliver, the matches
    and their rows (as the event lists them)."""

    content: str
    outcome: str
    triggers: list[dict] = field(default_factory=list)


def output_moderation(*, run: Run, owner: str, snapshot: AgentSnapshot, iteration: int, content: str) -> list[Hit]:
    """The output moderation rules' verdicts on a final answer, before it is recorded."""
    rules = guardrails.side_rules(snapshot_guardrails(snapshot), guardrails.SIDE_OUTPUT)
    if not any(rule["kind"] == guardrails.KIND_MODERATION for rule in rules):
        return []
    hits = guardrails.scan(rules, content)
    if guardrails.blocked(hits):  # a blocked answer needs no verdict
        return []
    return _moderation_hits(
        run=run,
        owner=owner,
        snapshot=snapshot,
        rules=rules,
        side=guardrails.SIDE_OUTPUT,
        text=guardrails.redacted(content, hits),
        iteration=iteration,
    )


def output_review(
    batch: Batch, *, run_id, snapshot: AgentSnapshot, content: str, hits: list[Hit]
) -> OutputReview | None:
    """What the output rules make of a final answer, given what they found in it (`hits`, from
    output_hits); what matched is recorded by writes of `batch` (the one that stores the answer).
    None if no rule matched."""
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
