"""Memory extraction after a run completes: one model call of purpose `memory` (scripted here,
malformed answers included), consolidated into the end user's memories with an audit row per
change; a bad answer is a recorded failure that changes nothing; a second delivery does nothing."""

import json

import pytest

from conversations.models import LLMCall, RunEvent
from conversations.services import conversation_create
from engine.memory import MEMORY_EXTRACTION_PROMPT, memory_extract
from engine.tasks import memory_extract_task
from memory.models import Memory, MemoryChange
from tests.engine.test_memory_recall import extractions, remembered  # noqa: F401 (a fixture)
from tests.support.factories import make_user
from tests.support.llm import assert_totals_match_calls
from tests.support.runs import advance, start_run


def _script(extraction: dict | str) -> dict:
    content = extraction if isinstance(extraction, str) else json.dumps(extraction, ensure_ascii=False)
    return {
        "scenarios": [{"match": ".", "steps": [{"content": "好的，记住了。"}]}],
        "memory_extraction": {"content": content},
    }


def _completed(scripted_agent, script: dict, content: str, *, held=(), **fields):
    """A completed run of an agent with memory, in a conversation of end user u1, and its owner."""
    agent = scripted_agent(script, memory_enabled=True, **fields)
    owner = make_user()
    memories = remembered(agent, owner, "u1", *held)
    conversation = conversation_create(agent=agent, owner=owner, end_user="u1")
    run = advance(start_run(agent, content, conversation))
    assert run.status == "completed"
    return agent, run, memories


def _statements(end_user: str = "u1") -> list[str]:
    return sorted(Memory.objects.filter(end_user=end_user).values_list("statement", flat=True))


def test_an_extraction_adds_what_the_user_said_and_is_audited(scripted_agent, fake_llm, extractions):
    script = _script({"changes": [{"action": "add", "kind": "fact", "statement": "住在成都"}]})
    agent, run, _ = _completed(scripted_agent, script, "我在成都")
    assert extractions == [str(run.pk)]

    memory_extract_task(str(run.pk))

    [memory] = Memory.objects.filter(end_user="u1")
    assert (memory.statement, memory.kind, memory.scope) == ("住在成都", "fact", f"agent:{agent.pk}")
    assert memory.source_run_id == run.pk and memory.source_message.content == "我在成都"
    [call] = LLMCall.objects.filter(run=run, purpose="memory")
    assert call.status == "succeeded" and call.iteration == run.iterations
    [change] = MemoryChange.objects.filter(end_user="u1")
    assert (change.action, change.source, change.run_id, change.llm_call_id) == ("add", "extraction", run.pk, call.pk)
    # The request: the contract's prompt, the kinds, what is held and the run's turns.
    request = fake_llm.requests(agent.model_config.model)[-1]["messages"]
    assert request[0] == {"role": "system", "content": MEMORY_EXTRACTION_PROMPT}
    assert request[0]["content"].startswith("[memory-extraction]\n")
    sent = json.loads(request[1]["content"])
    assert sent == {
        "kinds": ["fact", "preference", "event", "instruction"],
        "held": [],
        "conversation": [
            {"role": "user", "content": "我在成都"},
            {"role": "assistant", "content": "好的，记住了。"},
        ],
    }
    # Its tokens and cost count on the run, like every other call of it.
    assert call.total_tokens > 0
    assert_totals_match_calls(run)


def test_an_extraction_updates_and_deletes_held_memories(scripted_agent, fake_llm, extractions):
    agent = scripted_agent(_script({"changes": []}), memory_enabled=True)
    owner = make_user()
    city, cat = remembered(agent, owner, "u1", "住在成都", "喜欢猫")
    fake_llm.script(
        agent.model_config.model,
        _script(
            {
                "changes": [
                    {"action": "update", "id": str(city.pk), "kind": "fact", "statement": "住在重庆"},
                    {"action": "delete", "id": str(cat.pk)},
                ]
            }
        ),
    )
    run = advance(
        start_run(agent, "我搬到重庆了，也不再养猫", conversation_create(agent=agent, owner=owner, end_user="u1"))
    )

    changes = memory_extract(run_id=run.pk)

    assert _statements() == ["住在重庆"]
    assert Memory.objects.get(pk=city.pk).statement == "住在重庆"
    assert sorted((c.action, c.before, c.after) for c in changes) == [
        ("delete", "喜欢猫", ""),
        ("update", "住在成都", "住在重庆"),
    ]
    sent = json.loads(fake_llm.requests(agent.model_config.model)[-1]["messages"][1]["content"])
    assert sent["held"] == [
        {"id": str(cat.pk), "kind": "fact", "statement": "喜欢猫"},
        {"id": str(city.pk), "kind": "fact", "statement": "住在成都"},
    ]


