"""The chat widget embedded on another origin, in real Chromium (Debian's package, driven by
Playwright), against the ASGI server and a real worker: a conversation with a streamed answer
and a tool step, kept across a reload, forged or expired end-user tokens refused, and images
attached by the file chooser, a drop and a paste, sent and shown as thumbnails again after a
reload.

The page is served by a second server on another port of 127.0.0.1, which is another origin:
every call of the widget to Agentry is cross-origin, as on a customer's site."""

import base64
import io
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import jwt
import pytest
from django.contrib.auth.models import User
from PIL import Image

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


def _png(size, color) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, "PNG")
    return out.getvalue()


# A File made in the page from base64, given to the panel as a drop or to the text box as a paste.
HAND_OVER = """([kind, name, data]) => {
    const root = document.querySelector("[data-agentry-widget]").shadowRoot;
    const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
    const transfer = new DataTransfer();
    transfer.items.add(new File([bytes], name, {type: "image/png"}));
    if (kind === "paste") {
        root.querySelector("textarea").dispatchEvent(
            new ClipboardEvent("paste", {clipboardData: transfer, bubbles: true, cancelable: true}));
    } else {
        const panel = root.querySelector(".panel");
        panel.dispatchEvent(new DragEvent("dragover", {dataTransfer: transfer, bubbles: true, cancelable: true}));
        panel.dispatchEvent(new DragEvent("drop", {dataTransfer: transfer, bubbles: true, cancelable: true}));
    }
}"""


def test_the_widget_attaches_images_and_shows_their_thumbnails(api_server, worker, fake_llm, browser, site):
    agent = make_agent(
        model_config=ModelConfigFactory(base_url=fake_llm.api_base, model="echo", input_kinds=["text", "image"]),
    )
    origin = f"http://127.0.0.1:{site.server_address[1]}"
    owner = User.objects.create_user("widget-attacher", password="owner-pass-1")
    widget = Widget.objects.create(agent=agent, name="shop", secret=SECRET, owner=owner, allowed_origins=origin)
    site.pages = {"/": _page_html(api_server.base_url, widget, end_user_token_sign(widget=widget, end_user="erin"))}

    context = browser.new_context(viewport={"width": 1000, "height": 760})
    context.set_default_timeout(30_000)
    page = context.new_page()
    page.goto(f"{origin}/")
    page.locator(".launcher").click()
    page.locator(".panel .title").wait_for()
    attach = page.get_by_role("button", name="Attach a file")
    # A button, so the keyboard reaches it (Tab, then Enter or Space); opened here by a click, which
    # a loaded machine cannot race with the widget focusing its text box as it starts.
    attach.focus()
    assert attach.evaluate("(node) => node.tagName === 'BUTTON' && node.getRootNode().activeElement === node")
    with page.expect_file_chooser() as chooser:
        attach.click()
    chooser.value.set_files([{"name": "mug.png", "mimeType": "image/png", "buffer": _png((40, 30), (200, 30, 30))}])
    page.evaluate(HAND_OVER, ["drop", "dropped.png", base64.b64encode(_png((8, 8), (0, 0, 255))).decode()])
    page.evaluate(HAND_OVER, ["paste", "pasted.png", base64.b64encode(_png((16, 16), (0, 255, 0))).decode()])
    page.locator(".tray img.thumb").nth(2).wait_for()
    assert page.locator(".tray img.thumb").evaluate_all("nodes => nodes.map((n) => n.alt)") == [
        "mug.png",
        "dropped.png",
        "pasted.png",
    ]
    # Thumbnails before sending are the files themselves, never an upload.
    assert page.locator(".tray img.thumb").first.evaluate("n => n.src").startswith("blob:")
    page.get_by_role("button", name="Remove dropped.png").click()
    page.get_by_role("button", name="Remove pasted.png").press("Enter")
    assert page.locator(".tray .item").count() == 1

    page.locator("textarea").fill("what is broken here?")
    page.locator("textarea").press("Enter")
    # The fake model saw the image through the provider's wire: its size and average colour.
    page.locator(".msg.assistant").filter(has_text="what is broken here?\n[image 40x30 #c81e1e]").wait_for()
    thumb = page.locator(".log .parts img.thumb")
    assert thumb.count() == 1 and thumb.evaluate("n => n.naturalWidth") == 40
    assert page.locator(".tray .item").count() == 0
    page.screenshot(path=str(ARTIFACTS / "widget-attachment.png"))

    # After a reload the thumbnail is the end user's download, fetched with their token.
    page.reload()
    page.locator(".msg.user").filter(has_text="what is broken here?").wait_for()
    stored = page.locator(".log .parts img.thumb")
    stored.wait_for()
    page.wait_for_function(
        """() => {
            const img = document.querySelector("[data-agentry-widget]").shadowRoot.querySelector(".log .parts img");
            return img && img.complete && img.naturalWidth === 40;
        }"""
    )
    assert stored.get_attribute("alt") == "mug.png"

    # A file past the limit (20 MB by default) is refused in the widget's language before any upload.
    page.evaluate(
        """() => {
            const root = document.querySelector("[data-agentry-widget]").shadowRoot;
            const transfer = new DataTransfer();
            transfer.items.add(new File([new Uint8Array(30 * 1000 * 1000)], "huge.png", {type: "image/png"}));
            root.querySelector("textarea").dispatchEvent(
                new ClipboardEvent("paste", {clipboardData: transfer, bubbles: true, cancelable: true}));
        }"""
    )
    page.locator(".error").filter(has_text="huge.png is larger than").wait_for()
    assert page.locator(".tray .item").count() == 0
    context.close()
