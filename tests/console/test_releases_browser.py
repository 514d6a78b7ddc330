"""Releases in real Chromium: an operator publishes from the agent's versions page, reads the
diff of two versions, and sees a canary's two live versions side by side on the dashboard, on
real runs (real worker, real queue, the fake model over HTTP)."""

import pytest
from django.contrib.auth import get_user_model

from agents.models import Agent
from agents.releases import canary_start, version_publish
from conversations.models import Run
from conversations.services import conversation_create
from engine.admission import message_post
from tests.support.factories import ModelConfigFactory, make_agent
from tests.support.waits import wait_for
from tests.support.workers import ARTIFACTS

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

PASSWORD = "correct horse battery"
SCRIPT = {"scenarios": [{"match": ".", "steps": [{"content": "hello there", "latency_ms": 20}]}]}


@pytest.fixture
def operator(transactional_db):
    return get_user_model().objects.create_user("releaser", password=PASSWORD, is_staff=True, is_superuser=True)


@pytest.fixture
def releases_agent(fake_llm, transactional_db):
    model = ModelConfigFactory(base_url=fake_llm.api_base, model=fake_llm.script("browser-releases", SCRIPT))
    return make_agent(
        name="Releases agent", model_config=model, tools=["test-echo"], system_prompt="Be brief.\nSay hello."
    )


def _log_in(page, operator, next_url: str) -> None:
    page.goto(f"/admin/login/?next={next_url}")
    page.fill("#id_username", operator.username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"**{next_url}*")


def test_publish_from_the_versions_page_and_read_the_diff(live_server, page, operator, releases_agent):
    _log_in(page, operator, f"/admin/agents/agent/{releases_agent.pk}/change/")
    page.click("#agent-versions-link")
    page.wait_for_url(f"**/admin/agents/agent/{releases_agent.pk}/versions/")
    assert "Never published" in page.locator("#release-state").inner_text()
    page.fill("#publish-note", "First release.")
    page.click("#publish")
    page.wait_for_selector("#versions-table .published-marker")
    assert "First release." in page.locator('#versions-table tr[data-version="1"]').inner_text()

    Agent.objects.filter(pk=releases_agent.pk).update(system_prompt="Be brief.\nSay hello warmly.", max_iterations=4)
    page.reload()
    assert page.locator("#draft-state").is_visible()
    page.fill("#publish-note", "Warmer greeting.")
    page.click("#publish")
    page.wait_for_selector('#versions-table tr[data-version="2"] .published-marker')

    page.locator('#versions-table tr[data-version="1"] a').first.click()
    page.wait_for_selector("#version-diff")
    removed = page.locator("#prompt-diff .del").all_inner_texts()
    added = page.locator("#prompt-diff .add").all_inner_texts()
    assert removed == ["-Say hello warmly."] and added == ["+Say hello."]
    assert page.locator('#settings-diff tr[data-field="max_iterations"]').inner_text().split() == [
        "max_iterations",
        "4",
        "8",
    ]
    page.screenshot(path=str(ARTIFACTS / "releases-diff.png"), full_page=True)


def test_the_dashboard_shows_a_canary_beside_the_published_version(
    worker, live_server, page, operator, releases_agent, settings
):
    settings.AGENTRY_MONITOR_REFRESH_SECONDS = 60
    stable = version_publish(agent=releases_agent, user=operator, note="Stable.").version
    Agent.objects.filter(pk=releases_agent.pk).update(system_prompt="Candidate prompt.")
    candidate = canary_start(agent=releases_agent, percent=50, user=operator, note="Half.").version
    runs = [message_post(conversation=conversation_create(agent=releases_agent), content=f"hi {n}") for n in range(12)]
    wait_for(
        lambda: Run.objects.filter(pk__in=[r.pk for r in runs], status="completed").count() == len(runs),
        timeout=60,
        message="every run to complete",
    )
    per_version = {
        version.number: Run.objects.filter(pk__in=[r.pk for r in runs], agent_version=version).count()
        for version in (stable, candidate)
    }

    _log_in(page, operator, "/monitor/")
    rows = page.locator(f'#live-versions tr[data-agent="{releases_agent.pk}"]')
    assert rows.count() == 2
    published = page.locator(f'#live-versions tr[data-agent="{releases_agent.pk}"][data-role="published"]')
    canary = page.locator(f'#live-versions tr[data-agent="{releases_agent.pk}"][data-role="canary"]')
    assert published.get_attribute("data-version") == str(stable.number)
    assert canary.get_attribute("data-version") == str(candidate.number)
    assert published.locator(".runs").inner_text() == str(per_version[stable.number])
    assert canary.locator(".runs").inner_text() == str(per_version[candidate.number])
    assert "50%" in canary.inner_text() and "canary" in canary.inner_text()
    page.screenshot(path=str(ARTIFACTS / "releases-dashboard.png"), full_page=True)