@pytest.mark.parametrize(
    "answer, reason",
    [
        (
            "好的，我记住了你住在成都。",
            'malformed memory extraction: the answer holds no JSON object {"changes": [...]}',
        ),
        ('{"memories": ["住在成都"]}', "malformed memory extraction"),
        ('{"changes": [{"action": "add", "statement": "住在成都"}]}', "malformed memory extraction: change 1"),
        ('{"changes": [{"action": "forget", "id": "x"}]}', "malformed memory extraction: change 1"),
        ('{"changes": [{"action": "add", "kind": "fact", "statement": 42}]}', "malformed memory extraction"),
        # Well formed, but the consolidation refuses it whole: an id that is not held.
        (
            '{"changes": [{"action": "add", "kind": "fact", "statement": "住在重庆"}, '
            '{"action": "delete", "id": "7b0c3bb5-8fd4-4d4a-9d43-2b63c3fb9f43"}]}',
            "memory extraction refused",
        ),
    ],
)
def test_a_bad_extraction_is_a_recorded_failure_and_changes_nothing(
    scripted_agent, fake_llm, extractions, answer, reason
):
    agent, run, held = _completed(scripted_agent, _script(answer), "我搬到重庆了", held=["住在成都"])

    assert memory_extract(run_id=run.pk) is None

    assert _statements() == ["住在成都"]
    assert Memory.objects.get(pk=held[0].pk).updated_at == held[0].updated_at
    assert not MemoryChange.objects.filter(end_user="u1", source="extraction").exists()
    [call] = LLMCall.objects.filter(run=run, purpose="memory")
    assert call.status == "failed" and call.error.startswith(reason), call.error
    # The call still cost what it cost.
    assert_totals_match_calls(run)


def test_a_fenced_answer_is_read_and_a_second_delivery_does_nothing(scripted_agent, fake_llm, extractions):
    fenced = '```json\n{"changes": [{"action": "add", "kind": "preference", "statement": "喜欢猫"}]}\n```'
    agent, run, _ = _completed(scripted_agent, _script(fenced), "我喜欢猫")

    assert len(memory_extract(run_id=run.pk)) == 1
    events = RunEvent.objects.filter(run=run).count()
    assert memory_extract(run_id=run.pk) is None
    memory_extract_task(str(run.pk))

    assert _statements() == ["喜欢猫"]
    assert LLMCall.objects.filter(run=run, purpose="memory").count() == 1
    assert RunEvent.objects.filter(run=run).count() == events


def test_kinds_the_agent_does_not_keep_are_refused(scripted_agent, fake_llm, extractions):
    script = _script({"changes": [{"action": "add", "kind": "preference", "statement": "喜欢猫"}]})
    agent, run, _ = _completed(scripted_agent, script, "我喜欢猫", memory_kinds=["fact"])

    assert memory_extract(run_id=run.pk) is None

    assert _statements() == []
    sent = json.loads(fake_llm.requests(agent.model_config.model)[-1]["messages"][1]["content"])
    assert sent["kinds"] == ["fact"]
    assert LLMCall.objects.get(run=run, purpose="memory").error.startswith("memory extraction refused")


def test_runs_without_memory_an_end_user_or_completion_are_not_extracted(scripted_agent, fake_llm, extractions):
    script = _script({"changes": [{"action": "add", "kind": "fact", "statement": "住在成都"}]})
    plain = scripted_agent(script)
    without_memory = advance(start_run(plain, "我在成都", conversation_create(agent=plain, end_user="u1")))
    agent = scripted_agent(script, memory_enabled=True)
    anonymous = advance(start_run(agent, "我在成都", conversation_create(agent=agent)))
    failing = scripted_agent(
        {"scenarios": [{"match": ".", "steps": [{"fault": {"status": 400}}]}]}, memory_enabled=True
    )
    failed = advance(start_run(failing, "我在成都", conversation_create(agent=failing, end_user="u1")))
    assert failed.status == "failed"

    for run in (without_memory, anonymous, failed):
        assert memory_extract(run_id=run.pk) is None
        assert not LLMCall.objects.filter(run=run, purpose="memory").exists()
    assert not Memory.objects.exists()
    # Only the completed run of a version with memory is sent for extraction.
    assert extractions == [str(anonymous.pk)]


def test_an_end_user_forgotten_while_the_extraction_runs_is_not_remembered(scripted_agent, fake_llm, extractions):
    """The extraction answers after the person was forgotten: it writes no memory, and its call
    keeps its accounting but not what it read or said."""
    from threading import Thread

    from django.db import connection

    from conversations.end_users import EndUser
    from memory.forget import ERASED, end_user_forget

    def extract():
        try:
            memory_extract_task(str(run.pk))
        finally:
            connection.close()  # this thread's own connection

    with fake_llm.held() as held:
        extraction = {"changes": [{"action": "add", "kind": "fact", "statement": "住在成都"}]}
        script = _script(extraction)
        script["memory_extraction"]["hold"] = held.label
        agent, run, _ = _completed(scripted_agent, script, "我在成都")
        extracting = Thread(target=extract)
        extracting.start()
        held.wait_arrived()
        end_user_forget(person=EndUser(run.conversation.owner_id, "u1"), requested_by=None, channel="api")
        held.release()
        extracting.join(timeout=30)
    assert not extracting.is_alive()
    assert not Memory.objects.exists() and not MemoryChange.objects.exists()
    [call] = LLMCall.objects.filter(run=run, purpose="memory")
    assert (call.request, call.response, call.status) == (ERASED, ERASED, "failed")
    assert call.total_tokens > 0
    assert_totals_match_calls(run)
