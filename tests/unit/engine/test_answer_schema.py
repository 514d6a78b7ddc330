"""Answers in a schema without a database: an answer read against a schema (fences forgiven,
errors a model can act on), the schema check an operator's form relies on, and the decision
next_step makes with a final answer (match, repair turn, or schema_invalid)."""

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from agents.output_schema import OutputSchemaInvalid, answer_read, output_schema_check
from agents.snapshot import snapshot_output
from conversations.models import Message, StopReason
from engine.answer_schema import REPAIR_NAME, repair_text, repairs_made, run_schema
from engine.next_step import Finish, Repair, next_step

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
RUN_ID = uuid.uuid4()
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "temperature": {"type": "number"}},
    "required": ["city", "temperature"],
    "additionalProperties": False,
}


@dataclass
class RunRow:
    pk: uuid.UUID = RUN_ID
    cancel_requested: bool = False
    deadline: datetime | None = None
    iterations: int = 1
    total_tokens: int = 0
    cost: Decimal = Decimal(0)
    agent_id: int = 1
    children_tokens: int = 0
    children_cost: Decimal = Decimal(0)
    output_schema: dict | None = None


def snapshot(**agent) -> dict:
    settings = {
        "max_iterations": 9,
        "run_timeout_seconds": 60,
        "time_zone": "UTC",
        "language": "en",
        "run_token_budget": None,
        "run_cost_budget": None,
        "daily_token_budget": None,
        "daily_cost_budget": None,
    }
    return {"agent": {**settings, **agent}, "model": {}, "fallback_model": None, "tools": []}


def user(text="Weather in Beijing?", name=""):
    return Message(run_id=RUN_ID, role=Message.Role.USER, content=text, name=name)


def answer(text):
    return Message(run_id=RUN_ID, role=Message.Role.ASSISTANT, content=text)


def repair():
    return user("[Platform check, not the user] …", name=REPAIR_NAME)


@pytest.mark.parametrize(
    "text",
    [
        '{"city": "Beijing", "temperature": 21.5}',
        '  ```json\n{"city": "Beijing", "temperature": 21.5}\n```  ',
        '```\n{"city": "Beijing", "temperature": 21.5}\n```',
    ],
)
def test_an_answer_matching_the_schema_is_read_with_or_without_a_fence(text):
    read = answer_read(SCHEMA, text)
    assert read.valid and read.value == {"city": "Beijing", "temperature": 21.5}


def test_what_is_wrong_is_said_with_where():
    read = answer_read(SCHEMA, '{"city": 3, "wind": "north"}')
    assert not read.valid
    joined = " | ".join(read.errors)
    assert "'temperature' is a required property" in joined
    assert "at $.city: 3 is not of type 'string'" in joined
    assert "'wind' was unexpected" in joined


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("It is sunny in Beijing.", "The answer is not JSON"),
        ("", "The answer is empty"),
        ("[" * 5000 + "]" * 5000, "nested more than"),
        ('{"city": "Beijing", "temperature": NaN}', "The answer is not JSON"),
    ],
)
def test_an_answer_that_is_not_json_is_an_error_not_an_exception(text, said):
    read = answer_read(SCHEMA, text)
    assert read.value is None and said in read.errors[0]


def test_a_slow_pattern_does_not_hold_the_worker():
    # A backtracking engine takes hours on this; the linear validator answers at once.
    schema = {"type": "string", "pattern": "^([a-z0-9]+\\.?)+@example\\.com$"}
    assert not answer_read(schema, '"' + "a" * 40 + '!"').valid


def test_nul_in_a_valid_answer_is_kept_storable():
    read = answer_read({"type": "string"}, '"a\\u0000b"')
    assert read.valid and read.value == "a\ufffdb"


@pytest.mark.parametrize(
    ("schema", "said"),
    [
        ("object", "must be a JSON object"),
        ({"type": "nonsense"}, "Not a valid JSON Schema at type"),
        ({"properties": {"a": {"minLength": -1}}}, "Not a valid JSON Schema at properties/a/minLength"),
    ],
)
def test_a_bad_schema_is_refused_with_what_is_wrong(schema, said):
    with pytest.raises(OutputSchemaInvalid, match=said):
        output_schema_check(schema)


