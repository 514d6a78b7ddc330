"""The seed 000 demo when a person edits or rejects its tool calls: the run still ends with an
answer that reads as a sentence and says what happened, and the terminal commands show the
decision and wait through it."""

import json

import pytest

from agents.models import AgentTool
from conversations.models import Approval, Run, ToolInvocation
from conversations.services import conversation_create
from demo.cli import format_run, pending_approvals, run_wait
from demo.seed import demo_seed
from engine.approvals import approval_decide
from tests.support.runs import advance, last_answer, start_run

WEATHER = "我在成都，明天天气如何？"
TRIP = "我在成都南站，明天要去成都动物园。如果明天下雨，请帮我规划一下驾驶路线。如果明天不下雨，给我规划一下骑行路线。"
# The placeholders of the demo's answers, left empty, read like this.
EMPTY_VALUES = ("为，", "气温 ℃", "到 ℃", "湿度 %", "约  米", "（，")


@pytest.fixture
def demo_agent(fake_llm, db, enqueued):
    agent = demo_seed(llm_base_url=fake_llm.api_base, stream=False)
    AgentTool.objects.filter(agent=agent).update(approval=AgentTool.Approval.ALWAYS)
    return agent


def _parked(agent, question: str) -> Run:
    run = advance(start_run(agent, question, conversation_create(agent=agent)))
    assert run.status == "awaiting_approval"
    return run


def _decide(run: Run, user, **decision) -> Run:
    approval = Approval.objects.get(run=run, status=Approval.Status.PENDING)
    approval_decide(approval_id=approval.pk, user=user, channel=Approval.Channel.PAGE, **decision)
    return advance(run)


def _readable(answer: str) -> str:
    assert not any(gap in answer for gap in EMPTY_VALUES), answer
    assert "{" not in answer, answer
    return answer


def test_a_rejected_weather_call_is_answered_with_the_reason(demo_agent, approver):
    run = _decide(_parked(demo_agent, WEATHER), approver, decision="reject", reason="今天不查天气")

    assert (run.status, run.stop_reason) == ("completed", "final_answer")
    assert (
        _readable(last_answer(run))
        == "抱歉，查询成都明天天气的请求没有通过审核（理由：今天不查天气），所以我没能查到天气。"
    )
    printed = format_run(run)
    assert "mojitianqi-DayWeather rejected" in printed and "[rejected by approver: 今天不查天气]" in printed
    assert printed.endswith("answer: " + last_answer(run))


def test_an_edited_weather_call_is_answered_for_the_city_it_ran_with(demo_agent, approver):
    run = _parked(demo_agent, WEATHER)
    asked = ToolInvocation.objects.get(run=run).arguments
    edited = {**asked, "city": "北京市"}
    run = _decide(run, approver, decision="approve", arguments=edited)

    answer = _readable(last_answer(run))
    # 北京 is sunny in the demo's weather service, 成都 cloudy.
    assert answer.startswith(f"审核人修改了查询条件，以下按修改后的条件作答：北京市（{asked['start_time']}）的天气为晴")
    assert "气温 -3℃到 8℃" in answer and "成都" not in answer
    # The model's own arguments stay on the invocation; the printout shows what it ran with.
    assert ToolInvocation.objects.get(run=run).arguments == asked
    assert f"[edited by approver to {json.dumps(edited, ensure_ascii=False)}]" in format_run(run)


def test_a_trip_with_a_rejected_route_still_reports_the_weather(demo_agent, approver):
    run = _decide(_parked(demo_agent, TRIP), approver, decision="approve")
    assert run.status == "awaiting_approval"
    run = _decide(run, approver, decision="reject", reason="不许出门")

    assert _readable(last_answer(run)).endswith(
        "不过规划路线的请求没有通过审核（理由：不许出门），所以这次没有给出路线。"
    )
    assert "成都市的天气为多云" in last_answer(run)


def test_a_trip_with_an_edited_route_names_the_places_it_ran_with(demo_agent, approver):
    run = _decide(_parked(demo_agent, TRIP), approver, decision="approve")
    run = _decide(run, approver, decision="approve", arguments={"origin": "成都东站", "destination": "成都动物园"})

    answer = _readable(last_answer(run))
    assert "以下是为您规划的骑行路线：从成都东站到成都动物园" in answer
    assert "从成都东站出发" in answer  # the route's own steps, for the edited origin


def test_a_trip_whose_weather_call_was_rejected_plans_no_route(demo_agent, approver):
    run = _decide(_parked(demo_agent, TRIP), approver, decision="reject")

    assert run.status == "completed"
    assert ToolInvocation.objects.filter(run=run).count() == 1
    assert "没有规划路线" in _readable(last_answer(run))


def test_the_commands_wait_through_an_approval_and_print_the_outcome(demo_agent, approver, settings):
    settings.AGENTRY_PUBLIC_URL = "https://agentry.example.com"
    run = _parked(demo_agent, WEATHER)
    approval = Approval.objects.get(run=run)
    reported = []

    def decide_now(parked: Run) -> None:
        # What the commands print while a person decides elsewhere; here the person is quick.
        reported.extend(pending_approvals(parked))
        _decide(parked, approver, decision="reject", reason="不查")

    assert "answer: (none yet: the run waits for an approval)" in format_run(run)
    assert run_wait(run_id=run.pk, timeout=30, poll=0.01).status == "awaiting_approval"
    ended = run_wait(run_id=run.pk, timeout=30, poll=0.01, on_park=decide_now)

    assert ended.status == "completed"
    assert reported == [
        f"  waiting for approval {approval.pk}: mojitianqi-DayWeather "
        f"{json.dumps(approval.arguments, ensure_ascii=False)} (run {run.pk})",
        f"    decide at https://agentry.example.com/approvals/{approval.pk}/ "
        "(queue: https://agentry.example.com/approvals/), "
        f"or POST https://agentry.example.com/api/v1/approvals/{approval.pk}/decision/",
    ]
