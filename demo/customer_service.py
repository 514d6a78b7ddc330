"""Seed 001's customer-service system as a demo (§4.2, §7.3): an intent router that answers
from an FAQ knowledge base, hands orders and after-sales questions to agents of their own, and
has every drafted reply checked by a quality-check agent before it answers.

All four agents run on the shipped fake model (script fakellm/scripts/customer_service.json),
the order agent calls a small order service (demo.orders) through two HTTP tools, and a
change of address waits for a person's approval. Seeding creates what is missing and leaves what
exists as an operator left it; with `reset`, rows found by slug or name are brought back to the
demo's configuration.

The order tools call a service that lives outside the database: scripts/dev.sh runs it (and
restarts it) for as long as the stack runs, `agentry_demo --customer-service` starts one for its
own duration when none is listening, and the order agent's description says so.
"""

import hashlib
from pathlib import Path

from django.db import transaction

from agents.models import Agent, AgentDelegate, AgentTool, ModelConfig
from demo.pictures import ORDER_FORM, ORDER_FORM_NUMBER
from knowledge.models import Document, DocumentUpload, KnowledgeBase
from knowledge.services import base_index, knowledge_base_save
from tools.approval_policy import ApprovalPolicy
from tools.models import ToolDefinition
from widgets.models import Widget
from widgets.services import widget_secret_new
from workspaces.defaults import default_workspace_id

# The fake model's script for every agent of the demo (its file stem).
SCRIPT = "customer_service"
FAQ_DIR = Path(__file__).resolve().parent.parent / "knowledge" / "fixtures" / "faq"
FAQ_NAME = "客服常见问题"
# A scanned order form (demo.pictures) the base reads by OCR, beside the FAQ's Markdown.
ORDER_FORM_TITLE = f"订单确认单 {ORDER_FORM_NUMBER}（扫描件）"
# The name the fake model's script calls the FAQ's search tool by.
FAQ_TOOL = "search_faq"
FALLBACK_ANSWER = "抱歉，常见问题里没有找到这个问题的答案。已为您转接人工客服，请稍候，我们会尽快回复您。"

# Asked by `agentry_demo --customer-service`, each in a conversation of its own: one answered
# from the FAQ, an order lookup whose address change waits for approval, one the FAQ does not
# cover (the fallback answer), and an after-sales question for the after-sales agent.
CUSTOMER_SERVICE_QUESTIONS = [
    "退的钱多久能回到我的支付宝？",
    "我的订单 DD20261130001 到哪了？请把收货地址改成成都市武侯区天府大道 100 号。",
    "你们的实体门店几点关门？",
    "收到的杯子是破损的，怎么办？",
]

# Asked after them: the FAQ search finds the scanned order form by the number OCR read on it.
ORDER_FORM_QUESTION = f"订单 {ORDER_FORM_NUMBER} 买了哪些商品？"

# Sent by `agentry_demo --customer-service` after the questions, with the photo of demo.pictures:
# the router's model takes images (its model config's input kinds), so the photo goes to it as
# it is, its metadata stripped when it was stored.
PHOTO_MESSAGE = "这是我收到的杯子，请看照片。"

ROUTER, ORDERS, AFTER_SALES, QUALITY = "cs-router", "cs-orders", "cs-after-sales", "cs-quality-check"

_AGENTS = {
    ROUTER: (
        "意图识别客服",
        "# 角色\n你是在线商城的客服入口，负责判断用户的需求：订单问题交给订单查询智能体，退换货等售后问题交给"
        "售后处理智能体，其他问题先检索常见问题知识库，只根据检索到的段落回答并注明引用编号；检索为空时原样回复"
        "兜底话术。每条回复草稿先交给质检智能体，质检通过后再回复用户。",
        "Seed 001's intent router: delegates orders and after-sales, answers the rest from the FAQ.",
    ),
    ORDERS: (
        "订单查询智能体",
        "# 角色\n你负责查询订单状态，并按用户要求修改未发货订单的收货地址。修改地址需要人工审批。",
        "Looks orders up and changes an unshipped order's address (with approval) on the demo order service, "
        "which must be running: scripts/dev.sh runs it on 127.0.0.1:8902 (python -m demo.orders).",
    ),
    AFTER_SALES: (
        "售后处理智能体",
        "# 角色\n你负责退换货和商品损坏等售后问题：检索常见问题知识库，给出处理方案并注明引用编号。",
        "Drafts return and exchange plans from the FAQ knowledge base.",
    ),
    QUALITY: (
        "质检智能体",
        "# 角色\n你检查客服回复草稿是否符合规范：有依据、语气礼貌、没有编造。合格时只回复 OK，否则给出修改后的回复。",
        "Reviews a drafted reply: answers OK, or the corrected reply.",
    ),
}

