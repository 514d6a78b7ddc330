"""A fork made from a run's timeline in real Chromium, run by a real worker through the queue, and
its side-by-side page: the operator edits the booking's result at step 1 ("sold out"), the fork's
model answers differently from there, the page marks where, and the counting service saw one
booking in all (the source's). Screenshot: test-artifacts/fork-compare.png."""

import time

import pytest
from django.contrib.auth import get_user_model

from conversations.models import TERMINAL_STATUSES, Run
from conversations.services import conversation_create
from engine.admission import message_post
from tests.forks.conftest import booking_agent, counting  # noqa: F401 (counting: a fixture)
from tests.support.workers import ARTIFACTS

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

PASSWORD = "correct horse battery"


def _ended(run_id, timeout: float = 60) -> Run:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = Run.objects.get(pk=run_id)
        if run.status in TERMINAL_STATUSES:
            return run
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} did not end")


def test_a_fork_from_the_timeline_beside_its_source(chromium, live_server, worker, fake_llm, counting):  # noqa: F811
    operator = get_user_model().objects.create_user("forker", password=PASSWORD, is_staff=True, is_superuser=True)
    agent = booking_agent(fake_llm, counting)
    source = _ended(message_post(conversation=conversation_create(agent=agent), content="order 7").pk)
    assert source.status == "completed" and counting.keys() == 1

    context = chromium.new_context(viewport={"width": 1400, "height": 1100}, base_url=live_server.url)
    page = context.new_page()
    page.set_default_timeout(20_000)
    page.goto(f"/admin/login/?next=/monitor/runs/{source.pk}/")
    page.fill("#id_username", operator.username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#run-summary")

    page.locator("#fork-step-1 summary").click()
    page.select_option("#fork-1-change", "tool_result")
    page.select_option("#fork-1-tool_call_id", index=1)
    page.fill("#fork-1-result", "sold out")
    page.locator("#fork-step-1 button[type=submit]").click()
    page.wait_for_url("**/compare/")
    fork = Run.objects.get(forked_from=source)
    assert fork.fork_step == 1 and fork.fork_change["kind"] == "tool_result"
    assert _ended(fork.pk).status == "completed"

    page.reload()
    assert "≠" in page.locator("#difference-summary").inner_text()
    assert "differs" in page.locator("#compare-answer").get_attribute("class")
    # Step 1's model output is the same (copied); step 2 is where the fork went its own way.
    assert "differs" not in (
        page.locator('tr[data-step="1"] [data-side="fork"] [data-part="content"]').get_attribute("class") or ""
    )
    assert "differs" in page.locator('tr[data-step="2"]').get_attribute("class")
    assert "sold out" in page.locator('tr[data-step="2"] [data-side="fork"]').inner_text()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "fork-compare.png"), full_page=True)
    context.close()
    assert counting.keys() == 1
