"""An agent's page in real Chromium: one click from the front door, with a screenshot in
test-artifacts/."""

import re

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse
from django.utils import timezone

from tests.support.factories import make_agent
from tests.support.ledger import ledger_run
from tests.support.workers import ARTIFACTS

pytestmark = [pytest.mark.browser]


def test_the_hub_is_one_click_from_the_front_door(page, live_server, transactional_db):
    password = "correct horse battery"
    user = get_user_model().objects.create_user("oncall", password=password, is_staff=True, is_superuser=True)
    agent = make_agent(name="Helpdesk", slug="helpdesk", tools=["test-counter"])
    ledger_run(agent, finished_at=timezone.now())
    page.goto(reverse("admin:login") + "?next=/")
    page.fill("#id_username", user.username)
    page.fill("#id_password", password)
    page.click("input[type=submit]")
    page.wait_for_url(re.compile(r"/$"))
    page.locator('#front-door-agents [data-agent="helpdesk"] a').click()
    page.wait_for_url(re.compile(r"/monitor/agents/helpdesk/$"))
    page.locator("#hub-identity").wait_for()
    assert page.locator("#hub-model-name").inner_text() == "helpdesk"
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "agent-hub.png"), full_page=True)
