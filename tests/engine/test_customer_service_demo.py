"""Seed 001's customer-service system (`agentry_demo --customer-service`), end to end: the real
queue and worker, the fake model's customer_service script, the shipped order service."""

import hashlib
import io
import json

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.urls import reverse
from PIL import Image

from agents.models import Agent, AgentDelegate, AgentTool
from attachments.models import AttachmentUse
from attachments.services import attachment_read
from conversations.models import Approval, LLMCall, Message, Run, RunStatus, ToolInvocation
from conversations.selectors import run_final_answer
from demo.customer_service import (
    _AGENTS,
    AFTER_SALES,
    CUSTOMER_SERVICE_QUESTIONS,
    DEMO_WIDGET,
    FALLBACK_ANSWER,
    ORDER_FORM_QUESTION,
    ORDERS,
    PHOTO_MESSAGE,
    QUALITY,
    ROUTER,
    customer_service_seed,
    demo_widget_seed,
)
from demo.orders import order_service_start, order_service_start_or_reuse
from demo.pictures import ORDER_FORM, ORDER_FORM_NUMBER, PHOTO
from knowledge.models import Chunk, Document, KnowledgeSearch
from widgets.models import Widget


def _root(question: str) -> Run:
    return Run.objects.get(parent_run=None, agent__slug=ROUTER, conversation__title=question[:80])


def _children(run: Run) -> dict[str, Run]:
    return {child.agent.slug: child for child in Run.objects.filter(parent_run=run).select_related("agent")}


def _answer(run: Run) -> str:
    return run_final_answer(run=run).content


@pytest.mark.e2e
def test_command_answers_through_the_agent_tree(worker, fake_llm):
    get_user_model().objects.create_superuser("boss", password="x")
    out = io.StringIO()
    call_command(
        "agentry_demo",
        customer_service=True,
        llm_base_url=fake_llm.api_base,
        order_service_port=0,
        timeout=90,
        stdout=out,
    )
    printed = out.getvalue()
    faq, order, fallback, after_sales = (_root(q) for q in CUSTOMER_SERVICE_QUESTIONS)
    for run in (faq, order, fallback, after_sales):
        assert run.status == RunStatus.COMPLETED, run.error

    # FAQ: answered from the base, citing the refund passage the search returned; checked by QC.
    refund = Chunk.objects.get(document__filename="zh-refund.md")
    search = KnowledgeSearch.objects.get(run=faq)
    assert [p["citation"] for p in search.passages][0] == f"C{refund.pk}"
    assert f"[C{refund.pk}]" in _answer(faq) and "一到三个工作日" in _answer(faq)
    assert set(_children(faq)) == {QUALITY}

    # Order: the router delegated to the order agent, whose address change waited for approval.
    children = _children(order)
    assert set(children) == {ORDERS, QUALITY}
    child = children[ORDERS]
    assert child.depth == 1 and child.parent_tool_invocation.run_id == order.pk
    assert child.parent_tool_invocation.tool_name == "ask_order_agent"
    approval = Approval.objects.get(run=child)
    assert approval.status == Approval.Status.APPROVED and approval.decided_by.username == "boss"
    assert approval.invocation.tool_name == "change_address"
    calls = ToolInvocation.objects.filter(run=child).order_by("created_at")
    assert [(c.tool_name, c.status) for c in calls] == [("get_order", "succeeded"), ("change_address", "succeeded")]
    assert json.loads(calls[1].result)["previous_address"] == "成都市锦江区春熙路 8 号"
    assert "天府大道 100 号" in _answer(order) and "已付款，待发货" in _answer(order)
    assert order.children_tokens == sum(c.total_tokens for c in children.values())

    # Nothing in the FAQ: the base's fallback text is the answer, with no delegation.
    assert _answer(fallback) == FALLBACK_ANSWER
    assert KnowledgeSearch.objects.get(run=fallback).fallback
    assert not Run.objects.filter(parent_run=fallback).exists()

    # After-sales: its own agent searched the FAQ and cited the damaged-goods passage.
    damaged = Chunk.objects.get(document__filename="zh-damaged.md")
    assert set(_children(after_sales)) == {AFTER_SALES, QUALITY}
    assert KnowledgeSearch.objects.filter(run=_children(after_sales)[AFTER_SALES]).exists()
    assert f"[C{damaged.pk}]" in _answer(after_sales)

    # The printed trees show the delegation, the search and the decision.
    assert f"waiting for approval {approval.pk}" in printed and "approved by boss" in printed
    assert "↳ delegated to 订单查询智能体 (cs-orders):" in printed
    assert f"[C{refund.pk}] 退款到账时间" in printed
    assert "(fallback)" in printed
    assert f"answer: {FALLBACK_ANSWER}" in printed

    # The scanned order form: OCR read its number, and the FAQ search found it by that number.
    form = Chunk.objects.get(document__filename=ORDER_FORM.name)
    form_run = _root(ORDER_FORM_QUESTION)
    assert form_run.status == RunStatus.COMPLETED, form_run.error
    assert KnowledgeSearch.objects.get(run=form_run).passages[0]["citation"] == f"C{form.pk}"
    assert ORDER_FORM_NUMBER in _answer(form_run) and f"[C{form.pk}]" in _answer(form_run)

    # The photo: stored without its camera's EXIF, sent to the router's model (which takes
    # images) through the real provider code, and answered from what the model saw of it.
    photo_run = _root(PHOTO_MESSAGE)
    assert photo_run.status == RunStatus.COMPLETED, photo_run.error
    use = AttachmentUse.objects.select_related("attachment").get(run=photo_run)
    photo = use.attachment
    assert (photo.kind, photo.media_type, photo.width, photo.height) == ("image", "image/jpeg", 480, 360)
    assert Image.open(PHOTO).getexif() and not Image.open(io.BytesIO(attachment_read(attachment=photo))).getexif()
    message = Message.objects.get(run=photo_run, role=Message.Role.USER)
    assert message.content == PHOTO_MESSAGE and [part["attachment"] for part in message.parts] == [str(photo.pk)]
    assert "[image 480x360 #" in _answer(photo_run) and "四十八小时内" in _answer(photo_run)
    call = LLMCall.objects.get(run=photo_run)
    assert f"attachment-data-url:{photo.pk}" in json.dumps(call.request) and call.image_tokens
    assert "EXIF stripped" in printed and "[image 480x360 #" in printed


