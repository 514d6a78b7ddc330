"""Enforcing an agent's guardrails (agents.guardrails) on a run, from the run's snapshot.

Input: every message a model is sent that the requester wrote passes the input rules: the
user's messages, and a chat completion's own turns (its system and developer text, and the
assistant turns the client made up), which belong to no run. Tool results and the agent's own
answers are not input: the output rules check the answers. A run checks, once, before its first
model call (`input_check`), the messages it brings (its user message; for a conversation's first
run, the client's turns too) and, against its version's rules, what earlier messages models would
still be shown. A match of a blocking rule in what the run brings ends the run (completed, stop
reason guardrail_blocked, like a limit: the platform did its job and says why in the agent's
language); a redacting rule's matches are replaced by placeholders in what models are sent; a
flagging rule lets the run go on and lists it for review. What a model is to see of a message
that a rule changed (the redacted text, or the blocked placeholder) is stored on the message
(Message.screened_content, or its content itself if the agent stores redacted text), so later
steps and runs send it without scanning again (`screened`); a message nothing changed stores
nothing, so a check that finds nothing writes nothing. A verdict once stored stays: later rules
may redact or block more of what it shows, never bring back what it hid.

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

What a rule found in one check is one GuardrailTrigger row, however many matches: their count
and the first few (masked); each check that matched is one `guardrail.triggered` event. An agent
without rules has no "guardrails" key in its snapshot: each function here returns at the first
lookup (`screened`, once it sees that no message carries a stored verdict), with no query and no
statement.
"""

import copy
from dataclasses import dataclass, field

from django.db import connection
from django.utils.translation import gettext_lazy as _

from agents import guardrails
from agents.guardrails import Hit
from agents.snapshot import AgentSnapshot, snapshot_guardrails
from conversations import events
from conversations.batch import Batch, Update, event_add, row_insert, row_update, run_event_append, run_guard
from conversations.events import EventType
from conversations.fencing import LeaseLost
from conversations.models import GuardrailTrigger, LLMCall, Message, Run, RunRequest, StopReason
from engine.model_call import ModelRequest, answer_record, model_call
from engine.next_step import Finish
from engine.speech import agent_says
from platform_site import green

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
    """A GuardrailTrigger row per rule that matched (its matches in all the texts checked
    counted together), as writes of `batch`; returns them as the event lists them."""
    listed = []
    for index, hit in enumerate(guardrails.merged(hits)):
        row = GuardrailTrigger(
            run_id=run_id,
            side=side,
            rule_id=hit.rule_id,
            kind=hit.kind,
            action=hit.action,
            matched=hit.masked,
            count=hit.count,
            samples=list(hit.samples),
        )
        row_insert(batch, f"guardrail_{side}_{index}", row)
        listed.append(
            {
                "rule_id": hit.rule_id,
                "kind": hit.kind,
                "action": hit.action,
                "matched": hit.masked,
                "count": hit.count,
                "samples": list(hit.samples),
            }
        )
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

        # A verdict is plain text whatever the model config asks of an agent's answers.
        request = ModelRequest(messages=messages, plain_text=True, models=[rule["model"]])
        answer = model_call(
            run=run,
            owner=owner,
            snapshot=snapshot,
            purpose=LLMCall.Purpose.MODERATION,
            iteration=iteration,
            request=request,
        )
        answer_record(answer)
        verdict, reason = guardrails.verdict_parse(answer.response.content)
        if verdict != guardrails.VERDICT_ALLOW:
            masked = reason if verdict == guardrails.VERDICT_BLOCK else UNREADABLE_VERDICT
            hits.append(guardrails.whole_text_hit(rule, text, masked))
    return hits


# Past this many characters a check is made on a thread (RE2 lets go of the interpreter lock):
# carried by the worker's loop (engine.reactor), it would hold up every run of the process. A
# pattern such as (?s)\p{Han}.{1000}! costs RE2 12-18 s of CPU per million characters
# (measured), and a chat completion brings up to a megabyte.
OFFLOAD_CHARS = 20_000


def _scanned(rules: list, texts: list[str]) -> list[list[Hit]]:
    """guardrails.scan of each text; off the loop when they are long (never inside a
    transaction: a carried run does not wait while it holds one)."""

    def scan_all() -> list[list[Hit]]:
        return [guardrails.scan(rules, text) for text in texts]

    if sum(len(text) for text in texts) < OFFLOAD_CHARS or connection.in_atomic_block:
        return scan_all()
    return green.offload(scan_all)


