"""The comparison's totals compare like with like: a step one side copied (free there) is left out
on both sides, and the page says which steps the totals cover."""

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from console.monitoring.fork_comparison import fork_comparison
from conversations.models import ForkChange, LLMCall, ToolInvocation
from engine.forks import ForkRequest, run_fork
from tests.support.llm import agent_on
from tests.support.runs import advance, ask

pytestmark = pytest.mark.django_db

SCRIPT = {
    "scenarios": [
        {
            "match": ".",
            "steps": [
                {"tool_calls": [{"name": "test-echo", "arguments": {"text": "alpha"}}]},
                {"tool_calls": [{"name": "test-echo", "arguments": {"text": "beta"}}]},
                {"content": "got {last_tool_result}"},
            ],
        }
    ]
}


def _made(run, step: int) -> LLMCall:
    return LLMCall.objects.get(run=run, iteration=step, purpose="step", copied=False)


def test_an_edited_result_forks_totals_leave_the_copied_step_out_on_both_sides(admin_client, fake_llm, no_enqueue):
    boss = get_user_model().objects.get(username="admin")
    source = ask(agent_on(fake_llm, SCRIPT), "hello")
    edited = ToolInvocation.objects.get(run=source, llm_call__iteration=2)
    fork = advance(
        run_fork(
            source=source,
            request=ForkRequest(step=2, change=ForkChange.TOOL_RESULT, tool_call_id=edited.tool_call_id, result="X"),
            user=boss,
        )
    )
    assert fork.status == "completed", fork.error

    comparison = fork_comparison(fork)
    # The fork's step 2 was copied (no call made, no cost): only step 3 is made by both.
    assert comparison["copied_steps"] == [2] and comparison["compared_steps"] == [3]
    assert comparison["source"]["compared"]["tokens"] == _made(source, 3).total_tokens
    assert comparison["fork"]["compared"]["tokens"] == _made(fork, 3).total_tokens
    assert comparison["source"]["compared"]["tokens"] < source.total_tokens  # step 2 is not in it

    page = admin_client.get(reverse("monitoring:run-compare", args=[fork.pk])).content.decode()
    assert "Step totals cover steps 3." in page
    assert "Left out on both sides: steps 2, copied (not made again, so free) on one side." in page
    assert "tokens of the steps both made" in page


def test_a_replay_compares_every_step_from_the_fork_point(admin_client, fake_llm, no_enqueue):
    boss = get_user_model().objects.get(username="admin")
    source = ask(agent_on(fake_llm, SCRIPT), "hello")
    fork = advance(run_fork(source=source, request=ForkRequest(step=2), user=boss))
    comparison = fork_comparison(fork)
    assert comparison["copied_steps"] == [] and comparison["compared_steps"] == [2, 3]
    made = _made(source, 2).total_tokens + _made(source, 3).total_tokens
    assert comparison["source"]["compared"]["tokens"] == made
    assert comparison["fork"]["compared"]["tokens"] == _made(fork, 2).total_tokens + _made(fork, 3).total_tokens
