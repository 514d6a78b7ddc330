"""The try page's attachments in real Chromium, on a real run (real worker, the fake model over
HTTP): files chosen with the attach button, dropped on the form and pasted into the message wait
as thumbnails (one removed), go with the message, and the run's timeline shows the image as a
thumbnail served by the console's download."""

import base64
import io

import pytest
from django.contrib.auth import get_user_model
from PIL import Image

from attachments.models import AttachmentUse
from conversations.models import Run
from tests.support.factories import ModelConfigFactory, make_agent
from tests.support.workers import ARTIFACTS

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

PASSWORD = "correct horse battery"
HAND_OVER = """([kind, name, data]) => {
    const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
    const transfer = new DataTransfer();
    transfer.items.add(new File([bytes], name, {type: "image/png"}));
    const init = {bubbles: true, cancelable: true};
    if (kind === "paste") {
        const paste = new ClipboardEvent("paste", {...init, clipboardData: transfer});
        document.getElementById("id_content").dispatchEvent(paste);
    } else {
        const form = document.getElementById("try-form");
        form.dispatchEvent(new DragEvent("dragover", {...init, dataTransfer: transfer}));
        form.dispatchEvent(new DragEvent("drop", {...init, dataTransfer: transfer}));
    }
}"""


def _png(size, color) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, "PNG")
    return out.getvalue()


def test_the_try_page_sends_an_image_and_the_timeline_shows_it(chromium, live_server, worker, fake_llm):
    operator = get_user_model().objects.create_user("oncall", password=PASSWORD, is_staff=True, is_superuser=True)
    agent = make_agent(
        name="Mug desk",
        model_config=ModelConfigFactory(base_url=fake_llm.api_base, model="echo", input_kinds=["text", "image"]),
    )
    context = chromium.new_context(viewport={"width": 1400, "height": 1000}, base_url=live_server.url)
    page = context.new_page()
    page.set_default_timeout(20_000)
    page.goto("/admin/login/?next=/monitor/try/")
    page.fill("#id_username", operator.username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url("**/monitor/try/*")
    page.goto(f"/monitor/try/?agent={agent.pk}")

    with page.expect_file_chooser() as chooser:
        page.click("#try-attach")
    chooser.value.set_files([{"name": "mug.png", "mimeType": "image/png", "buffer": _png((40, 30), (200, 30, 30))}])
    page.evaluate(HAND_OVER, ["drop", "dropped.png", base64.b64encode(_png((8, 8), (0, 0, 255))).decode()])
    page.evaluate(HAND_OVER, ["paste", "pasted.png", base64.b64encode(_png((16, 16), (0, 255, 0))).decode()])
    page.locator("#try-tray img").nth(2).wait_for()
    page.get_by_role("button", name="Remove dropped.png").click()
    page.get_by_role("button", name="Remove pasted.png").click()
    assert page.locator("#try-tray .item").count() == 1

    page.fill("#id_content", "what is broken here?")
    page.click("#try-send")
    page.wait_for_selector('section.try-run[data-status="completed"]')
    assert page.locator("#transcript .attachment-parts img").get_attribute("alt") == "mug.png"
    # The fake model saw the image through the provider's wire: its size and average colour.
    assert page.locator(".bubble.assistant").last.inner_text() == "what is broken here?\n[image 40x30 #c81e1e]"
    assert page.locator("#try-tray .item").count() == 0
    run = Run.objects.get(pk=page.locator("section.try-run").first.get_attribute("data-run"))
    assert [use.attachment.name for use in AttachmentUse.objects.filter(run=run)] == ["mug.png"]
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "try-page-attachment.png"), full_page=True)

    page.locator("section.try-run h3 a").first.click()
    page.wait_for_selector("#run-question-parts img")
    page.wait_for_function(
        "() => { const img = document.querySelector('#run-question-parts img'); "
        "return img.complete && img.naturalWidth === 40; }"
    )
    assert page.locator("#steps .media-tokens").first.inner_text().startswith("of the prompt: images ")
    page.screenshot(path=str(ARTIFACTS / "timeline-attachment.png"), full_page=True)
    context.close()
