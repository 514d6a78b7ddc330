"""The context policy: system first, the last N turns, tool results trimmed in the history,
earlier turns folded into a stored summary by a recorded model call, pairs never split."""

import pytest

from conversations.models import Conversation, LLMCall, Message, ToolInvocation
from conversations.services import conversation_create
from engine.context import SUMMARY_HEADING, TRANSCRIPT_HEADING
from tests.support.llm import agent_on, assert_totals_match_calls
from tests.support.runs import advance, ask

pytestmark = pytest.mark.django_db
PROVIDERS = ["openai_compatible", "anthropic"]
PADDING = "weather details " * 14  # about 56 tokens of answer per turn
SUMMARY = "Summary: the user went through numbered turns and the assistant echoed each number."


def turn_script(*, with_tool: bool = True) -> dict:
    answer = {"content": "Answer for turn {n}: " + PADDING}
    steps = [{"tool_calls": [{"name": "test-echo", "arguments": {"text": "n{n}"}}]}, answer] if with_tool else [answer]
    return {
        "scenarios": [
            # A summary request quotes earlier turns, so it must be recognised first.
            {"match": TRANSCRIPT_HEADING, "steps": [{"content": SUMMARY}]},
            {"match": r"turn (?P<n>\d+)", "steps": steps},
        ]
    }


def openai_view(body: dict) -> list[tuple[str, str]]:
    """(role, text) of each message a request carried, whichever the wire format."""
    if "system" in body or not any(m["role"] == "system" for m in body["messages"]):
        system = body.get("system")
        if isinstance(system, list):  # text blocks, the last with the prompt cache's breakpoint
            system = "".join(block["text"] for block in system)
        rows = [("system", system)] if system else []
        for message in body["messages"]:
            content = message["content"]
            if isinstance(content, str):
                rows.append((message["role"], content))
                continue
            for block in content:
                kind = block["type"]
                role = {"tool_use": "assistant_call", "tool_result": "tool"}.get(kind, message["role"])
                rows.append((role, block.get("text") or block.get("content") or block.get("name")))
        return rows
    rows = []
    for message in body["messages"]:
        if message.get("tool_calls"):
            rows += [("assistant_call", c["function"]["name"]) for c in message["tool_calls"]]
        else:
            rows.append((message["role"], message["content"]))
    return rows


def assert_pairs_intact(rows: list[tuple[str, str]]) -> None:
    for i, (role, _) in enumerate(rows):
        if role == "tool":
            assert rows[i - 1][0] in ("assistant_call", "tool"), f"tool result separated from its call: {rows}"
        if role == "assistant_call" and i + 1 < len(rows):
            assert rows[i + 1][0] in ("assistant_call", "tool"), f"tool call without its result: {rows}"


def test_only_the_last_n_turns_are_sent_after_the_system_prompt(fake_llm):
    agent = agent_on(fake_llm, turn_script(with_tool=False), tools=[], context_max_turns=2)
    conversation = conversation_create(agent=agent)
    for n in range(1, 5):
        ask(agent, f"turn {n}", conversation)

    last = fake_llm.requests(agent.model_config.model)[-1]
    assert [(m["role"], m["content"][:16]) for m in last["messages"]] == [
        ("system", "You are a test a"),
        ("user", "turn 3"),
        ("assistant", "Answer for turn "),
        ("user", "turn 4"),
    ]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_long_tool_results_are_trimmed_when_sent_again(fake_llm, provider):
    script = {
        "scenarios": [
            {
                "match": "long",
                "steps": [
                    {"tool_calls": [{"name": "test-echo", "arguments": {"text": "0123456789", "times": 50}}]},
                    {"content": "That was long."},
                ],
            }
        ],
        "fallback": {"content": "ok"},
    }
    agent = agent_on(fake_llm, script, provider=provider, context_tool_result_max_chars=100)
    conversation = conversation_create(agent=agent)
    ask(agent, "something long", conversation)
    ask(agent, "and now?", conversation)

    right_after, next_turn = fake_llm.requests(agent.model_config.model)[-2:]
    results = lambda body: [text for role, text in openai_view(body) if role == "tool"]  # noqa: E731
    assert results(right_after) == ["0123456789" * 50]  # the step after the call sees all of it
    [trimmed] = results(next_turn)
    assert trimmed.startswith("0123456789" * 10) and "[trimmed: 400 more characters not shown]" in trimmed


