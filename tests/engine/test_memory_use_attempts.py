"""The ledger says what the model saw on every attempt: each attempt of a step shown memories has
its MemoryUse rows, written with the row that records it started, so one that failed (a provider
error) says what it was sent as well as one that was answered."""

from conversations.models import LLMCall
from conversations.services import conversation_create
from engine.memory import memories_shown
from memory.models import MemoryUse
from tests.engine.test_memory_recall import extractions, remembered  # noqa: F401 (a fixture)
from tests.support.factories import make_user
from tests.support.runs import advance, start_run


def _uses(run) -> dict[int, list[int]]:
    """Each call's memories, by rank."""
    uses = {}
    for use in MemoryUse.objects.filter(run=run).order_by("llm_call_id", "rank"):
        uses.setdefault(use.llm_call_id, []).append(use.memory_id)
    return uses


def test_a_step_shown_memories_that_failed_records_what_it_was_shown(scripted_agent, fake_llm, extractions):
    agent = scripted_agent({"scenarios": [{"match": ".", "steps": [{"fault": {"status": 400}}]}]}, memory_enabled=True)
    owner = make_user()
    city, cat = remembered(agent, owner, "u1", "住在成都", "喜欢猫")

    run = advance(start_run(agent, "成都明天天气如何？", conversation_create(agent=agent, owner=owner, end_user="u1")))

    assert run.status == "failed"
    [call] = LLMCall.objects.filter(run=run, purpose="step")
    assert call.status == "failed" and call.http_status == 400
    assert _uses(run) == {call.pk: [city.pk, cat.pk]}


def test_every_attempt_of_a_retried_step_records_the_same_memories(scripted_agent, fake_llm, extractions):
    agent = scripted_agent(
        {"scenarios": [{"match": ".", "steps": [{"content": "明天成都晴。", "fault": {"status": 500, "times": 1}}]}]},
        memory_enabled=True,
    )
    owner = make_user()
    [city] = remembered(agent, owner, "u1", "住在成都")

    run = advance(start_run(agent, "成都明天天气如何？", conversation_create(agent=agent, owner=owner, end_user="u1")))

    assert run.status == "completed"
    failed, answered = LLMCall.objects.filter(run=run, purpose="step").order_by("attempt")
    assert (failed.status, answered.status) == ("failed", "succeeded")
    assert _uses(run) == {failed.pk: [city.pk], answered.pk: [city.pk]}
    assert [memory.pk for memory in memories_shown(run_id=run.pk)] == [city.pk]
