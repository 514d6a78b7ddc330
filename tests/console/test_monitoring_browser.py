"""The operator's pages in real Chromium, on real runs (real worker, real queue, the fake model
over HTTP): the dashboard renders them, a stuck run is requeued from it and finishes, and the
try-an-agent page follows a run live. Screenshots are kept in test-artifacts/."""

import json
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.utils import timezone

from console.monitoring import broker
from conversations.models import Run, RunEvent
from conversations.monitoring.rollups import rollups_refresh
from conversations.services import conversation_create
from engine import tasks
from engine.admission import message_post
from tests.support.factories import ModelConfigFactory, make_agent
from tests.support.waits import wait_for
from tests.support.workers import ARTIFACTS

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

PASSWORD = "correct horse battery"


@pytest.fixture
def browser_context_options():
    return {"permissions": ["clipboard-read", "clipboard-write"]}


@pytest.fixture
def operator(transactional_db):
    return get_user_model().objects.create_user("oncall", password=PASSWORD, is_staff=True, is_superuser=True)


def _log_in(page, operator, next_url: str) -> None:
    page.goto(f"/admin/login/?next={next_url}")
    page.fill("#id_username", operator.username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"**{next_url}*")


def _agent(fake_llm, name: str, script: dict, **model_fields):
    model = ModelConfigFactory(
        name=name, base_url=fake_llm.api_base, model=fake_llm.script(f"browser-{name}", script), **model_fields
    )
    return make_agent(name=name, model_config=model, tools=["test-echo"])


def _finished(run: Run) -> Run:
    return wait_for(
        lambda: Run.objects.filter(pk=run.pk, finished_at__isnull=False).first(), message=f"run {run.pk} to end"
    )


def _stuck_run(agent, monkeypatch) -> Run:
    """A run whose worker vanished: running, its lease lapsed minutes ago, no task queued."""
    with monkeypatch.context() as patch:
        patch.setattr(tasks.run_advance_task, "delay", lambda run_id: None)
        run = message_post(conversation=conversation_create(agent=agent), content="are you stuck?")
    past = timezone.now() - timedelta(minutes=4)
    Run.objects.filter(pk=run.pk).update(
        status="running", lease_owner="vanished-host:4242:dead", lease_expires_at=past, started_at=past, claims=1
    )
    return run


def test_dashboard_shows_real_runs_and_requeues_a_stuck_run(
    worker, fake_llm, live_server, page, operator, monkeypatch, settings
):
    settings.AGENTRY_MONITOR_REFRESH_SECONDS = 1
    helper = _agent(
        fake_llm,
        "helper",
        {
            "scenarios": [
                {
                    "match": "echo",
                    "steps": [
                        {"tool_calls": [{"name": "test-echo", "arguments": {"text": "pong"}}]},
                        {"content": "tool said {last_tool_result}"},
                    ],
                },
                {"match": ".", "steps": [{"content": "hello there", "latency_ms": 30}]},
            ]
        },
    )
    broken = _agent(
        fake_llm,
        "broken",
        {"scenarios": [{"match": ".", "steps": [{"content": "x", "fault": {"status": 503}}]}]},
        max_retries=0,
    )
    runs = [
        message_post(conversation=conversation_create(agent=agent), content=text)
        for agent, text in [(helper, "hi"), (helper, "echo please"), (helper, "hi again"), (broken, "hi")]
    ]
    runs = [_finished(run) for run in runs]
    assert [run.status for run in runs] == ["completed", "completed", "completed", "failed"]
    stuck = _stuck_run(helper, monkeypatch)
    rollups_refresh()
    cache.clear()
    wait_for(lambda: broker.workers_online()["online"], message="the ping to be answered")

    _log_in(page, operator, "/monitor/")
    assert page.locator("#workers").inner_text().count("@") >= 1
    assert page.locator('#runs-now dd[data-status="running"]').inner_text() == "1"
    assert page.locator('#runs-now dd[data-status="stuck"]').inner_text() == "1"
    assert page.locator('#queues dd[data-queue="llm"]').inner_text().isdigit()
    assert "25.0 %" in page.locator("#failure-rate").inner_text()
    assert page.locator("svg.chart rect").count() >= 4
    latency = page.locator("#latency").inner_text()
    assert "helper" in latency and "broken" in latency
    assert "HTTP 503" in page.locator("#top-errors").inner_text()
    assert "Provider error" in page.locator("#stop-reasons").inner_text()
    assert "helper" in page.locator("#usage").inner_text()
    row = page.locator(f'#stuck-runs tr[data-run="{stuck.pk}"]')
    assert "lease lapsed" in row.inner_text() and "vanished-host" in row.inner_text()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "monitoring.png"), full_page=True)

    page.once("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name="Requeue").click()
    page.wait_for_selector("ul.messagelist li.success")

    finished = _finished(stuck)
    assert (finished.status, finished.stop_reason) == ("completed", "final_answer")
    requeued = RunEvent.objects.get(run=stuck, type="run.requeued").payload
    assert requeued["by"] == "oncall" and requeued["previous_owner"] == "vanished-host:4242:dead"
    assert page.locator(f'#stuck-runs tr[data-run="{stuck.pk}"]').count() == 0
    # The page refreshes by itself: the finished run shows up once beat's rollup task has run.
    assert "1 of 4" in page.locator("#failure-rate").inner_text()
    rollups_refresh()
    page.wait_for_function("document.getElementById('failure-rate').innerText.includes('1 of 5')")
    assert page.locator('#runs-now dd[data-status="stuck"]').inner_text() == "0"
    page.screenshot(path=str(ARTIFACTS / "monitoring-after-requeue.png"), full_page=True)


def test_try_an_agent_from_the_admin_and_copy_its_timeline(worker, fake_llm, live_server, page, operator):
    agent = _agent(
        fake_llm,
        "tryout",
        {
            "scenarios": [
                {
                    "match": ".",
                    "steps": [
                        {"tool_calls": [{"name": "test-echo", "arguments": {"text": "42"}}]},
                        {"content": "The answer is {last_tool_result}."},
                    ],
                }
            ]
        },
        stream=True,
    )

    _log_in(page, operator, f"/admin/agents/agent/{agent.pk}/change/")
    page.get_by_role("link", name="Try this agent").click()
    page.fill("#id_content", "What is the answer?")
    page.click("#try-send")
    page.wait_for_selector(".bubble.assistant:not(.pending)")
    assert page.locator(".bubble.assistant").inner_text() == "The answer is 42."
    # The tool step reads as a card; the raw events are still there, folded away.
    card = page.locator("section.try-run article.tool-card")
    assert card.get_attribute("data-tool") == "test-echo" and card.locator("pre.result").inner_text() == "42"
    types = page.locator(".try-events td:nth-child(2)").all_text_contents()
    assert types[0] == "run.queued" and types[-1] == "run.completed"
    assert {"tool.started", "tool.completed", "message.delta"} <= set(types)
    page.screenshot(path=str(ARTIFACTS / "try-agent.png"), full_page=True)

    page.get_by_role("link", name="timeline").click()
    page.wait_for_selector("#steps")
    assert "test-echo" in page.locator("#steps").inner_text()
    page.screenshot(path=str(ARTIFACTS / "run-timeline.png"), full_page=True)
    page.click("#copy-json")
    page.wait_for_function("document.getElementById('copy-status').textContent.startsWith('copied')")
    copied = json.loads(page.evaluate("navigator.clipboard.readText()"))
    assert [step["kind"] for step in copied["steps"]] == ["llm_call", "tool_invocation", "llm_call"]
    assert copied["steps"][1]["result"] == "42" and copied["run"]["status"] == "completed"
