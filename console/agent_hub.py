"""Reads behind an agent's page (the hub): what the agent is, its versions, its quality, its
traffic and how it is reached, each number with the filtered admin list behind it.

A fixed number of statements whatever the agent's history: traffic comes from the hourly rollups
(a few rows per hour), lists are bounded, counts are aggregates."""

from datetime import datetime, timedelta
from decimal import Decimal
from urllib.parse import urlencode

from django.db.models import Count, Q, Sum
from django.urls import reverse
from django.utils import timezone

from agents.models import Agent, AgentDelegate, AgentTool, AgentVersion, GuardrailRule
from agents.selectors import agent_releases, tool_approvals_now, tools_in_force
from agents.snapshot import SnapshotInvalid, snapshot_parse
from console.formatting import fixed_amount
from conversations.models import Approval, RunFeedback, RunStatus
from conversations.monitoring import histogram
from conversations.monitoring.models import LLMCallHourly, RunHourly
from conversations.monitoring.rollups import floor_hour
from conversations.usage import USAGE_FIELDS
from evals.models import EvalRun
from knowledge.models import KnowledgeBase
from platform_site.public_url import public_url
from tools.approval_policy import ApprovalPolicy
from triggers.models import Hook, Schedule
from widgets.admin import embed_snippet
from widgets.models import Widget

PROMPT_EXCERPT_CHARS = 600
DAYS = 7
# The page lists at most these many of each: the rest are on the admin list it links to.
LIST_LIMIT = 20


def _changelist(model: str, **filters) -> str:
    """The admin list of `app_model` narrowed by `filters` (the changelist's own query keys)."""
    url = reverse(f"admin:{model}_changelist")
    return f"{url}?{urlencode(filters)}" if filters else url


def _policy_text(policy: str) -> str:
    return ApprovalPolicy(policy).label if policy in ApprovalPolicy.values else policy


def _tools(agent: Agent, live: AgentVersion | None) -> list[dict]:
    """The tools the live version runs with, each with the approval in force now (the stricter of
    the pinned and the tool's current policy: agents.selectors.tools_in_force); without a live
    version, the draft's linked tools with the approval a version built now would pin."""
    if live is not None:
        try:
            snapshot = snapshot_parse(live.snapshot)
        except SnapshotInvalid:
            snapshot = None
        if snapshot is not None:
            names = [tool["name"] for tool in snapshot["tools"]]
            in_force = tools_in_force(snapshot=snapshot, names=names)
            return [
                {
                    "name": name,
                    "kind": in_force[name]["kind"],
                    "delegate": in_force[name]["id"] is None,
                    "policy": _policy_text(in_force[name]["approval"]["policy"]),
                    "rule": in_force[name]["approval"]["rule"],
                }
                for name in sorted(in_force)
            ]
    links = list(
        AgentTool.objects.filter(agent=agent, enabled=True).select_related("tool").order_by("tool__name")[:LIST_LIMIT]
    )
    now = tool_approvals_now(agent_id=agent.pk, tool_ids=[link.tool_id for link in links]) if links else {}
    return [
        {
            "name": link.tool.name,
            "kind": link.tool.kind,
            "delegate": False,
            "policy": _policy_text(now.get(link.tool_id, {}).get("policy", "")),
            "rule": now.get(link.tool_id, {}).get("rule", ""),
        }
        for link in links
    ]