def _client_written(message: Message) -> bool:
    """What the requester wrote: the user's messages, and a chat completion's own turns (system,
    developer and made-up assistant turns), the only messages that belong to no run."""
    return message.role == Message.Role.USER or message.run_id is None


def _moderated_text(checked: list[tuple[Message, str, list[Hit]]]) -> str:
    """The text a moderation rule judges: the message, or the client's turns with their roles."""
    texts = [guardrails.redacted(visible, hits) for _message, visible, hits in checked]
    if len(checked) == 1:
        return texts[0]
    return "\n\n".join(f"[{message.role}] {text}" for (message, _visible, _hits), text in zip(checked, texts))


def input_check(*, run: Run, owner: str, snapshot: AgentSnapshot, messages: list[Message]) -> Finish | None:
    """Check what the requester wrote of `messages` against the input rules, recording what
    matched in what the run brings and storing what models are to see of each message a rule
    changed. Returns how the run ends if a rule blocks what it brings."""
    config = snapshot_guardrails(snapshot)
    rules = guardrails.side_rules(config, guardrails.SIDE_INPUT)
    if not rules:
        return None
    # The client's turns that belong to no run came with the conversation's first run.
    first_run = all(message.run_id in (None, run.pk) for message in messages)
    checked = []
    for message in messages:
        if not _client_written(message):
            continue
        brings = message.run_id == run.pk or (message.run_id is None and first_run)
        if message.screened_content == guardrails.BLOCKED_PLACEHOLDER:
            if brings:
                # This check blocked the run already; the run's end was not recorded (its
                # worker stopped in between): end it again, recording nothing twice.
                return Finish(StopReason.GUARDRAIL_BLOCKED, agent_says(snapshot, INPUT_BLOCKED_MESSAGE))
            continue
        # What models are shown of it so far: a run checked again after a crash finds its own
        # redactions stored, and records nothing twice.
        visible = message.content if message.screened_content is None else message.screened_content
        checked.append((message, visible, brings))
    found = _scanned(rules, [visible for _message, visible, _brings in checked])
    brought = [(m, visible, hits) for (m, visible, brings), hits in zip(checked, found, strict=True) if brings]
    earlier = [(m, visible, hits) for (m, visible, brings), hits in zip(checked, found, strict=True) if not brings]
    hits = [hit for _message, _visible, message_hits in brought for hit in message_hits]
    if brought and not guardrails.blocked(hits):  # a blocked message needs no verdict
        moderated = _moderation_hits(
            run=run,
            owner=owner,
            snapshot=snapshot,
            rules=rules,
            side=guardrails.SIDE_INPUT,
            text=_moderated_text(brought),
            iteration=0,
        )
        hits += moderated
    else:
        moderated = []
    outcome = _outcome(hits) if hits else None
    blocked_whole = guardrails.blocked(moderated)  # a verdict on all the run brings, not on one message
    changes = [
        (message, guardrails.BLOCKED_PLACEHOLDER if blocked_whole else guardrails.shown(visible, found), True)
        for message, visible, found in brought
    ] + [(message, guardrails.shown(visible, found), False) for message, visible, found in earlier]
    changes = [change for change in changes if change[1] is not None]
    if not (hits or changes):
        return None
    batch = Batch()
    run_guard(batch, run_id=run.pk, lease_owner=owner, event=bool(hits))
    # The agent may keep only the redacted text of what a run brings (a blocked run keeps it whole).
    stores_redacted = outcome == OUTCOME_REDACTED and config["redact_stored"]
    for index, (message, shown, brings) in enumerate(changes):
        if not (stores_redacted and brings):
            row_update(batch, f"screened_{index}", message, screened_content=shown)
            continue
        if message.run_id == run.pk:
            # The posted request keeps the user's text too (RunRequest.content): redacted with it.
            request = Update(RunRequest).set(content=shown).where(run_id=run.pk, content=message.content)
            batch.add(f"request_redacted_{index}", request)
        row_update(batch, f"redacted_{index}", message, content=shown, screened_content=None)
    if hits:
        triggers = _triggers_add(batch, run_id=run.pk, side=GuardrailTrigger.Side.INPUT, hits=hits)
        payload = events.guardrail_triggered(side=GuardrailTrigger.Side.INPUT, outcome=outcome, triggers=triggers)
        event_add(batch, run_id=run.pk, type=EventType.GUARDRAIL_TRIGGERED, payload=payload)
    if batch.execute() is None:
        raise LeaseLost(str(run.pk))
    if outcome == OUTCOME_BLOCKED:
        return Finish(StopReason.GUARDRAIL_BLOCKED, agent_says(snapshot, INPUT_BLOCKED_MESSAGE))
    return None


