"""The chat widget embedded on another origin, in real Chromium (Debian's package, driven by
Playwright), against the ASGI server and a real worker: a conversation with a streamed answer
and a tool step, kept across a reload, and forged or expired end-user tokens refused.

The page is served by a second server on another port of 127.0.0.1, which is another origin:
every call of the widget to Agentry is cross-origin, as on a customer's site."""

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import jwt
import pytest
from django.contrib.auth.models import User

from tests.support.browser import chromium_browser
from tests.support.factories import ModelConfigFactory, make_agent
from widgets.models import Widget
from widgets.tokens import end_user_token_sign

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

SECRET = "wsec_browser-secret-of-the-widget-01234567"
GUESSED = "wsec_guessed-secret-of-nobody-0123456789ab"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
SCRIPT = {
    "defaults": {"stream_chunk_delay_ms": 20},
    "scenarios": [
        {
            "match": "echo (?P<word>\\w+)",
            "steps": [
                {"tool_calls": [{"name": "test-echo", "arguments": {"text": "{word}"}}]},
                {"content": "You said {last_tool_result}, and that is all I know about it."},
            ],
        }
    ],
}


@pytest.fixture(scope="module")
def browser():
    ARTIFACTS.mkdir(exist_ok=True)
    with chromium_browser() as launched:
        yield launched


class _Pages(ThreadingHTTPServer):
    """The customer's site: one page per path, each embedding the widget with its own token."""

    pages: dict[str, str] = {}


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body = self.server.pages.get(self.path)
        self.send_response(200 if body else 404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.end_headers()
        self.wfile.write((body or "").encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def site():
    server = _Pages(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _page_html(api_base: str, widget: Widget, token: str) -> str:
    return (
        "<!DOCTYPE html><html><head><title>Shop</title>"
        # The page's own CSS, which must not reach into the panel.
        "<style>* { color: red !important; font-size: 40px !important; }</style></head>"
        "<body><h1>A shop</h1>"
        f'<script src="{api_base}/widget.js" data-widget="{widget.pk}" data-token="{token}" data-lang="en">'
        "</script></body></html>"
    )


def test_the_widget_chats_from_another_origin(api_server, worker, fake_llm, browser, site):
    fake_llm.script("widget-echo", SCRIPT)
    agent = make_agent(
        tools=["test-echo"],
        model_config=ModelConfigFactory(base_url=fake_llm.api_base, model="widget-echo", stream=True),
    )
    origin = f"http://127.0.0.1:{site.server_address[1]}"
    owner = User.objects.create_user("widget-owner", password="owner-pass-1")
    widget = Widget.objects.create(
        agent=agent,
        name="shop",
        secret=SECRET,
        owner=owner,
        allowed_origins=origin,
        title="Shop help",
    )
    now = int(time.time())
    site.pages = {
        "/": _page_html(api_server.base_url, widget, end_user_token_sign(widget=widget, end_user="alice")),
        "/forged": _page_html(
            api_server.base_url,
            widget,
            jwt.encode(
                {"w": str(widget.pk), "u": "mallory", "exp": now + 300},
                GUESSED,
                algorithm="HS256",
            ),
        ),
        "/expired": _page_html(
            api_server.base_url, widget, end_user_token_sign(widget=widget, end_user="bob", now=now - 3600)
        ),
    }

    context = browser.new_context(viewport={"width": 1000, "height": 760})
    context.set_default_timeout(30_000)
    page = context.new_page()
    page.goto(f"{origin}/")
    page.locator(".launcher").click()
    page.locator(".panel .title").filter(has_text="Shop help").wait_for()
    # Every text the answer's bubble shows on its way: streamed, it shows several.
    page.evaluate(
        """() => {
            const log = document.querySelector("[data-agentry-widget]").shadowRoot.querySelector(".log");
            window.answerTexts = new Set();
            new MutationObserver(() => {
                log.querySelectorAll(".msg.assistant").forEach((node) => window.answerTexts.add(node.textContent));
            }).observe(log, {subtree: true, childList: true, characterData: true});
        }"""
    )
    page.locator("textarea").fill("echo parrot")
    page.locator("textarea").press("Enter")
    page.locator(".msg.user").filter(has_text="echo parrot").wait_for()
    page.locator(".note.tool").filter(has_text="test-echo").wait_for()
    answer = page.locator(".msg.assistant").filter(has_text="that is all I know about it.")
    answer.wait_for()
    assert "parrot" in answer.inner_text()
    assert page.evaluate("() => window.answerTexts.size") > 3
    assert page.locator(".note.tool").inner_text() == "Tool finished: test-echo"
    # The page's CSS stops at the shadow root.
    assert answer.evaluate("node => getComputedStyle(node).fontSize") == "14px"
    page.screenshot(path=str(ARTIFACTS / "widget.png"))

    page.reload()
    # The conversation is kept: the panel opens with it.
    page.locator(".msg.user").filter(has_text="echo parrot").wait_for()
    page.locator(".msg.assistant").filter(has_text="that is all I know about it.").wait_for()

    for path, reason in [("/forged", "not signed with this widget's secret"), ("/expired", "expired")]:
        refused = context.new_page()
        refused.goto(f"{origin}{path}")
        refused.locator(".launcher").click()
        refused.locator(".error").filter(has_text=reason).wait_for()
        assert refused.locator(".msg").count() == 0
        refused.close()

    # The hosted page: the same chat on Agentry's own origin, open at once.
    hosted = context.new_page()
    token = end_user_token_sign(widget=widget, end_user="carol")
    hosted.goto(f"{api_server.base_url}/chat/{widget.pk}/?token={token}")
    assert hosted.locator(".launcher").count() == 0
    hosted.locator("textarea").fill("echo kiwi")
    hosted.locator(".send").click()
    hosted.locator(".msg.assistant").filter(has_text="kiwi").wait_for()
    context.close()


def test_the_widget_shows_a_pending_approval_and_goes_on_once_it_is_decided(
    api_server, worker, fake_llm, browser, site
):
    from conversations.models import Approval
    from engine.approvals import approval_decide

    fake_llm.script("widget-echo", SCRIPT)
    agent = make_agent(
        tools=["test-echo"],
        approval={"test-echo": "always"},
        model_config=ModelConfigFactory(base_url=fake_llm.api_base, model="widget-echo", stream=True),
    )
    origin = f"http://127.0.0.1:{site.server_address[1]}"
    owner = User.objects.create_user("widget-approver", password="owner-pass-1", is_superuser=True)
    widget = Widget.objects.create(agent=agent, name="shop", secret=SECRET, owner=owner, allowed_origins=origin)
    site.pages = {"/": _page_html(api_server.base_url, widget, end_user_token_sign(widget=widget, end_user="dora"))}

    context = browser.new_context(viewport={"width": 1000, "height": 760})
    context.set_default_timeout(30_000)
    page = context.new_page()
    page.goto(f"{origin}/")
    page.locator(".launcher").click()
    page.locator("textarea").fill("echo heron")
    page.locator("textarea").press("Enter")
    page.locator(".note.approval").filter(has_text="Waiting for approval: test-echo").wait_for()
    approval = Approval.objects.get(run__conversation__agent=agent)
    approval_decide(approval_id=approval.pk, user=owner, decision="approve", channel="page")
    page.locator(".note.approval").filter(has_text="Approval decided: test-echo").wait_for()
    page.locator(".msg.assistant").filter(has_text="You said heron").wait_for()
    context.close()