@pytest.mark.parametrize("provider", PROVIDERS)
def test_earlier_turns_are_summarised_once_in_order_and_pairs_stay_whole(fake_llm, provider):
    agent = agent_on(fake_llm, turn_script(), provider=provider, context_token_budget=500)
    conversation = conversation_create(agent=agent)
    runs = [ask(agent, f"turn {n}", conversation) for n in range(1, 8)]

    assert all(run.stop_reason == "final_answer" for run in runs)
    # Seven questions that each need the same tool are no tool loop: the streak is per run.
    assert set(ToolInvocation.objects.filter(run__conversation=conversation).values_list("status", flat=True)) == {
        "succeeded"
    }
    summaries = list(LLMCall.objects.filter(run__conversation=conversation, purpose="summary").order_by("started_at"))
    assert summaries and all(call.status == "succeeded" for call in summaries)
    # A summary is made when the budget is exceeded, not at every step after that.
    first_run = summaries[0].run
    assert LLMCall.objects.filter(run=first_run, purpose="summary").count() == 1
    assert LLMCall.objects.filter(run=first_run, purpose="step").count() == 2
    assert len(summaries) < len(runs) - 1

    # The summary's source lists the folded turns in their order, each call with its result.
    source = summaries[0].request["messages"][-1]["content"]
    source = source if isinstance(source, str) else source[0]["text"]
    positions = [source.index(f"turn {n}") for n in (1, 2)]
    assert positions == sorted(positions)
    assert "called tool test-echo" in source and "tool test-echo returned: n1" in source

    conversation.refresh_from_db()
    assert conversation.context_summary == SUMMARY and conversation.context_summary_call_id == summaries[-1].pk
    kept = Message.objects.filter(conversation=conversation, order__gt=conversation.context_summary_through)
    assert kept.order_by("order").first().role == "user"

    steps = [body for body in fake_llm.requests(agent.model_config.model) if TRANSCRIPT_HEADING not in str(body)]
    last = openai_view(steps[-1])
    assert (
        last[0][0] == "system"
        and last[0][1].startswith("You are a test agent.")
        and SUMMARY_HEADING + SUMMARY in last[0][1]
    )
    assert [text for role, text in last if role == "user"][-1] == "turn 7"
    users = [int(text.split()[1]) for role, text in last if role == "user"]
    assert users == sorted(users) and 1 not in users
    for body in steps:
        assert_pairs_intact(openai_view(body))
    for run in runs:
        assert_totals_match_calls(run)


def test_the_summary_is_not_used_by_a_run_it_would_cover(fake_llm):
    """A run whose own messages lie before the summary's end (a slow, older run of the same
    conversation) keeps its full history rather than losing its own question."""
    agent = agent_on(fake_llm, turn_script(with_tool=False), tools=[])
    conversation = conversation_create(agent=agent)
    first = ask(agent, "turn 1", conversation)
    Conversation.objects.filter(pk=conversation.pk).update(
        context_summary="stale",
        context_summary_through=Message.objects.filter(run=first).order_by("order").last().order,
    )
    Message.objects.filter(run=first, role="assistant").delete()
    first.status = "queued"
    first.save(update_fields=["status"])
    advance(first)
    last = fake_llm.requests(agent.model_config.model)[-1]
    assert "stale" not in last["messages"][0]["content"]
    assert last["messages"][-1] == {"role": "user", "content": "turn 1"}
