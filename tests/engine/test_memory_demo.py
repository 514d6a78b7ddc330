"""The demo's memory scene (`agentry_demo --memory`), end to end: the real queue and worker, the
fake model's demo script answering both the runs and their memory extractions. One end user
says where they live; a new conversation asks the weather and gets it for that city without being
asked where; they move, and the next answer is for the new city."""

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from agents.models import Agent
from agents.snapshot import snapshot_build
from conversations.models import LLMCall, Run, RunStatus, ToolInvocation
from conversations.selectors import run_final_answer
from demo.memory import MEMORY_END_USER, MEMORY_QUESTIONS, memory_demo_fresh_start
from demo.seed import DEMO_MEMORY_AGENT, DEMO_TOOLS, demo_memory_seed, demo_seed
from engine.memory import MEMORY_CLOSE, MEMORY_HEADING, MEMORY_OPEN
from memory.models import Memory, MemoryChange, MemoryUse
from memory.services import memory_scope

UNREACHABLE = "http://127.0.0.1:9/v1"


def _weather_cities(run: Run) -> list[str]:
    calls = ToolInvocation.objects.filter(run=run, tool_name="mojitianqi-DayWeather")
    return [call.arguments["city"] for call in calls]


def _asks(body: dict, question: str) -> bool:
    last = body["messages"][-1]
    return last["role"] == "user" and (last["content"] == question or last["content"].endswith("\n\n" + question))


def _shown(body: dict) -> str | None:
    """The memory block of a request: it opens the first user message."""
    first_user = next(m for m in body["messages"] if m["role"] == "user")
    block, close, _ = first_user["content"].partition(MEMORY_CLOSE)
    return block + close if block.startswith(MEMORY_OPEN) and close else None


@pytest.mark.e2e
def test_the_memory_scene_remembers_where_the_end_user_lives(worker, fake_llm):
    out = io.StringIO()
    call_command("agentry_demo", memory=True, llm_base_url=fake_llm.api_base, timeout=90, stdout=out)
    printed = out.getvalue()
    runs = list(Run.objects.filter(agent__slug=DEMO_MEMORY_AGENT).order_by("created_at"))
    assert len(runs) == len(MEMORY_QUESTIONS)
    told, asked, moved, asked_again = runs
    for run in runs:
        assert run.status == RunStatus.COMPLETED, run.error
        assert run.conversation.end_user == MEMORY_END_USER
    assert len({run.conversation_id for run in runs}) == 4

    # 1. Told: the extraction after the run (a model call of purpose memory) added the city.
    extraction = LLMCall.objects.get(run=told, purpose=LLMCall.Purpose.MEMORY)
    assert extraction.status == LLMCall.Status.SUCCEEDED
    added = MemoryChange.objects.get(run=told)
    assert (added.action, added.source, added.after) == ("add", "extraction", "住在成都")
    assert added.llm_call_id == extraction.pk
    assert _weather_cities(told) == []

    # 2. A new conversation: shown that memory, the model asked the weather of 成都 without asking where.
    first_call = LLMCall.objects.filter(run=asked, purpose=LLMCall.Purpose.STEP).order_by("iteration").first()
    # (The memory row was updated in place since: its id is what the call was shown.)
    assert [use.memory_id for use in MemoryUse.objects.filter(llm_call=first_call)] == [added.memory_id]
    shown = [_shown(body) for body in fake_llm.requests("demo") if _asks(body, "明天天气如何？")]
    assert shown[0] == f'{MEMORY_OPEN}\n{MEMORY_HEADING}\n- fact: "住在成都"\n{MEMORY_CLOSE}'
    assert _weather_cities(asked) == ["成都市"]
    assert run_final_answer(run=asked).content.startswith("您之前说过住在成都。明天")
    assert not MemoryChange.objects.filter(run=asked).exists()

    # 3. Moved: the same memory updated, not a second one added.
    updated = MemoryChange.objects.get(run=moved)
    assert (updated.action, updated.before, updated.after) == ("update", "住在成都", "住在重庆")
    assert updated.memory_id == added.memory_id

    # 4. The next answer uses the new city.
    assert _weather_cities(asked_again) == ["重庆市"]
    assert shown[-1].endswith(f'\n- fact: "住在重庆"\n{MEMORY_CLOSE}')
    assert "重庆" in run_final_answer(run=asked_again).content
    (memory,) = Memory.objects.filter(end_user=MEMORY_END_USER)
    assert (memory.statement, memory.source_run_id) == ("住在重庆", moved.pk)

    # What the command printed shows it, scene by scene.
    assert f"用户 {MEMORY_END_USER}（新对话）: 我在成都" in printed
    assert "memory added: fact “住在成都”" in printed
    # Each conversation after the first was shown what was held when it began.
    shown_lines = [line.strip() for line in printed.splitlines() if "memories shown" in line]
    assert shown_lines == ["memories shown: 住在成都", "memories shown: 住在成都", "memories shown: 住在重庆"]
    assert 'tool mojitianqi-DayWeather succeeded args {"city":"成都市"' in printed
    assert "memory updated: “住在成都” → “住在重庆”" in printed
    assert 'tool mojitianqi-DayWeather succeeded args {"city":"重庆市"' in printed
    assert "(memory) succeeded stop" in printed


