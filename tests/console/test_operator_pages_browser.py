"""One way in, in real Chromium: from `/` to the admin and from there to every operator page by
clicking (no typed URL); the timeline of a run whose approver edited the arguments; Test
connection on a working and on a broken model config. Screenshots are kept in test-artifacts/."""

import re

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from conversations.models import Approval, Run
from conversations.services import conversation_create
from engine.admission import message_post
from engine.approvals import approval_decide
from tests.approvals.conftest import counter_steps
from tests.support.factories import ModelConfigFactory, make_agent
from tests.support.ledger import ledger_run
from tests.support.llm import fake_model
from tests.support.waits import wait_for
from tests.support.workers import ARTIFACTS

pytestmark = [pytest.mark.browser]

PASSWORD = "correct horse battery"


@pytest.fixture
def operator(transactional_db):
    return get_user_model().objects.create_user("oncall", password=PASSWORD, is_staff=True, is_superuser=True)


def _enter(page, operator) -> None:
    """The one typed URL: the site's root; the admin's sign-in follows from its link."""
    page.goto("/")
    page.locator('[data-page="admin"] a').click()
    page.fill("#id_username", operator.username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(re.compile(r"/admin/$"))


def _nav(page, key: str):
    return page.locator(f'.operator-nav a[data-page="{key}"]')


def test_every_operator_page_is_reached_by_clicking_from_the_admin(page, operator, live_server):
    agent = make_agent(name="Helpdesk")
    run = ledger_run(agent, finished_at=timezone.now())

    _enter(page, operator)
    assert page.locator("#site-name").inner_text() == "Agentry"
    index = page.locator("#group-operate")
    assert index.locator("tr.operator-page").all_inner_texts()[0].startswith("Monitoring")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "admin-index.png"), full_page=True)

    index.get_by_role("link", name="Monitoring").click()
    page.wait_for_url(re.compile(r"/monitor/$"))
    page.locator("#runs-now").wait_for()
    page.locator(".monitor-head").get_by_role("link", name="JSON").click()
    page.wait_for_url(re.compile(r"/monitor/data\.json"))
    page.go_back()
    page.locator(".monitor-head").get_by_role("link", name="Try an agent").click()
    page.wait_for_url(re.compile(r"/monitor/try/$"))

    _nav(page, "approvals").click()
    page.wait_for_url(re.compile(r"/approvals/$"))
    page.get_by_role("link", name="History").click()
    page.wait_for_url(re.compile(r"/approvals/history/$"))
    page.locator("header.top").get_by_role("link", name="Admin").click()
    page.wait_for_url(re.compile(r"/admin/$"))

    _nav(page, "try").click()
    page.wait_for_url(re.compile(r"/monitor/try/$"))
    assert page.locator("#id_agent option", has_text="Helpdesk").count() == 1
    page.locator("#site-name a").click()
    page.wait_for_url(re.compile(r"/admin/$"))

    page.locator("#content-main").get_by_role("link", name="Runs", exact=True).click()
    page.wait_for_url(re.compile(r"/admin/conversations/run/$"))
    row = page.locator("#result_list tbody tr").first
    # The run's short id leads the row; the conversation's (its thread view) follows it.
    run_id = row.locator(".short-id").first
    assert run_id.inner_text() == str(run.pk)[:8]
    assert run_id.get_attribute("title") == str(run.pk)
    assert "Helpdesk" in row.inner_text()
    page.screenshot(path=str(ARTIFACTS / "admin-runs.png"), full_page=True)
    row.locator("a.timeline-link").click()
    page.wait_for_url(re.compile(rf"/monitor/runs/{run.pk}/$"))
    page.locator("#steps").wait_for()

    _nav(page, "api-docs").click()
    page.wait_for_url(re.compile(r"/api/docs/$"))
    page.locator(".swagger-ui .title").wait_for()
    assert "Agentry API" in page.locator(".swagger-ui .title").inner_text()

    # The former ReDoc address leads to the same docs.
    page.goto(page.url.replace("/api/docs/", "/api/redoc/"))
    page.wait_for_url(re.compile(r"/api/docs/$"))


@pytest.mark.e2e
def test_the_timeline_of_an_edited_approval_shows_both_sets_and_the_diff(
    page, operator, worker, fake_llm, executions, live_server
):
    model = fake_model(
        fake_llm,
        {"scenarios": [{"match": ".", "steps": counter_steps("refund-90", reply="Done: {last_tool_result}")}]},
    )
    agent = make_agent(name="Refunds", tools=["test-counter"], model_config=model)
    run = message_post(conversation=conversation_create(agent=agent), content="Refund order 7.")
    approval = wait_for(
        lambda: Approval.objects.filter(run=run, status="pending").first(), message="the approval request"
    )
    approval_decide(
        approval_id=approval.pk, user=operator, decision="approve", channel="page", arguments={"label": "refund-50"}
    )
    wait_for(lambda: Run.objects.filter(pk=run.pk, status="completed").exists(), message="the run to complete")
    assert executions("refund-50") == 1 and executions("refund-90") == 0

    _enter(page, operator)
    page.locator("#content-main").get_by_role("link", name="Runs", exact=True).click()
    page.locator(f'#result_list tr:has(span[title="{run.pk}"]) a.timeline-link').click()
    page.wait_for_url(re.compile(rf"/monitor/runs/{run.pk}/$"))

    edit = page.locator("#steps .approval-edit")
    assert '"label": "refund-90"' in edit.locator("pre").nth(0).inner_text()
    assert '"label": "refund-50"' in edit.locator("pre.approved-arguments").inner_text()
    assert "arguments the tool ran with (edited by oncall)" in edit.inner_text()
    assert '-   "label": "refund-90"' in edit.locator(".diff-lines .removed").inner_text()
    assert '+   "label": "refund-50"' in edit.locator(".diff-lines .added").inner_text()
    assert "approval approved with edited arguments by oncall" in page.locator("#steps").inner_text()
    page.screenshot(path=str(ARTIFACTS / "timeline-edited-approval.png"), full_page=True)


