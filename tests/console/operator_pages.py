"""Every page an operator opens, over a database that holds at least one row of every model the
admin shows: for the sweeps that look at all of them at once (the Chinese sweep, the layout test).

`seed()` writes the rows; `pages()` lists the URLs (admin index and app indexes, every registered
ModelAdmin's changelist, add and change page, the agent's release pages, the operator pages)."""

import io
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.test import RequestFactory
from django.urls import reverse
from django.utils import timezone
from PIL import Image

from agents.models import AgentDelegate, AgentUsageDay, GuardrailRule
from agents.releases import version_publish
from agents.services import agent_version_current
from alerts.models import AlertFiring, AlertRule
from attachments.models import PartText
from attachments.parts import parts_of
from attachments.services import attachment_store
from chatbots.models import ChatChannel, ChatEvent, ChatUser
from conversations.models import (
    Approval,
    EndUserErasure,
    GuardrailTrigger,
    LLMCall,
    Message,
    Run,
    RunEvent,
    RunFeedback,
    RunPurge,
    RunRequest,
    ToolInvocation,
)
from conversations.tokens import api_token_create
from evals.metrics import eval_metrics
from evals.models import (
    EvalCase,
    EvalResult,
    EvalRun,
    EvalRunStatus,
    EvalSuite,
    OnlineEvaluator,
    OnlineScore,
    ReleaseGate,
)
from evals.selectors import eval_results_data
from knowledge.models import Document, EmbeddingCall, KnowledgeSearch
from memory.models import Memory, MemoryChange
from notifications.models import Webhook, WebhookAttempt, WebhookDelivery
from reviews.models import ReviewItem, ReviewLabel, ReviewQueue
from tests.knowledge.helpers import make_base
from tests.support.factories import ModelConfigFactory, make_agent
from tests.support.ledger import ledger_call, ledger_run
from tests.support.ledger_seed import ledger_seed
from tools.models import MCPServer, ToolDefinition
from triggers.models import Hook, HookDelivery, Schedule, ScheduleFire
from widgets.models import Widget

PASSWORD = "correct horse battery"


@dataclass
class Seeded:
    operator: object
    agent: object
    run: object
    approval: Approval
    baseline: EvalRun
    candidate: EvalRun
    fork: Run
    # A run whose message carried an image, described for the model before its step.
    pictured: Run | None = None


def _eval_run(suite: EvalSuite, case: EvalCase, version, run: Run, *, passed: bool) -> EvalRun:
    eval_run = EvalRun.objects.create(
        suite=suite, agent_version=version, status=EvalRunStatus.COMPLETED, finished_at=timezone.now()
    )
    EvalResult.objects.create(
        eval_run=eval_run,
        case=case,
        repetition=1,
        run=run,
        scored=True,
        passed=passed,
        checks=[{"kind": "answer_contains", "passed": passed, "reason": "晴"}],
        tool_calls=1,
        valid_tool_calls=1,
        model_turns=2,
        total_tokens=340,
        cost=Decimal("0.00042"),
        latency_ms=900,
    )
    eval_run.metrics = eval_metrics(eval_results_data(eval_run=eval_run), repetitions=1)
    eval_run.save(update_fields=["metrics"])
    return eval_run


def _png() -> bytes:
    """A small photo, as a customer would attach one."""
    out = io.BytesIO()
    Image.new("RGB", (32, 24), (200, 120, 40)).save(out, "PNG")
    return out.getvalue()


