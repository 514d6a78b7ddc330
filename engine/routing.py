"""Routing rules (agents.models.RoutingRule): which model config a run's steps use.

The decision is made once per run, at its first model step, from the run's user message: the
version's rules are tried in order and the first that matches picks the model; none matches, the
agent's model. The agent's fallback model stays the fallback whichever model was picked
(agents.snapshot.snapshot_models on the routed snapshot). The conditions are pure functions
(`rule_check` over `Facts`), tested without a database:

1. input length: the message's text in characters or estimated tokens, longer and/or shorter
   than a number;
2. attachments: the message has parts (any, or of one kind: image, audio, file);
3. end user tier: the `tier` of the run's metadata (posted with the message), else of the
   conversation's metadata, is one of the rule's values;
4. time of day: when the message was posted (the run's creation), in a window of the rule's time
   zone (else the agent's); a window may span midnight;
5. classifier: a model (the rule's, with the rule's prompt as its system message) labels the
   message's text; the rule matches when the label is one of its own. The call is an LLMCall of
   purpose `routing` (iteration 0), counted in the run's totals. Rules sharing a classifier
   (model and prompt) share its one call. A classifier that fails, or answers a label the rule
   does not list, does not match; that is recorded with the decision. Its answer is untrusted:
   only compared with the rule's labels, and kept short where it is recorded.

The decision is recorded on the run (Run.routing), written with the first attempt of the run's
first step (ModelRequest.routing_store: in that attempt's own statement), and on every step call
(LLMCall.routing; the fallback's marked `fallback`). Later steps read it with the run (the step's
read returns the column): no classifier call and no statement again, and nothing kept between
steps in the process. A classifier's label is stored on the run with its answer (Run.routing
holds {"labels": …} until the decision is made), so a run taken up again after a crash does not
ask it again. An agent without rules has no "routing" key in its snapshot: `run_route` returns
at the first lookup, with no statement.
"""

import hashlib
import zoneinfo
from dataclasses import dataclass, field, replace
from datetime import datetime, time
from functools import partial

from agents.providers.base import estimate_tokens
from agents.snapshot import AgentSnapshot, RoutingRuleSpec, snapshot_routing
from conversations.batch import run_guard
from conversations.models import LLMCall, Message, Run
from engine.guardrails import screened
from engine.model_call import ModelRequest, ModelStepFailed, answer_record, answer_writes, model_call

# Iteration of the classifier's calls: before the model first sees the message, as the input
# guardrails' moderation.
CLASSIFIER_ITERATION = 0
# What is recorded of a value the user or a model wrote (a tier, a label): the start of it.
RECORDED_CHARS = 64

INPUT_LENGTH, ATTACHMENTS, TIER, TIME_OF_DAY, CLASSIFIER = (
    "input_length",
    "attachments",
    "tier",
    "time_of_day",
    "classifier",
)


@dataclass(frozen=True)
class Facts:
    """What the conditions look at: the run's user message and its circumstances. `tier` is
    None where it was not read (no tier rule was reached); `labels` are the classifiers'
    answers by classifier_key (None: the call failed), `known_labels` those any rule lists."""

    text: str
    part_kinds: frozenset[str]
    posted_at: datetime
    time_zone: str
    tier: str | None = None
    labels: dict[str, str | None] = field(default_factory=dict)
    known_labels: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Check:
    """One rule tried: whether it matched, and what it saw (recorded with the decision)."""

    matched: bool
    saw: object
    error: str = ""


def input_length(text: str, unit: str) -> int:
    return estimate_tokens(text) if unit == "tokens" else len(text)


def length_matches(length: int, *, over: int | None, under: int | None) -> bool:
    return (over is None or length > over) and (under is None or length < under)


def attachments_match(kind: str, kinds: frozenset[str]) -> bool:
    return bool(kinds) if kind == "any" else kind in kinds


