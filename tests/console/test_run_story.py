"""A run's timeline reads as its story: what was asked, what was answered and how it ended come
first, then the steps on a time axis, then one sentence per event (the stored JSON kept behind
a fold); a delegate call takes its delegated run's duration. The try page's poll carries each
tool call's result or error and its approval. The headings and legends are translated."""

import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse
from django.utils import timezone

from console.monitoring.waterfall import run_waterfall
from conversations.batch import run_event_append
from conversations.models import Approval, Message, Run, ToolInvocation
from conversations.monitoring.rollups import rollups_refresh
from tests.support.factories import make_agent
from tests.support.ledger import ledger_call, ledger_run

pytestmark = pytest.mark.django_db


def _weather_run(decider):
    """Asked about Chengdu's weather: model call 1 (0-0.8 s) asks for get_weather, which waits for
    an approval (1-3 s) and runs (3-3.5 s); model call 2 (4-5 s) streams the answer; the run took 10 s."""
    start = timezone.now() - timedelta(minutes=1)
    at = lambda seconds: start + timedelta(seconds=seconds)  # noqa: E731
    run = ledger_run(
        make_agent(name="Weather"),
        created_at=start,
        finished_at=at(10),
        prompt_tokens=150,
        completion_tokens=50,
        total_tokens=200,
        cost="0.0021",
    )
    Message.objects.create(conversation=run.conversation, run=run, order=1, role="user", content="成都天气怎么样?")
    first = ledger_call(run, started_at=at(0), latency_ms=800, prompt_tokens=100, completion_tokens=20)
    first.finished_at = at(0.8)
    first.save()
    invocation = ToolInvocation.objects.create(
        run=run,
        llm_call=first,
        tool_name="get_weather",
        tool_call_id="call_w",
        arguments={"city": "Chengdu"},
        raw_arguments='{"city": "Chengdu"}',
        status="succeeded",
        result='{"sky": "rain", "temp_c": 18}',
        latency_ms=500,
        started_at=at(3),
        finished_at=at(3.5),
    )
    approval = Approval.objects.create(
        invocation=invocation,
        run=run,
        status="approved",
        arguments=invocation.arguments,
        arguments_hash="h",
        decided_by=decider,
        decided_at=at(3),
        channel="page",
    )
    Approval.objects.filter(pk=approval.pk).update(created_at=at(1))
    second = ledger_call(run, started_at=at(4), latency_ms=1000, prompt_tokens=50, completion_tokens=30)
    second.finished_at = at(5)
    second.save()
    Message.objects.create(
        conversation=run.conversation, run=run, order=2, role="assistant", content="成都今天有雨, 18 度。"
    )
    for type, payload in [
        ("run.running", {"worker": "w1@host"}),
        ("llm_call.completed", {"llm_call_id": first.pk, "purpose": "step", "iteration": 1, "attempt": 1,
                                "finish_reason": "tool_calls", "tool_calls": ["get_weather"],
                                "usage": {"total_tokens": 120}, "cost": "0.001", "prices": {}}),
        ("approval.requested", {"approval_id": approval.pk, "tool_invocation_id": invocation.pk,
                                "tool_call_id": "call_w", "tool": "get_weather", "arguments": {"city": "Chengdu"},
                                "arguments_hash": "h", "why": "", "expires_at": None}),
        ("approval.decided", {"approval_id": approval.pk, "tool_invocation_id": invocation.pk,
                              "tool_call_id": "call_w", "tool": "get_weather", "status": "approved",
                              "channel": "page", "decided_by": "oncall", "reason": "", "edited": False}),
        ("tool.started", {"tool_invocation_id": invocation.pk, "tool": "get_weather",
                          "arguments": {"city": "Chengdu"}}),
        ("message.delta", {"llm_call_id": second.pk, "text": "成都今天"}),
        ("message.delta", {"llm_call_id": second.pk, "text": "有雨"}),
        ("run.completed", {"stop_reason": "final_answer"}),
    ]:  # fmt: skip
        run_event_append(run_id=run.pk, type=type, payload=payload)
    return run


def test_the_timeline_opens_with_the_question_the_answer_and_the_outcome(client, staff):
    run = _weather_run(staff)
    page = client.get(reverse("monitoring:run", args=[run.pk])).content.decode()

    summary = page.split('id="run-summary"')[1].split("</section>")[0]
    assert "成都天气怎么样?" in summary and "成都今天有雨, 18 度。" in summary
    assert 'data-status="completed">Completed<' in summary
    assert 'id="run-stop-reason">Final answer<' in summary
    assert 'id="run-tokens">200 ' in summary and 'id="run-cost">0.0021<' in summary
    assert 'id="run-duration">10.0 s<' in summary
    # The story's order: the exchange, the waterfall, the events, then the steps in detail.
    assert page.index('id="run-summary"') < page.index('id="waterfall"') < page.index('id="events"')
    assert page.index('id="events"') < page.index('id="steps"')
    data = client.get(reverse("monitoring:run-json", args=[run.pk])).json()
    assert data["run"]["question"] == "成都天气怎么样?" and data["run"]["answer"] == "成都今天有雨, 18 度。"


