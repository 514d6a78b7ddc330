"""Two workspaces, each with an object of every workspace model the admin shows, for the admin's
cross-workspace and role sweeps. Every object of workspace B carries the marker "zulu" in its
name or text, so a page that shows any of them (a row, a filter's choice, a select's option)
says so."""

from datetime import date

from django.utils import timezone

from agents.models import AgentDelegate, AgentRelease, AgentTool, AgentUsageDay, GuardrailRule
from alerts.models import AlertFiring, AlertRule
from attachments.models import Attachment, AttachmentUse
from chatbots.models import ChatChannel, ChatEvent, ChatUser
from conversations.models import EndUserErasure, RunFeedback, RunPurge
from conversations.tokens import api_token_create
from evals.models import EvalCase, EvalRun, EvalSuite, OnlineEvaluator, OnlineScore, ReleaseGate
from knowledge.models import Chunk, Document, EmbeddingCall, KnowledgeBase, KnowledgeSearch
from knowledge.services import knowledge_base_save
from memory.models import Memory, MemoryChange
from notifications.models import Webhook, WebhookDelivery
from reviews.models import ReviewItem, ReviewLabel, ReviewQueue
from tests.support.factories import AgentFactory, ModelConfigFactory, registered_tools_synced
from tests.support.ledger_seed import ledger_seed
from tools.models import MCPServer, ToolDefinition
from triggers.models import Hook, Schedule
from widgets.models import Widget
from workspaces.models import Workspace

MARKER = "zulu"


def workspace_seed(workspace: Workspace, tag: str, *, token_user) -> dict:
    """One object of every workspace model in `workspace`, each named with `tag`."""
    registered_tools_synced()
    model = ModelConfigFactory(workspace=workspace, name=f"model-{tag}")
    agent = AgentFactory(workspace=workspace, model_config=model, name=f"Agent {tag}", slug=f"agent-{tag}")
    child = AgentFactory(workspace=workspace, model_config=model, name=f"Child {tag}", slug=f"child-{tag}")
    server = MCPServer.objects.create(workspace=workspace, name=f"srv{tag}")
    tool = ToolDefinition.objects.create(
        workspace=workspace, name=f"tool-{tag}", description=f"tool {tag}", mcp_server=server, mcp_tool_name=tag
    )
    AgentTool.objects.create(agent=agent, tool=tool)
    AgentDelegate.objects.create(parent=agent, child=child, tool_name=f"ask_{tag}", description=tag)
    GuardrailRule.objects.create(workspace=workspace, agent=agent, kind=GuardrailRule.Kind.BLOCKED_TERMS, terms=tag)
    base = knowledge_base_save(base=KnowledgeBase(workspace=workspace, name=f"kb-{tag}", embedding_model=model))
    document = Document.objects.create(base=base, title=f"doc {tag}")
    Chunk.objects.create(document=document, ordinal=0, text=f"chunk {tag}")
    (run,) = ledger_seed(agent, 1)
    version = run.agent_version
    AgentRelease.objects.create(agent=agent, action="publish", version=version, note=tag)
    AgentUsageDay.objects.create(agent=agent, day=date(2026, 1, 1))
    KnowledgeSearch.objects.create(base=base, run=run, tool_call_id=f"call-{tag}", query=f"q {tag}", top_k=3)
    EmbeddingCall.objects.create(llm_call=run.llm_calls.first(), base=base, document=document)
    memory = Memory.objects.create(
        workspace=workspace, scope=f"agent:{agent.pk}", end_user=f"user-{tag}", kind="fact", statement=f"likes {tag}"
    )
    MemoryChange.objects.create(
        workspace=workspace, memory=memory, scope=memory.scope, end_user=memory.end_user, action="add", source="api"
    )
    rule = AlertRule.objects.create(workspace=workspace, name=f"rule-{tag}", kind="tokens", threshold=1, agent=agent)
    AlertFiring.objects.create(rule=rule, value=2, threshold=1, summary=f"tokens {tag}")
    suite = EvalSuite.objects.create(workspace=workspace, name=f"suite-{tag}", judge_model_config=model)
    EvalCase.objects.create(suite=suite, name=f"case-{tag}", turns=[{"role": "user", "content": tag}])
    EvalRun.objects.create(suite=suite, agent_version=version)
    ReleaseGate.objects.create(agent=agent, suite=suite)
    queue = ReviewQueue.objects.create(workspace=workspace, name=f"queue-{tag}", agent=agent)
    item = ReviewItem.objects.create(queue=queue, run_id=run.pk, reason=ReviewItem.Reason.SAMPLE)
    ReviewLabel.objects.create(item=item, reviewer=token_user, verdict=ReviewLabel.Verdict.GOOD, notes=tag)
    evaluator = OnlineEvaluator.objects.create(
        agent=agent, name=f"online-{tag}", kind="judge", judge_model=model, rubric=tag
    )
    OnlineScore.objects.create(
        evaluator=evaluator, run=run, agent_version=version, reason="sample", score=1, explanation=tag
    )
    Schedule.objects.create(workspace=workspace, agent=agent, name=f"schedule-{tag}", message=tag)
    Hook.objects.create(
        workspace=workspace, agent=agent, name=f"hook-{tag}", secret="s" * 32, message=tag, owner=token_user
    )
    Widget.objects.create(workspace=workspace, agent=agent, name=f"widget-{tag}", secret="s" * 32, owner=token_user)
    bot = ChatChannel.objects.create(
        workspace=workspace, agent=agent, name=f"bot-{tag}", service="telegram", owner=token_user
    )
    ChatUser.objects.create(channel=bot, chat_user_id=f"chat-{tag}", end_user=f"user-{tag}")
    ChatEvent.objects.create(channel=bot, event_id=f"event-{tag}", outcome="started", run=run)
    webhook = Webhook.objects.create(
        workspace=workspace, agent=agent, url=f"https://{tag}.example.com/hook", secret="s" * 32
    )
    WebhookDelivery.objects.create(
        webhook=webhook, run_event=run.events.first(), event_type="run.completed", payload={"tag": tag}
    )
    RunFeedback.objects.create(run=run, rating=1, comment=tag)
    RunPurge.objects.create(agent=agent, agent_slug=agent.slug, retention_days=1, cutoff=timezone.now())
    api_token_create(user=token_user, name=f"token-{tag}", workspace=workspace)
    EndUserErasure.objects.create(
        workspace=workspace, end_user_digest=tag * 4, requested_by_username=f"erasure-{tag}", channel="api"
    )
    attachment = Attachment.objects.create(
        workspace=workspace,
        owner=token_user,
        end_user=f"user-{tag}",
        kind="image",
        media_type="image/png",
        size=1,
        sha256=tag * 4,
        name=f"photo-{tag}.png",
        storage_key=f"{workspace.pk}/photo-{tag}",
    )
    AttachmentUse.objects.create(attachment=attachment, run=run, position=0)
    return {"agent": agent, "model": model, "tool": tool, "server": server, "suite": suite, "base": base}
