"""The admin's index, grouped by what people come to do rather than by Django app.

The groups are data: which admin models and which operator pages each one lists, in order. The
index is built from the app list Django hands the index template, so a group shows only the
models the user may view or change there, and the operator pages from console.navigation, so
only the pages the user may open. A model in no group and not declared a ledger lands in "Other":
a model registered later is never hidden by forgetting this file (tests hold every registered
model to one or the other)."""

from dataclasses import dataclass, field

from django.utils.translation import gettext_lazy as _

from console.navigation import OperatorLink


@dataclass(frozen=True)
class TaskGroup:
    key: str
    title: str
    description: str
    models: tuple[str, ...] = ()  # model labels, "app_label.ModelName", in the order shown
    pages: tuple[str, ...] = ()  # OperatorLink keys, shown before the models


GROUPS: tuple[TaskGroup, ...] = (
    TaskGroup(
        "build",
        _("Build"),
        _("Agents and what they use: model configs, tools and MCP servers, knowledge, memory."),
        models=(
            "agents.Agent",
            "agents.AgentVersion",
            "agents.AgentRelease",
            "agents.ModelConfig",
            "tools.ToolDefinition",
            "tools.MCPServer",
            "knowledge.KnowledgeBase",
            "knowledge.Document",
            "memory.Memory",
        ),
    ),
    TaskGroup(
        "operate",
        _("Operate"),
        _("Watch the runs, decide approvals, review what guardrails flagged, try an agent."),
        models=("conversations.Run", "conversations.Conversation", "conversations.Approval", "attachments.Attachment"),
        pages=("monitoring", "guardrails", "approvals", "try", "workspace-usage"),
    ),
    TaskGroup(
        "improve",
        _("Improve"),
        _("Evaluate agents before a release and learn from the feedback on their answers."),
        models=(
            "evals.EvalSuite",
            "evals.EvalCase",
            "evals.EvalRun",
            "evals.ReleaseGate",
            "evals.OnlineEvaluator",
            "conversations.RunFeedback",
            "reviews.ReviewQueue",
        ),
        pages=("reviews",),
    ),
    TaskGroup(
        "reach",
        _("Reach"),
        _("Where agents meet people and systems: hooks, schedules, chat widgets, chat-app bots, webhooks, the API."),
        models=(
            "triggers.Hook",
            "triggers.Schedule",
            "widgets.Widget",
            "chatbots.ChatChannel",
            "notifications.Webhook",
        ),
        pages=("api-docs",),
    ),
    TaskGroup(
        "govern",
        _("Govern"),
        _("Who may do what, tokens, erasures, the record of configuration changes, alerts and retention."),
        models=(
            "auth.User",
            "auth.Group",
            "workspaces.Workspace",
            "workspaces.Membership",
            "conversations.ApiToken",
            "conversations.EndUserErasure",
            "audit.ConfigChange",
            "alerts.AlertRule",
            "conversations.RunPurge",
        ),
    ),
)

# Read-only records that explain a run, a search or a delivery: reached from the pages that
# explain them (a run's timeline and change page, a knowledge base, a webhook), not listed as
# peers of "Agents". Their admin pages keep working and keep their permissions.
LEDGER: frozenset[str] = frozenset(
    {
        "conversations.LLMCall",
        "conversations.ToolInvocation",
        "conversations.RunEvent",
        "memory.MemoryChange",
        "knowledge.KnowledgeSearch",
        "knowledge.EmbeddingCall",
        "notifications.WebhookDelivery",
        "notifications.WebhookAttempt",
        "alerts.AlertFiring",
        "agents.AgentUsageDay",
        "triggers.HookDelivery",
        "triggers.ScheduleFire",
        "chatbots.ChatEvent",
        "reviews.ReviewItem",
        "reviews.ReviewLabel",
        "evals.OnlineScore",
    }
)

OTHER = TaskGroup("other", _("Other"), _("Pages not yet placed in a group."))


@dataclass
class IndexGroup:
    key: str
    title: str
    description: str
    pages: list[OperatorLink] = field(default_factory=list)
    models: list[dict] = field(default_factory=list)  # the model entries of Django's app list


def index_groups(app_list: list[dict], links: list[OperatorLink]) -> list[IndexGroup]:
    """The index's groups in order, each with the pages and models this user may open; empty
    groups left out."""
    models = {entry["model"]._meta.label: entry for app in app_list for entry in app["models"]}
    pages = {link.key: link for link in links}
    groups = []
    for group in GROUPS:
        groups.append(
            IndexGroup(
                group.key,
                group.title,
                group.description,
                pages=[pages.pop(key) for key in group.pages if key in pages],
                models=[models.pop(label) for label in group.models if label in models],
            )
        )
    groups.append(
        IndexGroup(
            OTHER.key,
            OTHER.title,
            OTHER.description,
            pages=list(pages.values()),
            models=[entry for label, entry in models.items() if label not in LEDGER],
        )
    )
    return [group for group in groups if group.pages or group.models]