@dataclass
class ConvertedText:
    """A part's text as converted (engine.part_conversion): whether the run brings it (its own
    message's part, as for input_check) and whether it was made in this step (`new`)."""

    text: str
    brings: bool
    new: bool


def converted_check(
    *, run: Run, owner: str, snapshot: AgentSnapshot, iteration: int, texts: dict[str, ConvertedText]
) -> tuple[dict[str, str], Finish | None]:
    """The input rules on text turned out of parts, as on the text the requester typed: what
    models are to be shown of each (by the same key), and how the run ends if a blocking rule
    matches text the run brings. The pattern and term rules scan every text on each step (no
    query: what a rule hides is never stored, so it is hidden again); what they and the
    moderation rules find in text made in this step is recorded (a GuardrailTrigger per rule and
    one event), once."""
    rules = guardrails.side_rules(snapshot_guardrails(snapshot), guardrails.SIDE_INPUT)
    if not rules:
        return {key: item.text for key, item in texts.items()}, None
    keys = list(texts)
    found = dict(zip(keys, _scanned(rules, [texts[key].text for key in keys]), strict=True))
    fresh = [key for key in keys if texts[key].new]
    fresh_hits = [hit for key in fresh for hit in found[key]]
    brought_fresh = [key for key in fresh if texts[key].brings]
    if brought_fresh and not guardrails.blocked(fresh_hits):
        text = "\n\n".join(guardrails.redacted(texts[key].text, found[key]) for key in brought_fresh)
        moderated = _moderation_hits(
            run=run,
            owner=owner,
            snapshot=snapshot,
            rules=rules,
            side=guardrails.SIDE_INPUT,
            text=text,
            iteration=iteration,
        )
        if guardrails.blocked(moderated):
            # A verdict on all the new text, not on a span of one: it can only block.
            for key in brought_fresh:
                found[key] = [*found[key], *moderated]
        fresh_hits += moderated
    if fresh_hits:
        batch = Batch()
        run_guard(batch, run_id=run.pk, lease_owner=owner, event=True)
        triggers = _triggers_add(batch, run_id=run.pk, side=GuardrailTrigger.Side.INPUT, hits=fresh_hits)
        payload = events.guardrail_triggered(
            side=GuardrailTrigger.Side.INPUT, outcome=_outcome(fresh_hits), triggers=triggers
        )
        event_add(batch, run_id=run.pk, type=EventType.GUARDRAIL_TRIGGERED, payload=payload)
        if batch.execute() is None:
            raise LeaseLost(str(run.pk))
    shown = {}
    for key in keys:
        replaced = guardrails.shown(texts[key].text, found[key])
        shown[key] = texts[key].text if replaced is None else replaced
    if any(texts[key].brings and guardrails.blocked(found[key]) for key in keys):
        return shown, Finish(StopReason.GUARDRAIL_BLOCKED, agent_says(snapshot, INPUT_BLOCKED_MESSAGE))
    return shown, None


def screened(messages: list[Message]) -> list[Message]:
    """The messages as models are shown them: where the input rules changed a message, what they
    left of it (stored by input_check) in place of its content. Whatever the rules of the version
    now: a verdict once stored stays (copies; the rows read are left as they are)."""
    if all(message.screened_content is None for message in messages):
        return messages
    shown = []
    for message in messages:
        if message.screened_content is not None:
            message = copy.copy(message)
            message.content = message.screened_content
        shown.append(message)
    return shown


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


def output_hits(*, run: Run, owner: str, snapshot: AgentSnapshot, iteration: int, content: str) -> list[Hit]:
    """What the output rules find in a final answer, before it is recorded: the matches of the
    scanning rules, then the moderation rules' verdicts (asked only when no match blocks it, on
    the text as the redacting rules left it). None when the agent has no output rule."""
    rules = guardrails.side_rules(snapshot_guardrails(snapshot), guardrails.SIDE_OUTPUT)
    if not rules:
        return []
    hits = _scanned(rules, [content])[0]
    if guardrails.blocked(hits) or not any(rule["kind"] == guardrails.KIND_MODERATION for rule in rules):
        return hits
    text = guardrails.redacted(content, hits)
    side = guardrails.SIDE_OUTPUT
    moderated = _moderation_hits(
        run=run, owner=owner, snapshot=snapshot, rules=rules, side=side, text=text, iteration=iteration
    )
    return hits + moderated


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