@pytest.mark.django_db
def test_the_memory_agent_is_seed_000s_agent_with_memory_on_beside_it():
    plain = demo_seed(llm_base_url=UNREACHABLE)
    agent = demo_memory_seed(llm_base_url=UNREACHABLE)
    assert agent.pk != plain.pk and agent.model_config_id == plain.model_config_id
    assert agent.system_prompt == plain.system_prompt
    assert sorted(agent.tools.values_list("name", flat=True)) == sorted(DEMO_TOOLS)
    assert snapshot_build(agent=agent)["memory"] == {
        "space": "",
        "kinds": ["fact", "preference", "event", "instruction"],
        "shown": 5,
        "ttl_days": 90,
    }
    # Seed 000's own agent keeps no memory: its versions and eval suite are as they were.
    assert "memory" not in snapshot_build(agent=plain)


@pytest.mark.django_db
def test_seeding_again_keeps_an_operators_edits_and_reset_undoes_them():
    agent = demo_memory_seed(llm_base_url=UNREACHABLE)
    Agent.objects.filter(pk=agent.pk).update(memory_shown=2, memory_enabled=False)
    demo_memory_seed(llm_base_url=UNREACHABLE)
    agent.refresh_from_db()
    assert (agent.memory_shown, agent.memory_enabled) == (2, False)
    demo_memory_seed(llm_base_url=UNREACHABLE, reset=True)
    agent.refresh_from_db()
    assert (agent.memory_shown, agent.memory_enabled) == (5, True)


@pytest.mark.django_db
def test_a_fresh_start_deletes_what_an_earlier_showing_left_with_an_audit_row():
    agent = demo_memory_seed(llm_base_url=UNREACHABLE)
    scope = memory_scope(snapshot_build(agent=agent))
    Memory.objects.create(scope=scope, end_user=MEMORY_END_USER, kind="fact", statement="住在重庆")
    other = Memory.objects.create(scope=scope, end_user="someone-else", kind="fact", statement="住在北京")

    assert memory_demo_fresh_start(agent=agent, end_user=MEMORY_END_USER) == 1
    assert list(Memory.objects.all()) == [other]
    change = MemoryChange.objects.get(end_user=MEMORY_END_USER)
    assert (change.action, change.before, change.source) == ("delete", "住在重庆", "operator")
    assert memory_demo_fresh_start(agent=agent, end_user=MEMORY_END_USER) == 0


@pytest.mark.django_db
@pytest.mark.parametrize("end_user", ["", "   ", "demo\nuser", "u" * 201])
def test_the_memory_scene_refuses_a_blank_or_invalid_end_user(end_user):
    # Memory is per end user: a conversation without one would remember nothing.
    with pytest.raises(CommandError, match="--end-user"):
        call_command("agentry_demo", memory=True, end_user=end_user, llm_base_url=UNREACHABLE, stdout=io.StringIO())
    assert not Run.objects.exists()
