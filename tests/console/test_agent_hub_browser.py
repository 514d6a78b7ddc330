"""An agent's page in real Chromium, on the acceptance's path: the demo seeded as docs/demo.md
seeds it, then from the front door to a demo agent's page in one click, and from that page to
its last failed run, its pending approval and its widget snippet (copied with the keyboard).
Screenshots in test-artifacts/agent-hub*.png."""

import io
import re
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.utils import timezone

from agents.models import Agent
from conversations.models import Approval
from conversations.monitoring.rollups import rollups_refresh
from demo.customer_service import customer_service_seed
from demo.seed import demo_memory_seed
from tests.support.ledger import ledger_run
from tests.support.ledger_seed import ledger_seed
from tests.support.workers import ARTIFACTS
from widgets.models import Widget

pytestmark = [pytest.mark.browser]

DEMO_LLM = "http://127.0.0.1:9/v1"
WIDTH = 1366


def _unlabelled_controls(page) -> list[str]:
    """The page's buttons, inputs and selects without an accessible name (a label, aria-label or
    text): what a screen reader could not announce."""
    return page.evaluate(
        """() => [...document.querySelectorAll('main button, main input:not([type=hidden]), main select,'
            + ' #content button, #content input:not([type=hidden]), #content select')]
            .filter((el) => !(el.labels && el.labels.length) && !el.getAttribute('aria-label')
                && !(el.textContent || '').trim() && !el.value)
            .map((el) => el.outerHTML.slice(0, 120))"""
    )


def test_from_the_front_door_to_a_demo_agent_s_failed_run_approval_and_widget(page, live_server, transactional_db):
    password = "correct horse battery"
    user = get_user_model().objects.create_user("oncall", password=password, is_staff=True, is_superuser=True)
    # What docs/demo.md's commands seed.
    call_command("agentry_seed_demo", llm_base_url=DEMO_LLM, stdout=io.StringIO())
    demo_memory_seed(llm_base_url=DEMO_LLM)
    customer_service_seed(llm_base_url=DEMO_LLM, order_service_url="http://127.0.0.1:9")
    agent = Agent.objects.get(slug="cs-orders")
    # Its history: a run that failed, a change of address waiting for approval, a widget.
    failed = ledger_run(agent, status="failed", stop_reason="provider_error", error="boom", finished_at=timezone.now())
    waiting = ledger_seed(agent, 1)[0]
    approval = Approval.objects.get(run=waiting)
    Approval.objects.filter(pk=approval.pk).update(status=Approval.Status.PENDING)
    widget = Widget.objects.create(agent=agent, name="Shop widget", secret="wsec_" + "b" * 40, owner=user)
    rollups_refresh(since=timezone.now() - timedelta(days=1))

    page.set_viewport_size({"width": WIDTH, "height": 900})
    page.goto("/admin/login/?next=/")
    page.fill("#id_username", user.username)
    page.fill("#id_password", password)
    page.click("input[type=submit]")
    page.wait_for_url(re.compile(r"/$"))
    # The front door links every demo agent of the workspace.
    for slug in Agent.objects.filter(workspace=agent.workspace).values_list("slug", flat=True):
        assert page.locator(f'#front-door-agents [data-agent="{slug}"] a').count() == 1, slug
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "agent-hub-front-door.png"), full_page=True)

    # One click to the agent's page.
    page.locator('#front-door-agents [data-agent="cs-orders"] a').click()
    page.wait_for_url(re.compile(r"/monitor/agents/cs-orders/$"))
    page.locator("#hub-identity").wait_for()
    assert page.locator("#hub-model-name").inner_text() == "cs-orders"
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH
    assert _unlabelled_controls(page) == []
    page.screenshot(path=str(ARTIFACTS / "agent-hub.png"), full_page=True)

    # Its widget snippet, copied with the keyboard.
    snippet = page.locator(f"#hub-widget-{widget.pk}").inner_text()
    assert f'data-widget="{widget.pk}"' in snippet and live_server.url in snippet
    copy = page.locator(f'button[data-copy="hub-widget-{widget.pk}"]')
    copy.focus()
    page.keyboard.press("Enter")
    status = page.locator(f"#hub-widget-{widget.pk}-status")
    status.wait_for()
    page.wait_for_function(f"document.getElementById('hub-widget-{widget.pk}-status').textContent !== ''")
    assert status.inner_text() == "copied"

    # Its last failed run's timeline.
    page.locator("#hub-last-failed").click()
    page.wait_for_url(re.compile(rf"/monitor/runs/{failed.pk}/$"))
    page.screenshot(path=str(ARTIFACTS / "agent-hub-failed-run.png"), full_page=True)
    page.go_back()

    # Its pending approval, the oldest first; and the queue narrowed to the agent.
    page.locator("#hub-oldest-pending").click()
    page.wait_for_url(re.compile(rf"/approvals/{approval.pk}/$"))
    page.screenshot(path=str(ARTIFACTS / "agent-hub-approval.png"), full_page=True)
    page.go_back()
    page.locator("#hub-pending").click()
    page.wait_for_url(re.compile(r"/approvals/\?agent=cs-orders$"))
    page.locator(f"#approval-{approval.pk}").wait_for()