def test_old_snapshots_have_no_schema():
    assert snapshot_output(snapshot()) == (None, 0)
    assert snapshot_output(snapshot(output_schema=SCHEMA, output_repair_turns=3)) == (SCHEMA, 3)


def test_the_runs_own_schema_comes_before_the_versions():
    own = {"type": "array"}
    assert run_schema(RunRow(), snapshot(output_schema=SCHEMA, output_repair_turns=1)) == (SCHEMA, 1)
    assert run_schema(RunRow(output_schema=own), snapshot(output_schema=SCHEMA, output_repair_turns=1)) == (own, 1)
    # A request's schema on an agent that declares none: the field's default repair turns.
    assert run_schema(RunRow(output_schema=own), snapshot()) == (own, 2)


def decide(messages, snap, run=None, answered=True):
    return next_step(run or RunRow(), messages, snap, now=NOW, answered=answered)


@pytest.mark.parametrize("answered", [True, False])
def test_a_matching_answer_ends_the_run_with_its_value(answered):
    snap = snapshot(output_schema=SCHEMA, output_repair_turns=2)
    decision = decide([user(), answer('{"city": "Beijing", "temperature": 3}')], snap, answered=answered)
    assert decision == Finish(StopReason.FINAL_ANSWER, output={"city": "Beijing", "temperature": 3})


def test_without_a_schema_any_text_is_the_answer():
    assert decide([user(), answer("sunny")], snapshot()) == Finish(StopReason.FINAL_ANSWER)


@pytest.mark.parametrize("answered", [True, False])
def test_a_wrong_answer_is_sent_back_while_repair_turns_are_left(answered):
    snap = snapshot(output_schema=SCHEMA, output_repair_turns=2)
    first = decide([user(), answer("sunny")], snap, answered=answered)
    assert isinstance(first, Repair) and (first.repair, first.of) == (1, 2)
    assert "not JSON" in first.errors[0]
    second = decide([user(), answer("sunny"), repair(), answer('{"city": "Beijing"}')], snap, answered=answered)
    assert isinstance(second, Repair) and (second.repair, second.of) == (2, 2)
    assert second.errors == ["at $: 'temperature' is a required property"]


def test_after_the_last_repair_turn_the_run_ends_schema_invalid():
    snap = snapshot(output_schema=SCHEMA, output_repair_turns=2)
    messages = [user(), answer("a"), repair(), answer("b"), repair(), answer("c")]
    decision = decide(messages, snap)
    assert isinstance(decision, Finish) and decision.reason == StopReason.SCHEMA_INVALID
    assert decision.status == "completed"
    assert "after 3 tries it still did not" in decision.message
    assert decision.error.startswith("The answer does not match the output schema: The answer is not JSON")


def test_no_repair_turns_ends_at_the_first_wrong_answer():
    snap = snapshot(output_schema=SCHEMA, output_repair_turns=0)
    assert decide([user(), answer("a")], snap).reason == StopReason.SCHEMA_INVALID


def test_only_this_runs_repair_turns_count():
    earlier = Message(run_id=uuid.uuid4(), role=Message.Role.USER, content="x", name=REPAIR_NAME)
    messages = [earlier, user(), answer("a"), repair()]
    assert repairs_made(messages, RUN_ID) == 1


def test_the_repair_message_is_the_platforms_and_lists_the_errors():
    text = repair_text(snapshot(), ["at $: 'city' is a required property", "at $.x: bad"])
    assert text.startswith("[Platform check, not the user]")
    assert "- at $: 'city' is a required property\n- at $.x: bad" in text


def test_the_ending_is_said_in_the_agents_language():
    snap = snapshot(output_schema=SCHEMA, output_repair_turns=0, language="zh-hans")
    decision = decide([user(), answer("a")], snap)
    assert decision.reason == StopReason.SCHEMA_INVALID and decision.message


def test_a_schema_that_refers_to_itself_forever_fails_the_answer_not_the_worker():
    read = answer_read({"$ref": "#"}, '{"a": 1}')
    assert read.errors == ["The schema or the answer is nested too deeply to be checked."]