def test_test_connection_on_a_working_and_a_broken_config(page, operator, fake_llm, live_server):
    working = fake_model(fake_llm, {"fallback": {"content": "OK"}}, name="working")
    ModelConfigFactory(name="broken", base_url="http://127.0.0.1:9/v1", model="gpt-x")

    _enter(page, operator)
    page.locator("#content-main").get_by_role("link", name="Model configs").click()
    page.get_by_role("link", name="working", exact=True).click()
    page.get_by_role("button", name="Test connection").click()
    page.wait_for_url(re.compile(r"/test-connection/$"))
    result = page.locator("#connection-test")
    assert result.get_attribute("data-ok") == "true"
    assert page.locator("#connection-answer").inner_text() == "OK"
    assert re.search(r"Answered in \d+ ms \(HTTP 200\)", result.inner_text())
    assert working.model in page.locator("#models-listed").inner_text()
    page.screenshot(path=str(ARTIFACTS / "test-connection-ok.png"), full_page=True)

    page.get_by_role("button", name="Test again").click()
    page.locator("#connection-answer").wait_for()
    page.get_by_role("link", name="Back to the model config").click()
    page.get_by_role("link", name="Model configs").first.click()
    page.get_by_role("link", name="broken", exact=True).click()
    page.get_by_role("button", name="Test connection").click()
    page.wait_for_url(re.compile(r"/test-connection/$"))
    assert page.locator("#connection-test").get_attribute("data-ok") == "false"
    assert page.locator("#connection-error").inner_text() == (
        "Could not connect to http://127.0.0.1:9/v1/chat/completions (model 'gpt-x'): connection refused."
    )
    page.screenshot(path=str(ARTIFACTS / "test-connection-broken.png"), full_page=True)


@pytest.mark.e2e
def test_the_try_page_keeps_runs_apart_links_the_approval_and_says_statuses_in_words(
    page, operator, worker, fake_llm, live_server
):
    long_text = "x" * 3000
    model = fake_model(
        fake_llm,
        {
            "scenarios": [
                {"match": "refund", "steps": counter_steps("refund-90", reply="Refunded.")},
                {"match": ".", "steps": [{"content": f"A long answer: {long_text}"}]},
            ]
        },
    )
    agent = make_agent(name="Refunds", tools=["test-counter", "test-echo"], model_config=model)

    _enter(page, operator)
    _nav(page, "try").click()
    page.select_option("#id_agent", str(agent.pk))
    page.fill("#id_content", "Please refund order 7.")
    page.click("#try-send")
    first = page.locator("section.try-run").first
    link = first.locator(".waiting a")
    link.wait_for()
    approval = Approval.objects.get(run__agent=agent, status="pending")
    assert link.inner_text() == f"test-counter (approval #{approval.pk})"
    assert link.get_attribute("href") == f"/approvals/{approval.pk}/"
    assert first.locator(".run-status").inner_text() == "waiting for approval"
    assert page.locator("#try-state").inner_text() == "waiting for approval"
    # The call waiting for it reads as a card, linked to the approval's page.
    card = first.locator("article.tool-card")
    card.locator(".approval a").wait_for()
    assert card.get_attribute("data-status") == "awaiting_approval"
    assert card.locator(".approval a").get_attribute("href") == f"/approvals/{approval.pk}/"
    page.screenshot(path=str(ARTIFACTS / "try-waiting-for-approval.png"), full_page=True)

    approval_decide(approval_id=approval.pk, user=operator, decision="approve", channel="page")
    page.wait_for_selector('section.try-run[data-status="completed"]')
    assert first.locator(".run-status").inner_text() == "completed (final answer)"
    assert first.locator(".waiting").inner_text() == ""

    page.fill("#id_content", "Tell me something long.")
    page.click("#try-send")
    page.wait_for_function("document.querySelectorAll('section.try-run[data-status=\"completed\"]').length === 2")
    newest, oldest = page.locator("section.try-run").all()
    for section in (newest, oldest):
        types = section.locator(".try-events td:nth-child(2)").all_text_contents()
        assert types[0] == "run.queued" and types[-1] == "run.completed"
    assert "approval.requested" not in newest.locator(".try-events").text_content()
    assert "approval.requested" in oldest.locator(".try-events").text_content()
    assert newest.get_attribute("data-run") != oldest.get_attribute("data-run")
    # The long answer's event wraps inside the page instead of widening it.
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    page.screenshot(path=str(ARTIFACTS / "try-two-runs.png"), full_page=True)