def test_a_failed_run_says_it_has_no_answer_and_why(client, staff):
    run = ledger_run(make_agent(), status="failed", stop_reason="provider_error", error="HTTP 502: bad gateway")
    page = client.get(reverse("monitoring:run", args=[run.pk])).content.decode()
    summary = page.split('id="run-summary"')[1].split("</section>")[0]
    assert "(none: the run is failed)" in summary and "HTTP 502: bad gateway" in summary
    assert 'id="run-stop-reason">Provider error<' in summary


def _attribute(html: str, name: str) -> str:
    return html.split(f'{name}="')[1].split('"')[0]


def test_the_waterfall_puts_each_step_at_its_time_from_the_runs_start(client, staff):
    run = _weather_run(staff)
    page = client.get(reverse("monitoring:run", args=[run.pk])).content.decode()
    waterfall = page.split('id="waterfall"')[1].split('id="events"')[0]
    rows = waterfall.split('class="wf-row wf-')[2:]
    bars = [(_attribute(row, "data-kind"), _attribute(row, "<rect x"), _attribute(row, "width")) for row in rows]
    # In tenths of the run's 10 s: call 1 at 0 for 0.8 s, the approval 1-3 s, the tool 3-3.5 s, call 2 4-5 s.
    assert bars == [
        ("llm_call", "0.000000", "8.000000"),
        ("approval", "10.000000", "20.000000"),
        ("tool", "30.000000", "5.000000"),
        ("llm_call", "40.000000", "10.000000"),
    ]
    assert "Model call 1" in waterfall and "Approval of get_weather" in waterfall and "Tool get_weather" in waterfall
    assert "<script" not in waterfall and "style=" not in waterfall


def test_each_event_reads_as_a_sentence_with_its_json_kept_behind_a_fold(client, staff):
    run = _weather_run(staff)
    page = client.get(reverse("monitoring:run", args=[run.pk])).content.decode()
    events = page.split('id="events"')[1].split("</ol>")[0]
    lines = [line.split('class="text">')[1].split("</span>")[0] for line in events.split("<li ")[1:]]
    approval = Approval.objects.get().pk
    assert lines == [
        "Taken by worker w1@host",
        "Model call 1 finished: 120 Token, 800 ms · asks for get_weather",
        f"Approval #{approval} requested for get_weather with {{&quot;city&quot;: &quot;Chengdu&quot;}}",
        f"Approval #{approval} decided: approved by oncall via approval page",
        "Tool get_weather called with {&quot;city&quot;: &quot;Chengdu&quot;}",
        # The two streamed pieces are one line, and both of their events are behind its fold.
        "Model call 2 streamed 2 pieces of text: “成都今天有雨”",
        "Run completed: final answer",
    ]
    delta = events.split('data-type="message.delta"')[1].split("</li>")[0]
    assert "#6–7" in delta and "&quot;text&quot;: &quot;有雨&quot;" in delta and "<details" in delta


def test_a_delegate_call_takes_its_delegated_runs_duration(client, staff):
    now = timezone.now()
    parent = ledger_run(make_agent(name="Planner"), created_at=now - timedelta(seconds=30), finished_at=now)
    call = ledger_call(parent, started_at=now - timedelta(seconds=29))
    invocation = ToolInvocation.objects.create(
        run=parent, llm_call=call, tool_name="ask-researcher", tool_call_id="d1", arguments={"task": "x"},
        status="succeeded", result="done", latency_ms=None, started_at=now - timedelta(seconds=28),
    )  # fmt: skip
    child = ledger_run(
        make_agent(name="Researcher"),
        created_at=now - timedelta(seconds=28),
        finished_at=now - timedelta(seconds=16, milliseconds=500),
        parent_run=parent,
        parent_tool_invocation=invocation,
        depth=1,
    )
    page = client.get(reverse("monitoring:run", args=[parent.pk])).content.decode()
    tool_row = page.split('class="tool-call"')[1].split("</tr>")[0]
    assert '<td class="duration">11.5 s</td>' in tool_row and "– ms" not in tool_row
    assert "Completed · 11.5 s" in tool_row
    waterfall = page.split('id="waterfall"')[1].split('id="events"')[0]
    child_row = waterfall.split('data-kind="child"')[1].split("</div>")[0]
    assert reverse("monitoring:run", args=[child.pk]) in child_row and "11.5 s" in child_row
    # The tool's bar ends with its delegated run, since its own row recorded no end.
    tool_bar = waterfall.split('data-kind="tool"')[1].split("</div>")[0]
    assert "11.5 s" in tool_bar
    # The run's admin page says the same.
    admin_page = client.get(reverse("admin:conversations_run_change", args=[parent.pk])).content.decode()
    timeline = admin_page.split('class="agentry-timeline"')[1].split("</table>")[0]
    assert "<td>11.5 s</td>" in timeline and "– ms" not in timeline


