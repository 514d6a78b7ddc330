"""The prompt playground in real Chromium on a real worker: from the agent's page to the
playground, a changed prompt and model sent with the keyboard, both answers side by side, and
nothing published. Every control is labelled and nothing overflows at 1366 px; a screenshot
goes to test-artifacts/playground.png."""

import pytest
from django.contrib.auth import get_user_model

from agents.models import AgentRelease
from agents.releases import version_publish
from agents.selectors import agent_versions
from tests.support.factories import ModelConfigFactory, make_agent
from tests.support.workers import ARTIFACTS

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

PASSWORD = "correct horse battery"

# Every form control of the page without a label (a <label for>, or one wrapping it).
UNLABELLED = """() => [...document.querySelectorAll(
    '#content input:not([type=hidden]), #content select, #content textarea')]
  .filter((el) => !(el.labels && el.labels.length) && !el.getAttribute('aria-label'))
  .map((el) => el.name || el.id)"""


@pytest.fixture
def browser_context_options():
    return {"viewport": {"width": 1366, "height": 900}}


@pytest.fixture
def page(chromium, live_server, browser_context_options):
    context = chromium.new_context(base_url=live_server.url, **browser_context_options)
    page = context.new_page()
    page.set_default_timeout(30_000)
    yield page
    context.close()


def test_try_a_prompt_change_beside_the_live_version_without_publishing(worker, fake_llm, live_server, page):
    live_model = ModelConfigFactory(
        name="Live model",
        base_url=fake_llm.api_base,
        model=fake_llm.script("pgb-live", {"scenarios": [{"match": ".", "steps": [{"content": "Live: sunny."}]}]}),
    )
    draft_model = ModelConfigFactory(
        name="Draft model",
        base_url=fake_llm.api_base,
        model=fake_llm.script(
            "pgb-draft", {"scenarios": [{"match": ".", "steps": [{"content": "Draft: sunny, 25 degrees."}]}]}
        ),
    )
    operator = get_user_model().objects.create_user("oncall", password=PASSWORD, is_staff=True, is_superuser=True)
    agent = make_agent(
        name="Weather desk",
        slug="weather-desk",
        system_prompt="Be helpful.",
        model_config=live_model,
        tools=["test-echo"],
    )
    version_publish(agent=agent, user=operator, note="first")
    agent.refresh_from_db()
    releases = AgentRelease.objects.count()

    page.goto(f"/admin/login/?next=/monitor/agents/{agent.slug}/")
    page.fill("#id_username", operator.username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"**/monitor/agents/{agent.slug}/")
    page.click("#agent-playground-link")
    page.wait_for_url(f"**/monitor/agents/{agent.slug}/playground/")

    assert page.input_value("#id_system_prompt") == "Be helpful."
    assert page.evaluate(UNLABELLED) == []
    page.fill("#id_system_prompt", "Be brief and give the temperature.")
    page.select_option("#id_model_config", value=str(draft_model.pk))
    page.fill("#id_content", "Weather in Hangzhou?")
    page.focus("#playground-send")
    page.keyboard.press("Enter")

    page.wait_for_selector("#side-draft .side-answer:not(.pending)")
    page.wait_for_selector("#side-live .side-answer:not(.pending)")
    assert page.inner_text("#side-draft .side-answer") == "Draft: sunny, 25 degrees."
    assert page.inner_text("#side-live .side-answer") == "Live: sunny."
    assert page.inner_text("#side-draft .side-question") == "Weather in Hangzhou?"
    assert "tokens" in page.inner_text("#side-draft .side-status")
    assert page.get_attribute("#side-draft", "data-status") == "completed"
    assert page.locator("#side-live a.side-timeline").get_attribute("href").startswith("/monitor/runs/")
    assert page.evaluate("document.documentElement.scrollWidth") <= 1366
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "playground.png"), full_page=True)

    # Nothing was published nor saved: the live version and the draft are what they were.
    agent.refresh_from_db()
    assert AgentRelease.objects.count() == releases
    assert agent.system_prompt == "Be helpful." and agent.model_config_id == live_model.pk
    assert [v.number for v in agent_versions(agent=agent)] == [1]