def seed() -> Seeded:
    """One or more rows of every model the admin lists, their texts in Chinese where an operator
    would type Chinese, so that what reads as English on a page comes from the code."""
    now = timezone.now()
    # The first user's change page is the one checked: one without a password shows no hash.
    get_user_model().objects.create_user("kefu", first_name="小", last_name="王")
    operator = get_user_model().objects.create_user(
        "yunwei", password=PASSWORD, is_staff=True, is_superuser=True, email="yunwei@example.com"
    )
    model = ModelConfigFactory(name="通义", model="qwen-plus", api_key="sk-test-0123456789")
    agent = make_agent(
        name="天气助手",
        slug="weather",
        description="回答天气问题",
        system_prompt="你是天气助手。",
        model_config=model,
        tools=["test-counter", "test-echo"],
        retention_days=30,
    )
    helper = make_agent(name="路线助手", slug="route", system_prompt="你是路线助手。", model_config=model)
    AgentDelegate.objects.create(parent=agent, child=helper, tool_name="route-helper", description="规划路线")
    GuardrailRule.objects.create(agent=agent, side="input", kind="blocked_terms", terms="密码", action="flag")
    version_publish(agent=agent, user=operator, note="首次发布")
    AgentUsageDay.objects.create(
        agent=agent, day=now.date(), shard=1, total_tokens=340, cost=Decimal("0.0004"), calls=2
    )

    runs = ledger_seed(agent, 2, owner=operator, created_at=now - timedelta(minutes=5))
    run = runs[0]
    Run.objects.filter(pk=run.pk).update(started_at=now - timedelta(minutes=5), usage_estimated=True)
    # A question as long as the runs list shows (it cuts at 80 characters).
    RunRequest.objects.filter(run=run).update(content="我的包裹到哪里了？退款什么时候到账？能不能改成送到公司？" * 4)
    rule = GuardrailRule.objects.get(agent=agent)
    GuardrailTrigger.objects.create(
        run=run, side="input", rule_id=rule.pk, kind="blocked_terms", action="flag", matched="密码"
    )
    RunFeedback.objects.create(run=run, rating=-1, comment="城市不对", created_by=operator)
    EndUserErasure.objects.create(
        workspace=agent.workspace, end_user_digest="0" * 64, requested_by=operator, channel="admin", counts={}
    )
    memory = Memory.objects.create(
        scope=f"agent:{agent.pk}", owner=operator, end_user="用户-1", kind="fact", statement="住在成都", source_run=run
    )
    MemoryChange.objects.create(
        memory=memory,
        scope=memory.scope,
        owner=operator,
        end_user=memory.end_user,
        action="add",
        source="extraction",
        after=memory.statement,
        run=run,
    )
    # The second run as a fork of the first (engine.forks): its step 1 copied, its tool result edited.
    fork = runs[1]
    Run.objects.filter(pk=fork.pk).update(
        forked_from=run,
        fork_step=1,
        fork_change={
            "kind": "tool_result",
            "tool_call_id": f"call-{fork.pk.hex[:8]}",
            "result": "晴转多云",
            "by": operator.username,
            "by_id": operator.pk,
            "real_writes": False,
        },
    )
    LLMCall.objects.filter(run=fork, iteration=1).update(
        copied=True, prompt_tokens=0, completion_tokens=0, total_tokens=0, cost=0
    )
    ToolInvocation.objects.filter(run=fork).update(copied=True, simulated=True, result="晴转多云")
    fork.refresh_from_db()
    # One run waiting for a decision (the approval queue), one still running (the dashboard).
    waiting = ledger_run(agent, status="awaiting_approval", stop_reason="")
    call = ledger_call(waiting, started_at=now)
    invocation = ToolInvocation.objects.create(
        run=waiting,
        llm_call=call,
        tool_name="test-counter",
        tool_call_id="call_1",
        arguments={"label": "退款-90"},
        status="awaiting_approval",
        idempotency_key=f"{waiting.pk}:call_1",
    )
    approval = Approval.objects.create(
        invocation=invocation,
        run=waiting,
        tool_call_id="call_1",
        arguments={"label": "退款-90"},
        arguments_hash="0" * 64,
        expires_at=now + timedelta(hours=1),
    )
    ledger_run(agent, status="running", stop_reason="", created_at=now - timedelta(minutes=1))

    base = make_base(name="常见问题", fallback_answer="抱歉，没有找到答案。", embedding_model=model)
    document = Document.objects.create(base=base, title="退货政策", text="七天内可以退货。")
    KnowledgeSearch.objects.create(base=base, run=run, tool_call_id="call-k", query="退货", top_k=3)
    embedding = LLMCall.objects.create(
        iteration=1, attempt=1, model_config=model, provider=model.provider, model_name=model.model, request={}
    )
    EmbeddingCall.objects.create(llm_call=embedding, base=base, document=document)

    ToolDefinition.objects.create(
        name="order-lookup",
        description="查询订单",
        kind="http",
        http_method="GET",
        http_url="https://orders.example.com/orders/{id}",
    )
    server = MCPServer.objects.create(name="笔记", transport="streamable_http", url="https://mcp.example.com/mcp")
    ToolDefinition.objects.create(name="notes-search", description="搜索笔记", kind="mcp", mcp_server=server)

    alert = AlertRule.objects.create(name="费用告警", kind="cost", threshold=Decimal("5"), agent=agent)
    AlertFiring.objects.create(rule=alert, value=Decimal("6"), threshold=Decimal("5"), summary="费用超过 5")

    suite = EvalSuite.objects.create(name="基础", description="基础用例")
    case = EvalCase.objects.create(
        suite=suite,
        name="天气",
        position=1,
        turns=[{"role": "user", "content": "明天杭州天气？"}],
        answer_contains="晴",
    )
    version = agent_version_current(agent=agent)
    baseline = _eval_run(suite, case, version, runs[0], passed=True)
    candidate = _eval_run(suite, case, version, runs[1], passed=False)
    ReleaseGate.objects.create(agent=agent, suite=suite)
    queue = ReviewQueue.objects.create(
        name="差评复核", agent=agent, rubric=[{"name": "语气", "choices": ["得体", "生硬"]}], guidelines="核对答案"
    )
    item = ReviewItem.objects.create(queue=queue, run_id=runs[0].pk, reason=ReviewItem.Reason.NEGATIVE_FEEDBACK)
    ReviewLabel.objects.create(
        item=item,
        reviewer=operator,
        verdict=ReviewLabel.Verdict.BAD,
        labels={"语气": "生硬"},
        corrected_answer="明天晴",
    )
    evaluator = OnlineEvaluator.objects.create(
        agent=agent, name="语气", kind="judge", judge_model=model, rubric="回答礼貌", sample_rate=0.1
    )
    OnlineScore.objects.create(
        evaluator=evaluator, run=run, agent_version=version, reason="sample", score=0.5, explanation="0.5: 稍显生硬"
    )

    api_token_create(user=operator, name="应用")
    webhook = Webhook.objects.create(url="https://hooks.example.com/agentry", agent=agent, secret="whsec-0123456789")
    delivery = WebhookDelivery.objects.create(
        webhook=webhook,
        run_event=RunEvent.objects.filter(run=run).last(),
        event_type="run.completed",
        payload={"run": str(run.pk)},
        status="delivered",
        attempts=1,
    )
    WebhookAttempt.objects.create(delivery=delivery, number=1, http_status=200, duration_ms=12)
    RunPurge.objects.create(
        agent=agent,
        agent_slug=agent.slug,
        retention_days=30,
        cutoff=now - timedelta(days=30),
        counts={"runs": 3},
        policy_set_by=operator,
        policy_set_by_username=operator.username,
        finished_at=now,
    )
    schedule = Schedule.objects.create(
        agent=agent,
        name="每日早报",
        cron="0 9 * * *",
        message="请汇总{{ date }}的{{ vars.city }}天气。",
        variables={"city": "成都"},
        end_user="u-1001",
        owner=operator,
        next_fire_at=now + timedelta(hours=1),
        last_fired_at=now - timedelta(hours=23),
    )
    ScheduleFire.objects.create(schedule=schedule, fire_at=now - timedelta(hours=23), outcome="started", run=run)
    ScheduleFire.objects.create(schedule=schedule, fire_at=now - timedelta(hours=47), outcome="skipped_running")
    hook = Hook.objects.create(
        agent=agent, name="工单系统", secret="whsec_test", message="新工单：{{ payload.title }}", owner=operator
    )
    HookDelivery.objects.create(hook=hook, delivery_id="工单-42", signature="0" * 64, run=run)
    Widget.objects.create(
        agent=agent,
        name="官网客服",
        secret="wsec_test",
        allowed_origins="https://shop.example.com",
        owner=operator,
        title="在线客服",
        greeting="您好，请问有什么可以帮您？",
    )
    bot = ChatChannel.objects.create(
        agent=agent,
        name="电报机器人",
        service="telegram",
        secrets='{"bot_token": "t", "secret_token": "s"}',
        owner=operator,
    )
    ChatUser.objects.create(channel=bot, chat_user_id="1111111", end_user="顾客-7", account=operator)
    ChatEvent.objects.create(channel=bot, event_id="10000", chat_user_id="1111111", outcome="started", run=run)
    invoice = attachment_store(
        workspace=agent.workspace, uploaded_by=operator, owner=operator, end_user="顾客-7", data=_png(), name="发票.png"
    )
    pictured = ledger_run(agent, finished_at=now)
    Message.objects.create(
        conversation=pictured.conversation,
        run=pictured,
        role="user",
        order=1,
        content="这张发票的金额是多少？",
        parts=parts_of([invoice]),
    )
    described = ledger_call(pictured, started_at=now, iteration=1)
    LLMCall.objects.filter(pk=described.pk).update(purpose=LLMCall.Purpose.DESCRIPTION)
    step = ledger_call(pictured, started_at=now, iteration=1)
    LLMCall.objects.filter(pk=step.pk).update(image_tokens=85)
    PartText.objects.create(
        attachment=invoice, method="description", text="一张发票，金额 120 元", run=pictured, llm_call=described
    )
    return Seeded(
        operator=operator,
        agent=agent,
        run=run,
        approval=approval,
        baseline=baseline,
        candidate=candidate,
        fork=fork,
        pictured=pictured,
    )