_DELEGATES = [
    (ORDERS, "ask_order_agent", "订单查询、物流状态、修改收货地址：交给订单查询智能体，task 写清订单号和要做的事。"),
    (AFTER_SALES, "ask_after_sales", "退货、换货、退款、商品损坏等售后问题：交给售后处理智能体。"),
    (QUALITY, "ask_quality_check", "回复用户之前，把草稿放在 fields.draft 交给质检智能体：它回复 OK 或修改后的回复。"),
]

_ORDER_ID = {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,40}$", "description": "订单号，例如 DD20261130001"}


def _order_tools(order_service_url: str, *, reset: bool) -> list[ToolDefinition]:
    base = order_service_url.rstrip("/")
    specs = [
        (
            "get_order",
            "查询订单：状态、商品、收货地址和物流单号。",
            {"type": "object", "properties": {"order_id": _ORDER_ID}, "required": ["order_id"]},
            ToolDefinition.HttpMethod.GET,
            f"{base}/orders/{{order_id}}",
            ToolDefinition.SideEffect.READ,
            ApprovalPolicy.NEVER,
        ),
        (
            "change_address",
            "修改未发货订单的收货地址。每次修改都需要人工审批。",
            {
                "type": "object",
                "properties": {
                    "order_id": _ORDER_ID,
                    "address": {"type": "string", "minLength": 1, "maxLength": 200, "description": "新的收货地址"},
                },
                "required": ["order_id", "address"],
            },
            ToolDefinition.HttpMethod.POST,
            f"{base}/orders/{{order_id}}/address",
            ToolDefinition.SideEffect.WRITE,
            ApprovalPolicy.ALWAYS,
        ),
    ]
    tools = []
    seed = ToolDefinition.objects.update_or_create if reset else ToolDefinition.objects.get_or_create
    for name, description, parameters, method, url, side_effect, approval in specs:
        tool, _ = seed(
            workspace_id=default_workspace_id(),
            name=name,
            defaults={
                "description": description,
                "parameters": parameters,
                "kind": ToolDefinition.Kind.HTTP,
                "http_method": method,
                "http_url": url,
                "http_query_params": [],
                "http_body_argument": "",
                "side_effect": side_effect,
                "approval_policy": approval,
                "is_active": True,
            },
        )
        tools.append(tool)
    return tools


def _title(text: str, filename: str) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first.lstrip("#").strip()[:300] or filename


def faq_seed(*, reset: bool = False) -> KnowledgeBase:
    """The FAQ base with every document of knowledge/fixtures/faq and the scanned order form,
    indexed here (keyword search, no embedding model needed; the scan through OCR, in the limited
    child that reads uploaded files); Markdown documents whose text did not change keep their
    chunks. Without `reset`, an existing base and its documents keep an operator's edits (only
    missing or unindexed documents are indexed); with it, the scan is read again too (its text is
    known only once it is read)."""
    base = KnowledgeBase.objects.filter(workspace_id=default_workspace_id(), name=FAQ_NAME).first()
    if base is not None and not reset:
        return _faq_documents_seed(base=base, reset=False)
    base = base or KnowledgeBase(name=FAQ_NAME)
    base.description = "商城常见问题：退换货、退款、运费、发货、物流、发票、账号、优惠券"
    base.fallback_answer = FALLBACK_ANSWER
    base.keyword_method = KnowledgeBase._meta.get_field("keyword_method").default
    # Trigram BM25 scores below this are chance overlaps of common characters, not an answer (the
    # demo's store-hours question peaks at 3.4, its answered questions start at 11).
    base.score_threshold = 6.0
    base.embedding_model = None
    knowledge_base_save(base=base)
    ToolDefinition.objects.filter(pk=base.search_tool_id).exclude(name=FAQ_TOOL).update(name=FAQ_TOOL)
    base.search_tool.refresh_from_db()
    return _faq_documents_seed(base=base, reset=True)


def _faq_documents_seed(*, base: KnowledgeBase, reset: bool) -> KnowledgeBase:
    stale = []
    for path in sorted(FAQ_DIR.glob("*.md")):
        text = path.read_text(encoding="utf-8")
        document, created = Document.objects.get_or_create(
            base=base, filename=path.name, defaults={"title": _title(text, path.name), "text": text}
        )
        unchanged = document.content_hash == hashlib.sha256(text.encode()).hexdigest()
        if created or (reset and (not unchanged or document.status != Document.Status.INDEXED)):
            Document.objects.filter(pk=document.pk).update(
                title=_title(text, path.name), text=text, tags=[path.name[:2]], status=Document.Status.PENDING
            )
            stale.append(document.pk)
        elif document.status != Document.Status.INDEXED:
            # Never indexed (or it failed): indexed as the operator left it.
            Document.objects.filter(pk=document.pk).update(status=Document.Status.PENDING)
            stale.append(document.pk)
    scan = _order_form_seed(base=base, reset=reset)
    if scan is not None:
        stale.append(scan)
    if not stale and not reset:
        return base
    KnowledgeBase.objects.filter(pk=base.pk).update(status=KnowledgeBase.Status.INDEXING)
    base_index(base_id=base.pk, document_ids=stale)
    base.refresh_from_db()
    return base


