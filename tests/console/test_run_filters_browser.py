"""The runs list filtered by tag and cost range in real Chromium, with the keyboard through the
filters' labelled inputs, then a run's conversation opened as one thread; neither page wider
than a 1,366 px laptop screen. Screenshots in test-artifacts/run-filters.png and thread.png."""

import re
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse
from django.utils import timezone

from conversations.models import Conversation, Message, RunLabel
from tests.support.factories import make_agent
from tests.support.ledger import ledger_run
from tests.support.workers import ARTIFACTS

pytestmark = [pytest.mark.browser]

LAPTOP = {"width": 1366, "height": 768}


def _run(agent, *, tags, cost, question, answer):
    now = timezone.now()
    run = ledger_run(agent, tags=list(tags), cost=Decimal(cost), created_at=now, finished_at=now)
    RunLabel.objects.bulk_create([RunLabel(run=run, key="", value=tag) for tag in tags])
    conversation = run.conversation
    Message.objects.create(conversation=conversation, run=run, order=0, role="user", content=question)
    Message.objects.create(conversation=conversation, run=run, order=1, role="assistant", content=answer)
    Conversation.objects.filter(pk=conversation.pk).update(message_count=2, end_user="traveller-9")
    return run


def test_filter_runs_by_tag_and_cost_then_open_the_thread(chromium, live_server, transactional_db):
    password = "correct horse battery"
    user = get_user_model().objects.create_user("oncall", password=password, is_staff=True, is_superuser=True)
    agent = make_agent(name="Helpdesk", slug="helpdesk")
    wanted = _run(agent, tags=["vip"], cost="0.25", question="Where is my parcel?", answer="It arrives tomorrow.")
    _run(agent, tags=["vip"], cost="4.00", question="Refund please", answer="Done.")
    _run(agent, tags=["trial"], cost="0.10", question="Hello", answer="Hi.")

    context = chromium.new_context(viewport=LAPTOP, base_url=live_server.url)
    page = context.new_page()
    page.set_default_timeout(20_000)
    try:
        page.goto(reverse("admin:login") + "?next=" + reverse("admin:conversations_run_changelist"))
        page.fill("#id_username", user.username)
        page.fill("#id_password", password)
        page.click("input[type=submit]")
        page.wait_for_url(re.compile(r"/admin/conversations/run/$"))

        # Typed into the labelled inputs; Enter submits each small form.
        page.get_by_label("Tag", exact=True).fill("vip")
        page.get_by_label("Tag", exact=True).press("Enter")
        page.wait_for_url(re.compile(r"tag=vip"))
        cost = page.locator("details[data-filter-title='cost']")
        cost.get_by_label("At most").fill("1")
        cost.get_by_label("At most").press("Enter")
        page.wait_for_url(re.compile(r"cost_max=1"))
        assert "tag=vip" in page.url
        rows = page.locator("#result_list tbody tr")
        assert rows.count() == 1
        assert str(wanted.pk) in rows.first.inner_html()
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= LAPTOP["width"], width
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "run-filters.png"), full_page=True)

        rows.first.locator("a.thread-link").click()
        page.wait_for_url(re.compile(rf"/monitor/conversations/{wanted.conversation_id}/$"))
        thread = page.locator("#thread")
        assert "Where is my parcel?" in thread.inner_text() and "It arrives tomorrow." in thread.inner_text()
        timeline = page.locator("a.thread-timeline-link").first
        timeline.focus()
        assert page.evaluate("document.activeElement.classList.contains('thread-timeline-link')")
        assert page.evaluate("document.documentElement.scrollWidth") <= LAPTOP["width"]
        page.screenshot(path=str(ARTIFACTS / "thread.png"), full_page=True)
        page.keyboard.press("Enter")
        page.wait_for_url(re.compile(rf"/monitor/runs/{wanted.pk}/$"))
    finally:
        context.close()