def _identity(agent: Agent) -> dict:
    live = agent.published_version
    prompt = agent.system_prompt or ""
    return {
        "model": agent.model_config,
        "fallback_model": agent.fallback_model_config,
        "prompt_excerpt": prompt[:PROMPT_EXCERPT_CHARS],
        "prompt_cut": len(prompt) > PROMPT_EXCERPT_CHARS,
        "tools": _tools(agent, live),
        "knowledge_bases": list(
            KnowledgeBase.objects.filter(search_tool__agent_tools__agent=agent)
            .order_by("name")
            .values("pk", "name", "status")[:LIST_LIMIT]
        ),
        "delegates": list(
            AgentDelegate.objects.filter(parent=agent)
            .select_related("child")
            .only("tool_name", "enabled", "child__name", "child__slug")
            .order_by("tool_name")[:LIST_LIMIT]
        ),
        "guardrails": list(GuardrailRule.objects.filter(agent=agent).order_by("pk")[:LIST_LIMIT]),
        "memory": {
            "enabled": agent.memory_enabled,
            "space": agent.memory_space,
            "kinds": agent.memory_kinds,
            "shown": agent.memory_shown,
            "ttl_days": agent.memory_ttl_days,
            "daily_tokens": agent.memory_daily_tokens,
        },
        "limits": {
            "max_iterations": agent.max_iterations,
            "run_token_budget": agent.run_token_budget,
            "run_cost_budget": agent.run_cost_budget,
            "run_timeout_seconds": agent.run_timeout_seconds,
            "daily_token_budget": agent.daily_token_budget,
            "daily_cost_budget": agent.daily_cost_budget,
            "end_user_messages_per_minute": agent.end_user_messages_per_minute,
            "end_user_tokens_per_day": agent.end_user_tokens_per_day,
        },
    }


def _versions(agent: Agent) -> dict:
    draft = AgentVersion.objects.filter(agent=agent, playground=False).defer("snapshot").order_by("-number").first()
    return {
        "published": agent.published_version,
        "canary": agent.canary_version,
        "canary_percent": agent.canary_percent,
        # The newest version written: what the next publish would send out, if it is not live.
        "draft": draft,
        "draft_unpublished": draft is not None
        and draft.pk not in (agent.published_version_id, agent.canary_version_id),
        "releases": list(agent_releases(agent=agent, limit=5)),
        "versions_url": reverse("admin:agents_agent_versions", args=[agent.pk]),
        "diff_url": reverse("admin:agents_agent_diff", args=[agent.pk]),
    }


def _quality(agent: Agent) -> dict:
    eval_runs = list(
        EvalRun.objects.filter(agent_version__agent=agent)
        .select_related("suite", "agent_version")
        .only("status", "metrics", "started_at", "finished_at", "suite__name", "agent_version__number")
        .order_by("-started_at")[:5]
    )
    feedback = RunFeedback.objects.filter(run__agent=agent).aggregate(
        count=Count("pk"), negative=Count("pk", filter=Q(rating=-1))
    )
    return {
        "eval_runs": [
            # A run that failed or is still going has no metrics yet.
            {"run": eval_run, "completion": (eval_run.metrics or {}).get("task_completion_rate")}
            for eval_run in eval_runs
        ],
        "eval_runs_url": _changelist("evals_evalrun", agent_version__agent__id__exact=agent.pk),
        "feedback": feedback["count"],
        "feedback_url": _changelist("conversations_runfeedback", run__agent__id__exact=agent.pk),
        "negative_feedback": feedback["negative"],
        "negative_feedback_url": _changelist(
            "conversations_runfeedback", run__agent__id__exact=agent.pk, rating__exact=-1
        ),
    }


