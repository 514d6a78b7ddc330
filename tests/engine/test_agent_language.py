"""What the engine itself tells a user (why a run stopped) is in the agent's language, whatever
language the process that takes the step is in, and a run keeps its version's language."""

import pytest
from django.utils import translation

from agents.models import Agent
from tests.support.runs import advance, last_answer, start_run

pytestmark = pytest.mark.django_db


def call(name, arguments):
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def script(*steps):
    return {"scenarios": [{"match": ".", "steps": list(steps)}]}


@pytest.mark.parametrize(
    ("language", "worker_language", "expected"),
    [
        ("zh-hans", "en", "这个任务需要超过 2 次模型调用"),
        ("en", "zh-hans", "this task needed more than 2 model steps"),
    ],
)
def test_max_iterations_message_is_in_the_agents_language(scripted_agent, language, worker_language, expected):
    agent = scripted_agent(
        script(call("test-echo", {"text": "a"})),
        tools=["test-echo"],
        max_iterations=2,
        max_same_tool_streak=10,
        language=language,
    )
    with translation.override(worker_language):
        run = advance(start_run(agent))
    assert (run.status, run.stop_reason) == ("completed", "max_iterations")
    assert expected in last_answer(run)


def test_tool_loop_message_in_chinese_names_the_tool(scripted_agent):
    agent = scripted_agent(
        script(call("test-echo", {"text": "again"})),
        tools=["test-echo"],
        max_iterations=20,
        max_same_tool_streak=3,
        language="zh-hans",
    )
    run = advance(start_run(agent))
    assert run.stop_reason == "tool_loop"
    assert last_answer(run).startswith("我在这里停下了：我反复调用工具 test-echo，却没有更接近答案。")


def test_a_run_speaks_the_language_of_its_version(scripted_agent):
    """The agent switched to Chinese after the run was posted: the run is pinned to the English
    version, so its explanation stays English."""
    agent = scripted_agent(
        script(call("test-echo", {"text": "a"})), tools=["test-echo"], max_iterations=1, max_same_tool_streak=10
    )
    run = start_run(agent)
    Agent.objects.filter(pk=agent.pk).update(language="zh-hans")
    run = advance(run)
    assert "more than 1 model steps" in last_answer(run)
    assert "模型调用" not in last_answer(run)