def _order_form_seed(*, base: KnowledgeBase, reset: bool) -> int | None:
    """The scanned order form as an uploaded file left for the indexing to read; its document's
    id when it is to be read, None when it stays as it is."""
    document, created = Document.objects.get_or_create(
        base=base,
        filename=ORDER_FORM.name,
        defaults={"title": ORDER_FORM_TITLE, "source": Document.Source.UPLOAD, "tags": ["zh"]},
    )
    if not (created or reset or document.status != Document.Status.INDEXED):
        return None
    data = ORDER_FORM.read_bytes()
    DocumentUpload.objects.update_or_create(
        document=document,
        defaults={
            "filename": ORDER_FORM.name,
            "content_type": "image/png",
            "data": data,
            "size": len(data),
            "title_from_content": False,
        },
    )
    Document.objects.filter(pk=document.pk).update(status=Document.Status.PENDING)
    return document.pk


@transaction.atomic
def _agents_seed(*, model: ModelConfig, order_tools: list[ToolDefinition], faq: KnowledgeBase, reset: bool) -> Agent:
    agents = {}
    seed = Agent.objects.update_or_create if reset else Agent.objects.get_or_create
    for slug, (name, prompt, description) in _AGENTS.items():
        agents[slug], _ = seed(
            slug=slug,
            defaults={
                "name": name,
                "model_config": model,
                "system_prompt": prompt,
                "description": description,
                "time_zone": "Asia/Shanghai",
                "is_active": True,
            },
        )
    tools = {ROUTER: [faq.search_tool], ORDERS: order_tools, AFTER_SALES: [faq.search_tool]}
    for slug, attached in tools.items():
        for tool in attached:
            (AgentTool.objects.update_or_create if reset else AgentTool.objects.get_or_create)(
                agent=agents[slug], tool=tool, defaults={"approval": AgentTool.Approval.INHERIT, "enabled": True}
            )
    for child, tool_name, description in _DELEGATES:
        delegate = AgentDelegate.objects.filter(parent=agents[ROUTER], tool_name=tool_name).first()
        if delegate is not None and not reset:
            continue
        delegate = delegate or AgentDelegate(parent=agents[ROUTER], tool_name=tool_name)
        delegate.child, delegate.description, delegate.enabled = agents[child], description, True
        # clean() refuses a delegation that would make a cycle or too long a chain.
        delegate.full_clean()
        delegate.save()
    return agents[ROUTER]


def customer_service_seed(
    *, llm_base_url: str, order_service_url: str, stream: bool = True, reset: bool = False
) -> Agent:
    """Create the demo's model config, order tools, FAQ base and four agents where missing (with
    `reset`, bring them back to the demo's configuration); the router."""
    seed = ModelConfig.objects.update_or_create if reset else ModelConfig.objects.get_or_create
    model, _ = seed(
        workspace_id=default_workspace_id(),
        name="customer-service-demo",
        defaults={
            "base_url": llm_base_url,
            "model": SCRIPT,
            "temperature": 0.3,
            "top_p": 1,
            "max_tokens": 2048,
            "stream": stream,
            "max_retries": 2,
            "price_input_per_million": "0.15",
            "price_output_per_million": "1.50",
            "price_cached_input_per_million": "0.03",
            # The shipped fake server answers images, files and audio (fakellm).
            "input_kinds": ["text", "image", "audio", "file"],
        },
    )
    order_tools = _order_tools(order_service_url, reset=reset)
    faq = faq_seed(reset=reset)
    return _agents_seed(model=model, order_tools=order_tools, faq=faq, reset=reset)


DEMO_WIDGET = "客服咨询（演示）"


def demo_widget_seed(*, agent: Agent, owner) -> Widget:
    """The router's chat widget, made once: the demo agent's page then shows an embed snippet to
    copy (docs/demo.md). Its conversations are `owner`'s; its secret is made here and shown
    nowhere (the admin replaces it when a site needs one)."""
    widget = Widget.objects.filter(agent=agent, name=DEMO_WIDGET).first()
    if widget is not None:
        return widget
    widget = Widget(
        agent=agent,
        workspace_id=agent.workspace_id,
        name=DEMO_WIDGET,
        owner=owner,
        secret=widget_secret_new(),
        allowed_origins="http://127.0.0.1:8000\nhttp://localhost:8000",
        title="在线客服",
        greeting="您好，请问有什么可以帮您？",
    )
    widget.full_clean()
    widget.save()
    return widget
