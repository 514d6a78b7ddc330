"""The approval page in real Chromium (Debian's package, driven by Playwright), with a real worker.

Playwright's sync API keeps an event loop running on this thread, which Django takes for async
code; the ORM calls here are plain blocking test code, so the guard is lifted for this module.
"""

import re
from pathlib import Path

import pytest

from conversations.models import Approval, Message, Run, ToolInvocation
from tests.approvals.conftest import counter_steps
from tests.support.browser import chromium_browser
from tests.support.waits import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


@pytest.fixture(scope="module")
def browser():
    ARTIFACTS.mkdir(exist_ok=True)
    with chromium_browser() as launched:
        yield launched


@pytest.fixture
def approver_page(browser, live_server, approver, settings):
    settings.AGENTRY_APPROVALS_POLL_SECONDS = 0.5

    def open_page(**context_options):
        context = browser.new_context(**context_options)
        context.set_default_timeout(20_000)
        page = context.new_page()
        page.goto(f"{live_server.url}/approvals/")
        assert "/approvals/login/" in page.url
        page.fill("input[name=username]", "approver")
        page.fill("input[name=password]", "approver-pass-1")
        page.click("form:has(input[name=password]) button[type=submit]")
        page.wait_for_url(re.compile(r"/approvals/$"))
        contexts.append(context)
        return page

    contexts = []
    yield open_page
    for context in contexts:
        context.close()


def _completed(run) -> Run:
    def done():
        current = Run.objects.get(pk=run.pk)
        assert current.status not in ("failed", "cancelled", "expired"), current.error
        return current if current.status == "completed" else None

    return wait_for(done, timeout=30, message=f"run {run.pk} to complete")


def test_approver_edits_an_argument_and_approves(approver_page, worker, scenario, executions):
    page = approver_page(viewport={"width": 1200, "height": 900})
    assert page.locator("#pending-count").inner_text() == "0"

    s = scenario(steps=counter_steps("pay-100-to-alice", reply="Done: {last_tool_result}"))
    run = s.post("Pay Alice 100, please.")
    # The queue notices the new approval by itself.
    card = page.locator("article[data-approval-id]")
    card.wait_for()
    assert page.locator("#pending-count").inner_text() == "1"
    assert "Pay Alice 100, please." in card.inner_text() and "test-counter" in card.inner_text()
    assert '"label": "pay-100-to-alice"' in card.locator("pre.args").inner_text()

    card.locator("details.edit summary").click()
    card.locator("textarea[name=arguments]").fill('{\n  "label": "pay-100-to-alice-ref-7"\n}')
    diff = card.locator(".diff")
    diff.locator(".added").wait_for()
    assert '+   "label": "pay-100-to-alice-ref-7"' in diff.inner_text()
    assert '-   "label": "pay-100-to-alice"' in diff.inner_text()
    page.screenshot(path=str(ARTIFACTS / "approvals-edit.png"), full_page=True)
    card.get_by_role("button", name="Approve with these arguments").click()

    page.locator(".messages .success").wait_for()
    assert "with your edits" in page.locator(".messages").inner_text()
    run = _completed(run)
    assert executions("pay-100-to-alice-ref-7") == 1 and executions("pay-100-to-alice") == 0
    invocation = ToolInvocation.objects.get(run=run)
    assert invocation.arguments == {"label": "pay-100-to-alice"}
    assert invocation.approval.arguments == {"label": "pay-100-to-alice-ref-7"}
    assert invocation.approval.channel == "page" and invocation.approval.decided_by.username == "approver"
    assert "pay-100-to-alice-ref-7" in Message.objects.filter(run=run, role="assistant").last().content

    page.click("text=History")
    history = page.locator(f'article[data-approval-id="{invocation.approval.pk}"]')
    assert "Approved by approver" in history.inner_text()
    page.screenshot(path=str(ARTIFACTS / "approvals-history.png"), full_page=True)


def test_approver_on_a_phone_rejects_and_the_model_is_told(approver_page, worker, scenario, executions):
    s = scenario(steps=counter_steps("delete-all-invoices", reply="Model saw: {last_tool_result}"))
    run = s.post("Clean up my invoices.")
    wait_for(lambda: Approval.objects.filter(run=run, status="pending").exists(), timeout=30, message="approval")

    page = approver_page(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    card = page.locator("article[data-approval-id]")
    assert "delete-all-invoices" in card.inner_text()
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")  # no sideways scrolling
    card.locator("details.reject summary").tap()
    card.locator("textarea[name=reason]").fill("Never delete invoices; archive them instead.")
    page.screenshot(path=str(ARTIFACTS / "approvals-phone-reject.png"), full_page=True)
    card.get_by_role("button", name="Reject").tap()
    page.locator(".messages .success").wait_for()

    run = _completed(run)
    assert executions("delete-all-invoices") == 0
    tool_message = s.requests()[-1]["messages"][-1]
    assert tool_message["role"] == "tool"
    assert "Never delete invoices; archive them instead." in tool_message["content"]
    answer = Message.objects.filter(run=run, role="assistant").last().content
    assert answer.startswith("Model saw: A reviewer rejected this call of test-counter")
    assert page.locator("#pending-count").inner_text() == "0"