def test_the_waterfall_draws_a_step_still_going_up_to_now_and_one_that_never_ran_as_a_mark():
    start = timezone.now() - timedelta(seconds=10)
    at = lambda seconds: (start + timedelta(seconds=seconds)).isoformat()  # noqa: E731
    export = {
        "run": {"started_at": at(0), "created_at": at(0), "finished_at": None},
        "steps": [
            {"kind": "tool_invocation", "tool": "send-mail", "status": "rejected", "created_at": at(2),
             "started_at": None, "finished_at": None, "approval": None, "child_runs": []},
            {"kind": "llm_call", "id": 1, "purpose": "step", "iteration": 1, "attempt": 2, "status": "started",
             "started_at": at(5), "finished_at": None},
        ],
    }  # fmt: skip
    rejected, going = run_waterfall(export=export, now=start + timedelta(seconds=10), run_url=str)["rows"]
    assert (going["left"], going["width"], going["duration_ms"]) == (50.0, 50.0, None)
    assert going["label"] == "Model call 1 · attempt 2" and going["duration_text"] == "still going"
    # Rejected before it ran: a thin mark where it was asked for, not a bar running on until now.
    assert (rejected["left"], rejected["width"], rejected["duration_text"]) == (20.0, 0.4, "–")


def test_the_try_pages_poll_carries_each_tool_calls_result_and_its_approval(client, staff):
    run = _weather_run(staff)
    broken = ToolInvocation.objects.create(
        run=run, llm_call=run.llm_calls.first(), tool_name="get_route", tool_call_id="call_r",
        arguments={"from": "A"}, status="error", error="route service down", result="x" * 3000,
    )  # fmt: skip
    url = reverse("monitoring:run-events", args=[run.pk])

    weather, route = client.get(url).json()["tool_calls"]
    assert weather["tool"] == "get_weather" and weather["arguments"] == {"city": "Chengdu"}
    assert weather["result"] == '{"sky": "rain", "temp_c": 18}' and weather["status_text"] == "Succeeded"
    # This operator may not decide approvals: no link that would refuse them.
    assert weather["approval"] == {
        "id": Approval.objects.get().pk, "status": "approved", "status_text": "Approved", "url": None
    }  # fmt: skip
    assert route["id"] == broken.pk and route["error"] == "route service down" and route["approval"] is None
    assert len(route["result"]) == 2000 and route["result_cut"] is True

    staff.groups.add(Group.objects.get(name="Approvers"))
    weather = client.get(url).json()["tool_calls"][0]
    assert weather["approval"]["url"] == reverse("approvals:detail", args=[Approval.objects.get().pk])


def test_headings_labels_and_legends_are_translated(client, staff, monkeypatch):
    monkeypatch.setattr(
        "console.monitoring.selectors.queue_depths", lambda: {"transport": "redis", "queues": [], "error": ""}
    )
    monkeypatch.setattr("console.monitoring.selectors.workers_online", lambda: {"online": [], "error": ""})
    run = _weather_run(staff)
    rollups_refresh()
    zh = {"HTTP_ACCEPT_LANGUAGE": "zh-hans"}

    dashboard = client.get(reverse("monitoring:dashboard"), **zh).content.decode()
    assert "<title>监控 |" in dashboard
    legend = dashboard.split('class="legend"')[1].split("</div>")[0]
    assert "已完成" in legend and "completed" not in legend

    try_page = client.get(reverse("monitoring:try"), **zh).content.decode()
    assert "<title>试用智能体 |" in try_page and '<label for="id_agent">智能体:</label>' in try_page

    timeline = client.get(reverse("monitoring:run", args=[run.pk]), **zh).content.decode()
    assert f"<title>运行 {run.pk} |" in timeline
    steps = timeline.split('id="steps"')[1].split("</table>")[0]
    assert "<td>成功" in steps and "succeeded" not in steps
    assert (
        json.loads(timeline.split('id="timeline-data" type="application/json">')[1].split("</script>")[0])["run"][
            "status"
        ]
        == "completed"
    )
    assert Run.objects.get(pk=run.pk).status == "completed"
