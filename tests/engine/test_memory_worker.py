"""Long-term memory through the real queue: a run completes, the worker extracts what the end
user said, and a run in a new conversation of the same end user is shown it."""

import json

import pytest

from conversations.models import LLMCall, RunStatus
from conversations.services import conversation_create
from engine.admission import message_post
from engine.memory import MEMORY_CLOSE, MEMORY_HEADING, MEMORY_OPEN
from memory.models import Memory, MemoryUse
from tests.support.factories import make_user
from tests.support.llm import agent_on, assert_totals_match_calls
from tests.support.waits import wait_for

pytestmark = pytest.mark.e2e

SCRIPT = {
    "scenarios": [
        {"match": "我在成都", "steps": [{"content": "好的。"}]},
        {"match": "天气", "recall": "住在(?P<city>\\S+)", "steps": [{"content": "{city}明天晴。"}]},
        {"match": "天气", "steps": [{"content": "你在哪个城市？"}]},
    ],
    "memory_extraction": {
        "content": json.dumps({"changes": [{"action": "add", "kind": "fact", "statement": "住在成都"}]}),
    },
}


def _ended(run):
    return wait_for(
        lambda: run.__class__.objects.filter(pk=run.pk, status=RunStatus.COMPLETED).first(),
        timeout=60,
        message=f"run {run.pk} to complete",
    )


def test_a_new_conversation_of_the_end_user_is_shown_what_the_last_one_told(worker, fake_llm):
    agent = agent_on(fake_llm, SCRIPT, tools=[], memory_enabled=True)
    owner = make_user()
    told = message_post(conversation=conversation_create(agent=agent, owner=owner, end_user="u1"), content="我在成都")
    _ended(told)
    # The extraction follows the run's end on the maintenance queue.
    memory = wait_for(lambda: Memory.objects.filter(end_user="u1").first(), timeout=60, message="the memory")
    assert (memory.statement, memory.source_run_id, memory.owner_id) == ("住在成都", told.pk, owner.pk)
    assert LLMCall.objects.get(run=told, purpose="memory").status == "succeeded"
    assert_totals_match_calls(told)

    asked = message_post(
        conversation=conversation_create(agent=agent, owner=owner, end_user="u1"), content="明天天气如何？"
    )
    _ended(asked)

    answer = asked.messages.filter(role="assistant").order_by("-order").first()
    assert answer.content == "成都明天晴。"
    assert list(MemoryUse.objects.filter(run=asked).values_list("memory_id", flat=True)) == [memory.pk]
    [request] = [
        body
        for body in fake_llm.requests(agent.model_config.model)
        if body["messages"][-1]["content"].endswith("明天天气如何？")
    ]
    # The block opens the user's message: user and assistant turns still alternate.
    assert request["messages"][1:] == [
        {
            "role": "user",
            "content": f'{MEMORY_OPEN}\n{MEMORY_HEADING}\n- fact: "住在成都"\n{MEMORY_CLOSE}\n\n明天天气如何？',
        }
    ]