def _traffic(agent: Agent, *, now: datetime) -> dict:
    """The last DAYS calendar days (the site's time zone) from the hourly rollups."""
    today = timezone.localdate(now)
    first_day = today - timedelta(days=DAYS - 1)
    start = floor_hour(timezone.make_aware(datetime.combine(first_day, datetime.min.time())))
    days = [first_day + timedelta(days=i) for i in range(DAYS)]
    runs = {day: {"runs": 0, "failed": 0} for day in days}
    for hour, status, n in (
        RunHourly.objects.filter(agent=agent, hour__gte=start)
        .values_list("hour", "status")
        .annotate(n=Sum("runs"))
        .order_by()
    ):
        cell = runs.get(timezone.localdate(hour))
        if cell is not None:
            cell["runs"] += n
            cell["failed"] += n if status == RunStatus.FAILED else 0
    tokens = dict.fromkeys(USAGE_FIELDS, 0)
    cost, calls, failed_calls, histograms = Decimal(0), 0, 0, []
    for row in LLMCallHourly.objects.filter(agent=agent, hour__gte=start).values(
        "calls", "failed", "cost", "latency_histogram", *USAGE_FIELDS
    ):
        calls += row["calls"]
        failed_calls += row["failed"]
        cost += row["cost"] or 0
        histograms.append(row["latency_histogram"])
        for kind in USAGE_FIELDS:
            tokens[kind] += row[kind] or 0
    merged = histogram.merge(histograms)
    pending = Approval.objects.filter(run__agent=agent, status=Approval.Status.PENDING).count()
    runs_url = _changelist("conversations_run", agent__id__exact=agent.pk)
    return {
        "days": [
            {
                "day": day,
                **runs[day],
                "url": _changelist(
                    "conversations_run",
                    agent__id__exact=agent.pk,
                    created_at__day=day.day,
                    created_at__month=day.month,
                    created_at__year=day.year,
                ),
            }
            for day in days
        ],
        "runs": sum(cell["runs"] for cell in runs.values()),
        "runs_url": runs_url,
        "failed": sum(cell["failed"] for cell in runs.values()),
        "failed_url": _changelist("conversations_run", agent__id__exact=agent.pk, status__exact=RunStatus.FAILED),
        "tokens": tokens,
        "cost": fixed_amount(cost),
        "llm_calls": calls,
        "llm_calls_failed": failed_calls,
        "p50_ms": histogram.percentile(merged, 0.5),
        "p95_ms": histogram.percentile(merged, 0.95),
        "pending_approvals": pending,
        "pending_approvals_url": _changelist(
            "conversations_approval", run__agent__id__exact=agent.pk, status__exact=Approval.Status.PENDING
        ),
    }


def _reach(agent: Agent, *, request) -> dict:
    hooks = list(Hook.objects.filter(agent=agent).order_by("name")[:LIST_LIMIT])
    widgets = list(Widget.objects.filter(agent=agent).order_by("name")[:LIST_LIMIT])
    completions = public_url(reverse("openai-chat-completions"), request=request)
    return {
        "rest_agent": public_url(reverse("agent-detail", args=[agent.slug]), request=request),
        "rest_conversations": public_url(reverse("conversation-list"), request=request),
        "model_name": agent.slug,
        "completions_url": completions,
        "curl": (
            f"curl {completions} \\\n"
            '  -H "Authorization: Bearer $AGENTRY_TOKEN" -H "Content-Type: application/json" \\\n'
            f'  -d \'{{"model": "{agent.slug}", "messages": [{{"role": "user", "content": "Hello"}}]}}\''
        ),
        "hooks": [
            {
                "hook": hook,
                "url": public_url(reverse("hook", args=[hook.pk]), request=request),
                "admin_url": reverse("admin:triggers_hook_change", args=[hook.pk]),
            }
            for hook in hooks
        ],
        "hooks_url": _changelist("triggers_hook", agent__id__exact=agent.pk),
        "schedules": list(Schedule.objects.filter(agent=agent).order_by("name")[:LIST_LIMIT]),
        "schedules_url": _changelist("triggers_schedule", agent__id__exact=agent.pk),
        "widgets": [
            {
                "widget": widget,
                "snippet": embed_snippet(widget, request=request),
                "admin_url": reverse("admin:widgets_widget_change", args=[widget.pk]),
            }
            for widget in widgets
        ],
        "widgets_url": _changelist("widgets_widget", agent__id__exact=agent.pk),
    }


def agent_hub(*, agent: Agent, request) -> dict:
    """Everything the agent's page shows; `agent` is read with agent_for_hub."""
    now = timezone.now()
    return {
        "identity": _identity(agent),
        "versions": _versions(agent),
        "quality": _quality(agent),
        "traffic": _traffic(agent, now=now),
        "reach": _reach(agent, request=request),
        "change_url": reverse("admin:agents_agent_change", args=[agent.pk]),
        "timezone": timezone.localtime(now).tzname(),
    }


def agent_for_hub(queryset):
    """The agents' queryset with what the page reads of each in the same statement."""
    return queryset.select_related("model_config", "fallback_model_config", "published_version", "canary_version")