def models_without_rows() -> list[str]:
    """Registered admin models with no row: their change pages would go unchecked."""
    return [model._meta.label for model in admin.site._registry if not model._default_manager.exists()]


def pages(seeded: Seeded) -> list[str]:
    """Every operator page and admin page, each with a real row where it shows one."""
    urls = [reverse("admin:index"), reverse("admin:password_change")]
    app_labels = sorted({model._meta.app_label for model in admin.site._registry})
    urls += [reverse("admin:app_list", args=[label]) for label in app_labels]
    request = RequestFactory().get("/")
    request.user = seeded.operator
    for model, model_admin in admin.site._registry.items():
        info = model._meta.app_label, model._meta.model_name
        urls.append(reverse("admin:{}_{}_changelist".format(*info)))
        # Audit rows have no add page.
        if model_admin.has_add_permission(request):
            urls.append(reverse("admin:{}_{}_add".format(*info)))
        row = model._default_manager.order_by("pk").first()
        urls.append(reverse("admin:{}_{}_change".format(*info), args=[row.pk]))
    agent = seeded.agent
    urls += [
        reverse("admin:agents_agent_versions", args=[agent.pk]),
        reverse("admin:agents_agent_diff", args=[agent.pk]) + "?a=1&b=1",
        reverse("admin:tools_tooldefinition_import_openapi"),
        reverse("admin:evals_evalsuite_import"),
        reverse("admin:conversations_run_changelist") + "?guardrail=flag",
        reverse("monitoring:dashboard"),
        reverse("monitoring:try"),
        reverse("monitoring:agent", args=[agent.slug]),
        reverse("monitoring:playground", args=[agent.slug]),
        reverse("monitoring:agent-online", args=[agent.slug]),
        reverse("monitoring:run", args=[seeded.run.pk]),
        reverse("monitoring:conversation", args=[seeded.run.conversation_id]),
        reverse("monitoring:run", args=[seeded.approval.run_id]),
        reverse("monitoring:run", args=[seeded.fork.pk]),
        reverse("monitoring:run-compare", args=[seeded.fork.pk]),
        reverse("evals:compare") + f"?baseline={seeded.baseline.pk}&candidate={seeded.candidate.pk}",
        reverse("approvals:queue"),
        reverse("approvals:history"),
        reverse("approvals:detail", args=[seeded.approval.pk]),
        reverse("reviews:queues"),
        reverse("reviews:queue", args=[ReviewQueue.objects.get().pk]),
        reverse("reviews:item", args=[ReviewItem.objects.get().pk]),
        "/",
    ]
    return urls
