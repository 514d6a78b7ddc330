"""The operator's pages in real Chromium, in English and in Simplified Chinese, on a 1,366 × 768
laptop screen: axe-core finds no WCAG 2 A/AA violation, Tab reaches every control in order with
a visible focus and leaves the page at the end, no page scrolls sideways, and every control has a
name (tests/support/accessibility.py). A screenshot of each page in each language is kept in
test-artifacts/a11y-<page>-<language>.png.

A new page is one line in PAGES: its name and how to find its URL in the seeded rows."""

import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse

from tests.console.operator_pages import _png, seed
from tests.support.accessibility import LAPTOP, page_problems
from tests.support.workers import ARTIFACTS
from triggers.models import Hook

pytestmark = pytest.mark.browser

PAGES = {
    "front-door": lambda seeded: "/",
    "admin-index": lambda seeded: reverse("admin:index"),
    "agent-hub": lambda seeded: reverse("monitoring:agent", args=[seeded.agent.slug]),
    "runs": lambda seeded: reverse("admin:conversations_run_changelist"),
    "runs-filtered": lambda seeded: (
        reverse("admin:conversations_run_changelist")
        + f"?agent__id__exact={seeded.agent.pk}&cost_min=0&cost_max=100&duration_max=3600&tag=orders"
    ),
    "thread": lambda seeded: reverse("monitoring:conversation", args=[seeded.run.conversation_id]),
    "playground": lambda seeded: reverse("monitoring:playground", args=[seeded.agent.slug]),
    "run-timeline": lambda seeded: reverse("monitoring:run", args=[seeded.run.pk]),
    # A message's image as a thumbnail, its description as a pre-step, a call's image tokens.
    "run-timeline-attachments": lambda seeded: reverse("monitoring:run", args=[seeded.pictured.pk]),
    "run-admin": lambda seeded: reverse("admin:conversations_run_change", args=[seeded.run.pk]),
    "dashboard": lambda seeded: reverse("monitoring:dashboard"),
    "approvals": lambda seeded: reverse("approvals:queue"),
    "approval-history": lambda seeded: reverse("approvals:history"),
    "eval-compare": lambda seeded: (
        reverse("evals:compare") + f"?baseline={seeded.baseline.pk}&candidate={seeded.candidate.pk}"
    ),
    "memories": lambda seeded: reverse("admin:memory_memory_changelist"),
    "hook-form": lambda seeded: reverse("admin:triggers_hook_change", args=[Hook.objects.get().pk]),
    "try": lambda seeded: reverse("monitoring:try"),
    "agents": lambda seeded: reverse("admin:agents_agent_changelist"),
    "agent-form": lambda seeded: reverse("admin:agents_agent_change", args=[seeded.agent.pk]),
}
# The browser's Accept-Language for each of the site's languages, and the <html lang> it gets.
LANGUAGES = {"en": ("en-US", "en"), "zh-hans": ("zh-CN", "zh-hans")}


@pytest.fixture
def seeded(transactional_db):
    return seed()


def _signed_in(chromium, live_server, user, *, locale="en-US"):
    """A laptop-sized browser context signed in as `user` through the session cookie: the
    login form is not the page under test."""
    context = chromium.new_context(viewport=LAPTOP, base_url=live_server.url, locale=locale)
    client = Client()
    client.force_login(user)
    session = client.cookies[settings.SESSION_COOKIE_NAME].value
    context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": session, "url": live_server.url}])
    return context


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("name", PAGES)
def test_the_page_is_accessible(chromium, live_server, seeded, name, language):
    locale, lang = LANGUAGES[language]
    context = _signed_in(chromium, live_server, seeded.operator, locale=locale)
    try:
        page = context.new_page()
        page.set_default_timeout(20_000)
        response = page.goto(PAGES[name](seeded))
        assert response.status == 200, page.url
        page.wait_for_load_state("networkidle")
        assert page.locator("html").get_attribute("lang") == lang
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"a11y-{name}-{language}.png"), full_page=True)
        problems = page_problems(page)
    finally:
        context.close()
    assert not problems, f"{len(problems)} accessibility problem(s) on {name} ({language}):\n" + "\n".join(problems)


