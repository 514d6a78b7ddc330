"""Seed 000's three conversations, end to end: real queue, real worker, real provider code."""

import pytest

from agents.models import ModelConfig
from conversations.models import LLMCall, Message, Run, ToolInvocation
from conversations.services import conversation_create
from demo.seed import demo_seed
from engine.admission import message_post
from tests.support.waits import wait_for

pytestmark = pytest.mark.e2e

ROUTE_QUESTION = (
    "我在{city}南站，明天要去{city}动物园。如果明天下雨，请帮我规划一下驾驶路线。如果明天不下雨，给我规划一下骑行路线。"
)


def _finish(run: Run, timeout: float = 30) -> Run:
    return wait_for(
        lambda: Run.objects.filter(pk=run.pk, status="completed").first() or _fail_fast(run),
        timeout=timeout,
        message=f"run {run.pk} to complete",
    )


def _fail_fast(run: Run):
    run.refresh_from_db()
    assert run.status not in ("failed", "cancelled", "expired"), f"run ended {run.status}: {run.error}"
    return None


def _usage_sum(run: Run) -> dict:
    totals = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    for call in LLMCall.objects.filter(run=run):
        for key in totals:
            totals[key] += call.response["usage"][key]
    return totals


@pytest.fixture(params=[True, False], ids=["streamed", "plain"])
def demo_agent(request, worker, fake_llm):
    return demo_seed(llm_base_url=fake_llm.api_base, stream=request.param)


def test_who_are_you_needs_no_tool(demo_agent):
    conversation = conversation_create(agent=demo_agent)
    run = _finish(message_post(conversation=conversation, content="你是谁？"))

    assert run.stop_reason == "final_answer"
    assert LLMCall.objects.filter(run=run).count() == 1
    assert ToolInvocation.objects.filter(run=run).count() == 0
    answer = Message.objects.get(run=run, role="assistant")
    assert answer.content == "我是强子开发的智能客服，能够为您提供信息咨询、问题解答等服务。"
    # Seed 000's usage numbers, as the fake server reported them.
    assert (run.prompt_tokens, run.completion_tokens, run.total_tokens) == (868, 21, 889)
    assert run.iterations == 1 and run.duration_ms is not None


def test_weather_question_calls_one_tool_with_history(demo_agent, fake_llm):
    conversation = conversation_create(agent=demo_agent)
    _finish(message_post(conversation=conversation, content="你是谁？"))
    run = _finish(message_post(conversation=conversation, content="我在成都，明天天气如何？"))

    calls = list(LLMCall.objects.filter(run=run).order_by("iteration"))
    assert len(calls) == 2 and all(c.status == "succeeded" for c in calls)
    [invocation] = ToolInvocation.objects.filter(run=run)
    assert invocation.tool_name == "mojitianqi-DayWeather"
    assert invocation.arguments["city"] == "成都市"
    assert invocation.arguments["start_time"] == invocation.arguments["end_time"]
    assert '"condition":"多云"' in invocation.result
    # The first call of the second run carries the first exchange as context, system first.
    sent = calls[0].request["messages"]
    assert sent[0]["role"] == "system" and sent[0]["content"].startswith("今天是 ")
    assert [m["role"] for m in sent[1:]] == ["user", "assistant", "user"]
    # The second call carries the tool call and its result.
    assert [m["role"] for m in calls[1].request["messages"][-2:]] == ["assistant", "tool"]
    answer = Message.objects.filter(run=run, role="assistant").order_by("-order").first()
    assert "多云" in answer.content
    assert {k: getattr(run, k) for k in ("prompt_tokens", "completion_tokens", "total_tokens")} == _usage_sum(run)


@pytest.mark.parametrize(
    "city,route_tool,mode",
    [
        ("成都", "gaodedetu-plan_bicycle", "bicycle"),
        ("重庆", "gaodedetu-plan_driving", "driving"),
    ],
)
def test_route_tool_follows_the_weather(demo_agent, city, route_tool, mode):
    conversation = conversation_create(agent=demo_agent)
    run = _finish(message_post(conversation=conversation, content=ROUTE_QUESTION.format(city=city)))

    assert LLMCall.objects.filter(run=run).count() == 3
    invocations = list(ToolInvocation.objects.filter(run=run).order_by("created_at"))
    assert [i.tool_name for i in invocations] == ["mojitianqi-DayWeather", route_tool]
    assert invocations[1].arguments == {"origin": f"{city}南站", "destination": f"{city}动物园"}
    assert f'"mode":"{mode}"' in invocations[1].result
    assert all(i.status == "succeeded" and i.idempotency_key == f"{run.pk}:{i.tool_call_id}" for i in invocations)
    assert {k: getattr(run, k) for k in ("prompt_tokens", "completion_tokens", "total_tokens")} == _usage_sum(run)
    # Cost follows the model config's prices per million tokens.
    model = ModelConfig.objects.get(name="demo")
    expected = (
        run.prompt_tokens * model.price_input_per_million + run.completion_tokens * model.price_output_per_million
    ) / 1_000_000
    assert run.cost == pytest.approx(expected)
    events = list(run.events.values_list("type", flat=True))
    assert events[0] == "run.queued" and events[-1] == "run.completed"
    assert events.count("tool.completed") == 2
