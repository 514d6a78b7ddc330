"""The operator pages and admin pages in real Chromium on a 1,366 × 768 laptop screen: none is
wider than the window, the language switcher sits in the header of every page, the runs list
keeps its cost, created and duration columns on screen, and the tool form opens the section of
the kind chosen. Screenshots of the widest pages are kept in test-artifacts/."""

import json
import re

import pytest

from tests.console.operator_pages import PASSWORD, pages, seed
from tests.support.workers import ARTIFACTS
from tools.models import ToolDefinition

pytestmark = pytest.mark.browser

LAPTOP = {"width": 1366, "height": 768}


@pytest.fixture
def seeded(transactional_db):
    return seed()


@pytest.fixture
def laptop(chromium, live_server, seeded):
    context = chromium.new_context(viewport=LAPTOP, base_url=live_server.url)
    page = context.new_page()
    page.set_default_timeout(20_000)
    page.goto("/admin/login/?next=/admin/")
    page.fill("#id_username", seeded.operator.username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(re.compile(r"/admin/$"))
    yield page
    context.close()


def _width(page) -> dict:
    return page.evaluate(
        "({scroll: document.documentElement.scrollWidth, client: document.documentElement.clientWidth})"
    )


def _hidden_columns(page) -> int:
    """How far a changelist's table runs past its box, in pixels: the admin scrolls the table
    inside its box, so the page keeps its width while the last columns are out of sight."""
    return page.evaluate(
        "(() => { const box = document.querySelector('#changelist .results');"
        " return box ? Math.max(0, box.scrollWidth - box.clientWidth) : 0; })()"
    )


def test_no_page_is_wider_than_a_laptop_screen(laptop, seeded):
    ARTIFACTS.mkdir(exist_ok=True)
    too_wide = {}
    for url in pages(seeded):
        response = laptop.goto(url)
        assert response.status == 200, url
        width = _width(laptop)
        hidden = _hidden_columns(laptop)
        if width["scroll"] > width["client"] + 1 or hidden > 1:
            too_wide[url] = width["scroll"] + hidden
            name = re.sub(r"[^a-z0-9]+", "-", url.lower()).strip("-") or "root"
            laptop.screenshot(path=str(ARTIFACTS / f"too-wide-{name}.png"), full_page=True)
    for url, scroll in too_wide.items():
        print(f"{url}: {scroll} px wide in a {LAPTOP['width']} px window (a list's hidden columns included)")
    assert not too_wide, f"{len(too_wide)} page(s) overflow horizontally (listed above): {too_wide}"


def test_the_language_switcher_is_in_the_header_of_every_kind_of_page(laptop, seeded):
    for url in ("/admin/", "/monitor/", "/approvals/", f"/approvals/{seeded.approval.pk}/", "/"):
        laptop.goto(url)
        switchers = laptop.locator(".language-switcher")
        assert switchers.count() == 1, url
        assert laptop.locator("#header .language-switcher, header .language-switcher").count() == 1, url
        box = switchers.bounding_box()
        assert box["y"] < 120, (url, box)


def test_the_runs_list_fits_and_marks_only_estimated_usage(laptop, seeded):
    laptop.goto("/admin/conversations/run/")
    assert _hidden_columns(laptop) <= 1
    results = laptop.locator("#changelist .results").bounding_box()
    for column in ("cost_text", "created", "duration"):
        cell = laptop.locator(f"#result_list td.field-{column}").first.bounding_box()
        assert cell["x"] + cell["width"] <= results["x"] + results["width"] + 1, column
    marks = laptop.locator("#result_list td.field-estimated").all_inner_texts()
    # Five runs in the seed, one of them with estimated usage: one mark, the others blank.
    assert len(marks) == 5 and sorted(mark.strip() for mark in marks) == ["", "", "", "", "≈"]
    # The model calls' list marks them the same way.
    laptop.goto("/admin/conversations/llmcall/")
    assert laptop.locator("#result_list td.field-estimated img").count() == 0
    assert laptop.locator("#result_list td.field-estimated", has_text="≈").count() == 0


def test_the_agent_page_shows_its_tools_compactly_and_its_versions(laptop, seeded):
    laptop.goto(f"/admin/agents/agent/{seeded.agent.pk}/change/")
    assert _width(laptop)["scroll"] <= LAPTOP["width"]
    versions = laptop.locator("#agent-versions-section")
    assert versions.locator("tr[data-version]").count() == 1
    assert "首次发布" in versions.inner_text()
    versions.get_by_role("link", name="Versions and releases").click()
    laptop.wait_for_url(re.compile(rf"/admin/agents/agent/{seeded.agent.pk}/versions/$"))
    laptop.locator("#publish-form").wait_for()


def test_choosing_a_tool_kind_opens_its_section_and_parameters_start_from_a_schema(laptop):
    laptop.goto("/admin/tools/tooldefinition/add/")
    starter = json.loads(laptop.locator("#id_parameters").input_value())
    assert starter == {"type": "object", "properties": {}, "required": []}
    # A new tool is a python tool until the kind changes: its section is the one open.
    assert laptop.locator("fieldset.kind-python details").get_attribute("open") is not None
    assert laptop.locator("fieldset.kind-http details").get_attribute("open") is None
    laptop.select_option("#id_kind", ToolDefinition.Kind.HTTP)
    laptop.wait_for_function("document.querySelector('fieldset.kind-http details').open")
    assert laptop.locator("#id_http_url").is_visible()
    assert laptop.locator("fieldset.kind-mcp details").get_attribute("open") is None
