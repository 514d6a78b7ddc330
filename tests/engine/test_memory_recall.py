"""Memories shown to a run: at its first step the end user's most relevant memories go into one
user-role block of quoted notes before the conversation, within the context budget; every model call of the
run records them (MemoryUse) and is shown the same ones; a version without memory pays nothing."""

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.providers.base import estimate_message_tokens
from conversations.services import conversation_create
from engine.memory import BUDGET_SHARE, MEMORY_CLOSE, MEMORY_HEADING, MEMORY_OPEN, memory_message
from memory.models import Memory, MemoryUse
from memory.services import MemoryProposal, memory_apply
from tests.support.factories import make_user
from tests.support.runs import advance, start_run
from workspaces.defaults import default_workspace_id

ANSWER = {"scenarios": [{"match": ".", "steps": [{"content": "明天成都晴。"}]}]}


@pytest.fixture
def extractions(monkeypatch):
    """Memory extractions handed to the broker after a run completed (kept off it)."""
    from engine import tasks

    sent = []
    monkeypatch.setattr(tasks.memory_extract_task, "delay", lambda run_id: sent.append(run_id))
    return sent


def remembered(agent, owner, end_user: str, *statements: str, kind: str = "fact") -> list[Memory]:
    """Memories held for the end user in the agent's own scope, oldest first."""
    memories = []
    for statement in statements:
        [change] = memory_apply(
            workspace_id=default_workspace_id(),
            scope=f"agent:{agent.pk}",
            owner_id=owner.pk,
            end_user=end_user,
            proposals=[MemoryProposal(action="add", kind=kind, statement=statement)],
            source="api",
            kinds=[kind],
            ttl_days=None,
        )
        memories.append(change.memory)
    return memories


def _sent(fake_llm, agent) -> list[list[dict]]:
    return [request["messages"] for request in fake_llm.requests(agent.model_config.model)]


def shown_and_said(message: dict) -> tuple[list[str], str]:
    """The memory block's lines and the user's own words of the user message the block opens."""
    block, close, said = message["content"].partition(MEMORY_CLOSE + "\n\n")
    assert message["role"] == "user" and close, message
    return (block + MEMORY_CLOSE).split("\n"), said


def test_the_first_step_shows_the_most_relevant_memories_after_the_system_prompt(scripted_agent, fake_llm, extractions):
    agent = scripted_agent(ANSWER, memory_enabled=True, system_prompt="你是天气助手。")
    owner = make_user()
    held = remembered(agent, owner, "u1", "住在成都", "喜欢猫")
    other = remembered(agent, owner, "u2", "住在北京")  # another end user's: never shown
    conversation = conversation_create(agent=agent, owner=owner, end_user="u1")

    run = advance(start_run(agent, "成都明天天气如何？", conversation))

    assert run.status == "completed"
    [messages] = _sent(fake_llm, agent)
    assert messages[0] == {"role": "system", "content": "你是天气助手。"}
    # Data about the user, not instructions: a user-role block, never a system message. It opens
    # the user's message, so that user and assistant turns still alternate.
    lines, said = shown_and_said(messages[1])
    # The memory that shares words with the question first, then the newest of the others.
    assert lines == [MEMORY_OPEN, MEMORY_HEADING, '- fact: "住在成都"', '- fact: "喜欢猫"', MEMORY_CLOSE]
    assert said == "成都明天天气如何？" and len(messages) == 2
    uses = list(MemoryUse.objects.filter(run=run).order_by("rank"))
    assert [(use.memory_id, use.rank) for use in uses] == [(held[0].pk, 1), (held[1].pk, 2)]
    assert {use.llm_call.purpose for use in uses} == {"step"}
    # Shown is used: their lifetime starts again.
    assert all(m.last_used_at >= run.started_at for m in Memory.objects.filter(pk__in=[m.pk for m in held]))
    assert not MemoryUse.objects.filter(memory=other[0]).exists()
    assert extractions == [str(run.pk)]