@pytest.mark.django_db
def test_seeding_twice_changes_nothing():
    first = customer_service_seed(llm_base_url="http://127.0.0.1:9/v1", order_service_url="http://127.0.0.1:9")
    counts = [m.objects.count() for m in (Agent, AgentTool, AgentDelegate, Document, Chunk)]
    chunk_ids = set(Chunk.objects.values_list("pk", flat=True))
    second = customer_service_seed(llm_base_url="http://127.0.0.1:9/v1", order_service_url="http://127.0.0.1:9")
    assert first.pk == second.pk
    assert [m.objects.count() for m in (Agent, AgentTool, AgentDelegate, Document, Chunk)] == counts
    # Unchanged documents keep their chunks, so citations printed earlier still resolve.
    assert set(Chunk.objects.values_list("pk", flat=True)) == chunk_ids
    assert counts[0] == 4 and counts[2] == 3 and counts[3] == Document.objects.filter(status="indexed").count()
    router_tools = AgentTool.objects.filter(agent=first).values_list("tool__name", flat=True)
    assert list(router_tools) == ["search_faq"]


@pytest.mark.django_db
def test_seeding_again_keeps_an_operators_edits_and_reset_undoes_them():
    urls = {"llm_base_url": "http://127.0.0.1:9/v1", "order_service_url": "http://127.0.0.1:9"}
    router = customer_service_seed(**urls)
    Agent.objects.filter(slug=ORDERS).update(system_prompt="只查询订单，不改地址。")
    AgentDelegate.objects.filter(parent=router, tool_name="ask_quality_check").update(enabled=False)
    faq = Document.objects.get(filename="zh-refund.md")
    # As the admin saves an edited document: its text and the hash of it.
    Document.objects.filter(pk=faq.pk).update(
        text="退款三天内到账。", content_hash=hashlib.sha256("退款三天内到账。".encode()).hexdigest()
    )

    customer_service_seed(**urls)
    assert Agent.objects.get(slug=ORDERS).system_prompt == "只查询订单，不改地址。"
    assert not AgentDelegate.objects.get(parent=router, tool_name="ask_quality_check").enabled
    assert Document.objects.get(pk=faq.pk).text == "退款三天内到账。"

    customer_service_seed(**urls, reset=True)
    assert Agent.objects.get(slug=ORDERS).system_prompt.startswith("# 角色\n你负责查询订单状态")
    assert AgentDelegate.objects.get(parent=router, tool_name="ask_quality_check").enabled
    assert Document.objects.get(pk=faq.pk).text != "退款三天内到账。"


def test_the_order_agent_says_it_needs_the_order_service():
    assert "scripts/dev.sh runs it on 127.0.0.1:8902" in _AGENTS[ORDERS][2]


def test_the_demo_reuses_an_order_service_already_listening():
    url, server = order_service_start()
    try:
        port = int(url.rsplit(":", 1)[1])
        reused_url, reused = order_service_start_or_reuse(port=port)
        assert (reused_url, reused) == (url, None)
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def orders():
    url, server = order_service_start()
    yield url
    server.shutdown()
    server.server_close()


def test_order_service(orders):
    assert httpx.get(f"{orders}/orders/DD20261130001").json()["status"] == "已付款，待发货"
    assert httpx.get(f"{orders}/orders/NOPE").status_code == 404
    assert httpx.get(f"{orders}/orders/DD20261130001/address").status_code == 404
    changed = httpx.post(f"{orders}/orders/DD20261130001/address", json={"address": "新地址"})
    assert changed.json()["previous_address"] == "成都市锦江区春熙路 8 号"
    assert httpx.get(f"{orders}/orders/DD20261130001").json()["address"] == "新地址"
    # A shipped order's address cannot change; a bad body is a 400.
    assert httpx.post(f"{orders}/orders/DD20261128042/address", json={"address": "新地址"}).status_code == 409
    assert httpx.post(f"{orders}/orders/DD20261130001/address", json={"address": ""}).status_code == 400
    assert httpx.post(f"{orders}/orders/DD20261130001/address", content=b"not json").status_code == 400
    assert httpx.post(f"{orders}/orders/DD20261130001/address", json=["x"]).status_code == 400


@pytest.mark.django_db
def test_the_router_gets_one_widget_whose_snippet_its_page_shows(client):
    """docs/demo.md: a newcomer finds the demo agent's widget snippet on its page."""
    router = customer_service_seed(llm_base_url="http://127.0.0.1:9/v1", order_service_url="http://127.0.0.1:9")
    owner = get_user_model().objects.create_superuser("demo-admin", password="pw")
    widget = demo_widget_seed(agent=router, owner=owner)
    assert demo_widget_seed(agent=router, owner=owner).pk == widget.pk
    assert Widget.objects.filter(agent=router).count() == 1 and widget.owner == owner
    client.force_login(owner)
    page = client.get(reverse("monitoring:agent", args=[router.slug])).content.decode()
    assert str(widget.pk) in page and DEMO_WIDGET in page
