"""A worker SIGKILLed while its memory extraction waits on the model: the call does not stay
started, and the extraction is made again by a live worker, so the memory is written."""

import json

import pytest

from conversations.models import LLMCall, RunStatus
from conversations.services import conversation_create
from engine.admission import message_post
from engine.model_call import INTERRUPTED
from engine.sweeper import runs_sweep
from memory.models import Memory
from tests.support.factories import make_user
from tests.support.llm import agent_on, assert_totals_match_calls
from tests.support.waits import wait_for

pytestmark = pytest.mark.e2e


def test_an_extraction_whose_worker_is_killed_mid_call_is_closed_and_made_again(worker, fake_llm, settings):
    # What this process's sweeper takes for a call whose worker is gone (twice this, started).
    settings.AGENTRY_MODEL_CALL_MAX_SECONDS = 1
    with fake_llm.held() as held:
        script = {
            "scenarios": [{"match": ".", "steps": [{"content": "好的。"}]}],
            "memory_extraction": {
                "content": json.dumps({"changes": [{"action": "add", "kind": "fact", "statement": "住在成都"}]}),
                "hold": held.label,
            },
        }
        agent = agent_on(fake_llm, script, tools=[], memory_enabled=True)
        conversation = conversation_create(agent=agent, owner=make_user(), end_user="u1")
        run = message_post(conversation=conversation, content="我在成都")
        held.wait_arrived(timeout=60)
        worker.kill()
        assert run.__class__.objects.get(pk=run.pk).status == RunStatus.COMPLETED
        [cut_off] = LLMCall.objects.filter(run=run, purpose="memory")
        assert cut_off.status == "started"
        held.release()  # the next attempt is answered at once
        worker.start()

        def swept():
            runs_sweep()
            return LLMCall.objects.filter(pk=cut_off.pk, status="failed").first()

        closed = wait_for(swept, timeout=30, message="the cut-off extraction call to be closed")
        assert closed.error == INTERRUPTED
        memory = wait_for(lambda: Memory.objects.filter(end_user="u1").first(), timeout=60, message="the memory")

    assert memory.statement == "住在成都"
    calls = list(LLMCall.objects.filter(run=run, purpose="memory").order_by("attempt"))
    assert [call.status for call in calls] == ["failed", "succeeded"]
    assert not LLMCall.objects.filter(run=run, status="started").exists()
    assert_totals_match_calls(run)