CLEAN = """<!doctype html><html lang="en"><head><title>Clean</title></head><body><main><h1>Clean</h1>
<form><label for="city">City</label> <input id="city"> <button>Look up</button></form>
<p>See <a href="#help">the help</a>.</p></main></body></html>"""
# One of each problem: a box with no label, a button whose focus is invisible, a block wider
# than the window, a link Tab never stops on (its focus is sent on), and a box that holds focus.
FAULTY = """<!doctype html><html lang="en"><head><title>Faulty</title>
<style>#quiet:focus { outline: none; }</style></head><body><main><h1>Faulty</h1>
<input id="bare"> <button id="quiet">Go</button>
<a href="#a" id="sent-on" onfocus="document.getElementById('holder').focus()">On</a>
<div id="wide" style="width: 2000px">wide</div>
<label>Holds <input id="holder" onkeydown="if (event.key === 'Tab') event.preventDefault()"></label>
</main></body></html>"""


def test_the_try_page_with_files_waiting_is_accessible(chromium, live_server, seeded):
    """The try page's tray (a thumbnail and a chip, each with its remove button) passes the same
    checks as its empty state."""
    context = _signed_in(chromium, live_server, seeded.operator)
    try:
        page = context.new_page()
        page.set_default_timeout(20_000)
        page.goto(reverse("monitoring:try"))
        page.wait_for_load_state("networkidle")
        page.locator("#try-files").set_input_files(
            [
                {"name": "发票.png", "mimeType": "image/png", "buffer": _png()},
                {"name": "notes.txt", "mimeType": "text/plain", "buffer": "订单 42".encode()},
            ]
        )
        page.locator("#try-tray .item").nth(1).wait_for()
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "a11y-try-attachments-en.png"), full_page=True)
        problems = page_problems(page)
    finally:
        context.close()
    assert not problems, "\n".join(problems)


def test_the_checks_report_each_kind_of_problem_and_pass_a_clean_page(chromium):
    context = chromium.new_context(viewport=LAPTOP)
    try:
        page = context.new_page()
        page.set_content(CLEAN)
        assert page_problems(page) == []
        page.set_content(FAULTY)
        problems = "\n".join(page_problems(page))
    finally:
        context.close()
    assert "axe label (critical): #bare" in problems
    assert 'name: control without an accessible name: <input id="bare">' in problems
    assert "keyboard: no visible focus indicator on button#quiet" in problems
    assert "overflow: the page is 2" in problems and "widest: div#wide" in problems
    assert "keyboard: 1 control(s) never get focus with Tab" in problems and 'id="sent-on"' in problems
    assert "keyboard: focus stays on input#holder" in problems


def test_a_dashboard_refresh_leaves_keyboard_focus_where_it_was(chromium, live_server, seeded):
    context = _signed_in(chromium, live_server, seeded.operator)
    # The page's clock is the test's: the panel's refresh comes when the test moves time on.
    context.clock.install()
    try:
        page = context.new_page()
        page.set_default_timeout(20_000)
        page.goto(reverse("monitoring:dashboard"))
        page.wait_for_load_state("networkidle")
        link = page.locator("#monitor a.agent-hub-link").first
        link.focus()
        href = link.get_attribute("href")
        seconds = float(page.locator("#monitor").get_attribute("data-refresh-seconds"))
        page.clock.run_for(int(seconds * 1000))
        page.wait_for_function("document.getElementById('monitor').dataset.refreshedAt")
        focused = page.evaluate(
            "({inPanel: document.getElementById('monitor').contains(document.activeElement),"
            " href: document.activeElement.getAttribute('href')})"
        )
    finally:
        context.close()
    assert focused == {"inPanel": True, "href": href}