def test_later_steps_show_what_the_first_was_shown(scripted_agent, fake_llm, extractions):
    """The remember tool writes a memory mid-run: the run's later call is still shown the first
    call's memories, so its context does not change under it."""
    script = {
        "scenarios": [
            {
                "match": ".",
                "steps": [
                    {"tool_calls": [{"name": "remember", "arguments": {"statement": "喜欢猫", "kind": "preference"}}]},
                    {"content": "记住了。"},
                ],
            }
        ]
    }
    agent = scripted_agent(script, tools=["remember"], memory_enabled=True)
    owner = make_user()
    [city] = remembered(agent, owner, "u1", "住在成都")
    conversation = conversation_create(agent=agent, owner=owner, end_user="u1")

    run = advance(start_run(agent, "我喜欢猫", conversation))

    assert run.status == "completed"
    first, second = _sent(fake_llm, agent)
    assert first[1] == second[1]
    assert first[1]["content"].startswith(memory_message([city])["content"] + "\n\n")
    uses = list(MemoryUse.objects.filter(run=run).order_by("llm_call_id", "rank"))
    assert len(uses) == 2 and {use.memory_id for use in uses} == {city.pk}
    assert len({use.llm_call_id for use in uses}) == 2
    # What the tool wrote is there for the next run.
    assert Memory.objects.filter(end_user="u1", statement="喜欢猫", kind="preference").exists()


def test_memories_fit_a_quarter_of_the_context_budget_lowest_ranked_dropped_first(
    scripted_agent, fake_llm, extractions
):
    agent = scripted_agent(ANSWER, memory_enabled=True, memory_shown=10, context_token_budget=1200)
    owner = make_user()
    statements = [f"记住第{n}件事：" + "很长的说明" * 12 for n in range(6)]
    remembered(agent, owner, "u1", *statements)
    conversation = conversation_create(agent=agent, owner=owner, end_user="u1")

    run = advance(start_run(agent, "你好", conversation))

    [messages] = _sent(fake_llm, agent)
    lines, _ = shown_and_said(messages[1])
    shown = [json.loads(line.removeprefix("- fact: ")) for line in lines[2:-1]]
    # Newest first when nothing matches; as many as fit, the rest dropped from the end.
    assert 0 < len(shown) < len(statements)
    assert shown == list(reversed(statements))[: len(shown)]
    assert estimate_message_tokens({"role": "user", "content": "\n".join(lines)}) <= 1200 // BUDGET_SHARE
    assert MemoryUse.objects.filter(run=run).count() == len(shown)


def test_no_end_user_or_no_memory_shows_nothing(scripted_agent, fake_llm, extractions):
    owner = make_user()
    with_memory = scripted_agent(ANSWER, memory_enabled=True)
    remembered(with_memory, owner, "u1", "住在成都")
    anonymous = advance(start_run(with_memory, "你好", conversation_create(agent=with_memory, owner=owner)))
    without = scripted_agent(ANSWER)
    remembered(without, owner, "u1", "住在成都")
    plain = advance(start_run(without, "你好", conversation_create(agent=without, owner=owner, end_user="u1")))

    for agent, run in ((with_memory, anonymous), (without, plain)):
        assert run.status == "completed"
        [messages] = _sent(fake_llm, agent)
        assert [m["role"] for m in messages] == ["system", "user"]
        assert not MemoryUse.objects.filter(run=run).exists()
    # A version that keeps memory is extracted (the task finds no end user and stops); one without is not.
    assert extractions == [str(anonymous.pk)]


def test_a_run_without_memory_touches_no_memory_table(scripted_agent, extractions):
    if connection.vendor != "postgresql":
        pytest.skip("counted on PostgreSQL, where each commit is one statement")
    agent = scripted_agent(ANSWER)
    run = start_run(agent, "你好", conversation_create(agent=agent, end_user="u1"))

    with CaptureQueriesContext(connection) as queries:
        advance(run)

    statements = [query["sql"] for query in queries]
    assert not [sql for sql in statements if "memory_" in sql]
    # No read of the conversation's end user either: the step reads what it always read.
    assert not [sql for sql in statements if sql.startswith('SELECT "conversations_conversation"')]
    assert extractions == []