def in_window(at: time, *, start: time, end: time) -> bool:
    """Whether `at` is in [start, end); a window whose end is before its start spans midnight."""
    if start <= end:
        return start <= at < end
    return at >= start or at < end


# What a model puts around a one-word answer: spaces, quotes, a full stop.
_AROUND_LABEL = " \t\"'`“”‘’.。*"


def label_read(answer: str) -> str:
    """A classifier's answer as a label: its first line, trimmed of spaces, quotes, full stops
    and emphasis marks, lower-cased, at most RECORDED_CHARS characters."""
    lines = answer.strip().splitlines()
    first = lines[0] if lines else ""
    return first.strip(_AROUND_LABEL).lower()[:RECORDED_CHARS]


def classifier_key(rule: RoutingRuleSpec) -> str:
    """Rules with the same classifier model and prompt share one call."""
    prompt = hashlib.sha256(rule["classifier_prompt"].encode()).hexdigest()[:16]
    return f"{rule['classifier_model']['id']}:{prompt}"


def rule_check(rule: RoutingRuleSpec, facts: Facts) -> Check:
    """Whether `rule` matches the message `facts` describe (a classifier rule: by the label its
    classifier gave, which must be in `facts.labels`)."""
    condition = rule["condition"]
    if condition == INPUT_LENGTH:
        length = input_length(facts.text, rule["length_unit"])
        return Check(length_matches(length, over=rule["length_over"], under=rule["length_under"]), length)
    if condition == ATTACHMENTS:
        return Check(attachments_match(rule["attachment_kind"], facts.part_kinds), sorted(facts.part_kinds))
    if condition == TIER:
        tier = (facts.tier or "").strip().lower()
        return Check(bool(tier) and tier in rule["tiers"], tier[:RECORDED_CHARS])
    if condition == TIME_OF_DAY:
        zone = zoneinfo.ZoneInfo(rule["time_zone"] or facts.time_zone)
        local = facts.posted_at.astimezone(zone).time().replace(tzinfo=None)
        window = {"start": time.fromisoformat(rule["time_start"]), "end": time.fromisoformat(rule["time_end"])}
        return Check(in_window(local, **window), local.strftime("%H:%M"))
    if condition == CLASSIFIER:
        label = facts.labels.get(classifier_key(rule))
        if label is None:
            return Check(False, None, "the classifier call failed")
        if label in rule["labels"]:
            return Check(True, label)
        return Check(False, label, "" if label in facts.known_labels else "an unknown label")
    return Check(False, None, f"unknown condition {condition!r}")


def decide(rules: list[RoutingRuleSpec], facts: Facts) -> dict:
    """The decision as recorded: the first rule that matches (its 1-based number, id, name,
    condition, what it saw and the model it picks) and the rules tried before it (`unmatched`,
    with what each saw, and why a classifier rule could not match); `rule` None when none did."""
    unmatched = []
    known = frozenset(label for rule in rules if rule["condition"] == CLASSIFIER for label in rule["labels"])
    facts = replace(facts, known_labels=known)
    for number, rule in enumerate(rules, start=1):
        check = rule_check(rule, facts)
        if check.matched:
            return {
                "rule": number,
                "rule_id": rule["id"],
                "name": rule["name"],
                "condition": rule["condition"],
                "saw": check.saw,
                "model_config": {"id": rule["model"]["id"], "name": rule["model"]["name"]},
                "unmatched": unmatched,
            }
        tried = {"rule": number, "condition": rule["condition"], "saw": check.saw}
        unmatched.append({**tried, "error": check.error} if check.error else tried)
    return {"rule": None, "unmatched": unmatched}


def routed_snapshot(snapshot: AgentSnapshot, decision: dict) -> AgentSnapshot:
    """The snapshot a run's steps use: the version's, its model the one the decision picked."""
    number = decision.get("rule")
    rules = snapshot["routing"]["rules"]
    if number is None or not 0 < number <= len(rules):
        return snapshot
    return {**snapshot, "model": rules[number - 1]["model"]}


@dataclass(frozen=True)
class Route:
    """The run's routing: its snapshot with the model picked, the decision its calls record, and
    whether the decision is new (stored on the run by the step's first attempt)."""

    snapshot: AgentSnapshot
    decision: dict
    new: bool


def run_route(*, run: Run, owner: str, snapshot: AgentSnapshot, messages: list[Message]) -> Route | None:
    """The run's routing, decided now if it was not yet (see the module); None for an agent
    without routing rules."""
    routing = snapshot_routing(snapshot)
    if routing is None:
        return None
    stored = run.routing or {}
    if "rule" in stored:
        return Route(routed_snapshot(snapshot, stored), stored, new=False)
    rules = routing["rules"]
    message = _run_message(run, screened(messages))
    parts = (message.parts if message else None) or ()
    facts = Facts(
        text=message.content if message else "",
        part_kinds=frozenset(part.get("type") for part in parts if isinstance(part, dict)),
        posted_at=run.created_at,
        time_zone=snapshot["agent"]["time_zone"],
        labels=dict(stored.get("labels") or {}),
    )
    for number, rule in enumerate(rules, start=1):
        # In order: what a rule needs is fetched only if no earlier rule matched.
        if rule["condition"] == TIER and facts.tier is None:
            facts = replace(facts, tier=_tier_read(run))
        elif rule["condition"] == CLASSIFIER and classifier_key(rule) not in facts.labels:
            label = _classify(run=run, owner=owner, snapshot=snapshot, rule=rule, number=number, facts=facts)
            facts = replace(facts, labels={**facts.labels, classifier_key(rule): label})
        if rule_check(rule, facts).matched:
            break
    decision = decide(rules, facts)
    return Route(routed_snapshot(snapshot, decision), decision, new=True)


def _run_message(run: Run, messages: list[Message]) -> Message | None:
    """The run's user message (the last one it brings), as models are shown it."""
    return next(
        (m for m in reversed(messages) if m.run_id == run.pk and m.role == Message.Role.USER),
        None,
    )


def _tier_read(run: Run) -> str:
    """The end user's tier: the run's metadata (posted with the message), else the conversation's."""
    row = Run.objects.filter(pk=run.pk).values_list("metadata", "conversation__metadata").first()
    for metadata in row or ():
        if isinstance(metadata, dict) and isinstance(metadata.get("tier"), str) and metadata["tier"].strip():
            return metadata["tier"]
    return ""


def _classify(
    *, run: Run, owner: str, snapshot: AgentSnapshot, rule: RoutingRuleSpec, number: int, facts: Facts
) -> str | None:
    """The classifier's label for the message (None if its call failed), stored on the run with
    its answer's commit, with the labels known so far."""
    messages = [{"role": "system", "content": rule["classifier_prompt"]}, {"role": "user", "content": facts.text}]
    request = ModelRequest(
        messages=messages,
        plain_text=True,
        models=[rule["classifier_model"]],
        routing={"rule": number, "rule_id": rule["id"], "name": rule["name"], "condition": CLASSIFIER},
    )
    try:
        answer = model_call(
            run=run,
            owner=owner,
            snapshot=snapshot,
            purpose=LLMCall.Purpose.ROUTING,
            iteration=CLASSIFIER_ITERATION,
            request=request,
        )
    except ModelStepFailed:
        # Its attempts are in the ledger with their errors; the decision says the rule could not match.
        return None
    label = label_read(answer.response.content)
    known = {**facts.labels, classifier_key(rule): label}
    guard = partial(_guard_storing, run_id=run.pk, owner=owner, routing={"labels": known})
    answer_record(answer, answer_writes(answer, guard=guard))
    return label


def _guard_storing(batch, *, run_id, owner: str, routing: dict, sets: dict, returning: tuple) -> None:
    """The lease's fence of a classifier's answer, storing the labels known on the run with it."""
    run_guard(batch, run_id=run_id, lease_owner=owner, sets={**sets, "routing": routing}, returning=returning)
