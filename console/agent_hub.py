"""Reads behind an agent's page (the hub): what the agent is, its versions, its quality, its
traffic and how it is reached, each number with the filtered admin list behind it.

A fixed number of statements whatever the agent's history: traffic comes from the hourly rollups
(a few rows per hour), lists are bounded, counts are aggregates."""

import math
from datetime import datetime, timedelta
from decimal import Decimal
from urllib.parse import urlencode, urlsplit

from django.db.models import Count, Q, Sum
from django.urls import reverse
from django.utils import timezone

from agents.models import Agent, AgentDelegate, AgentTool, AgentVersion, GuardrailRule
from agents.releases import PUBLISH_PERMISSION
from agents.selectors import agent_releases, agent_versions, tool_approvals_now, tools_in_force
from agents.snapshot import SnapshotInvalid, snapshot_build, snapshot_hash, snapshot_parse
from alerts.models import AlertFiring
from alerts.permissions import VIEW_FIRINGS_PERMISSION
from console.formatting import fixed_amount
from conversations.models import Approval, GuardrailTrigger, Run, RunFeedback, RunStatus
from conversations.monitoring import histogram
from conversations.monitoring.models import LLMCallHourly, RunHourly
from conversations.monitoring.rollups import floor_hour
from conversations.usage import USAGE_FIELDS
from evals.models import EvalRun, ReleaseGate
from knowledge.models import KnowledgeBase
from notifications.models import Webhook
from platform_site.public_url import public_url
from tools.approval_policy import ApprovalPolicy
from triggers.models import Hook, Schedule
from widgets.admin import embed_snippet
from widgets.models import Widget

PROMPT_EXCERPT_CHARS = 600
DAYS = 7
# The page lists at most these many of each: the rest are on the admin list it links to.
LIST_LIMIT = 20
# The versions offered for a rollback and a diff on the page; the versions page lists them all.
VERSIONS_LISTED = 10


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


def _versions(agent: Agent, *, may_publish: bool) -> dict:
    published = agent.published_version
    # The draft is the agent's configuration now; it has unpublished changes when it would not
    # hash to the live version (read without writing a version, as the admin's versions page does).
    draft_hash = snapshot_hash(snapshot_build(agent=agent))
    versions = list(agent_versions(agent=agent, limit=VERSIONS_LISTED))
    draft_version = next((v for v in versions if v.config_hash == draft_hash), None)
    diff_url = reverse("admin:agents_agent_diff", args=[agent.pk])

    def diff(old: AgentVersion | None, new: AgentVersion | None) -> str:
        if old is None or new is None or old.pk == new.pk:
            return ""
        return f"{diff_url}?{urlencode({'a': old.number, 'b': new.number})}"

    return {
        "published": published,
        "canary": agent.canary_version,
        "canary_percent": agent.canary_percent,
        "canary_diff_url": diff(published, agent.canary_version),
        "draft_unpublished": published is None or published.config_hash != draft_hash,
        # The version the draft was frozen into already (a try of the draft, a canary), if any:
        # without one, the draft's changes are seen on the agent's change page.
        "draft": draft_version,
        "draft_diff_url": diff(published, draft_version),
        # The latest versions, newest first, each with its diff from what is live; a rollback
        # goes back to one that was published before (as on the admin's versions page).
        "versions": [
            {"version": v, "live": v.pk == agent.published_version_id, "diff_url": diff(published, v)} for v in versions
        ],
        "rollback_choices": [
            v.number for v in versions if v.published_at is not None and v.pk != agent.published_version_id
        ],
        "releases": list(agent_releases(agent=agent, limit=5)),
        "versions_url": reverse("admin:agents_agent_versions", args=[agent.pk]),
        "diff_url": diff_url,
        "may_publish": may_publish,
        "release_url": reverse("monitoring:agent-release", args=[agent.slug]),
    }


def _window_start(now: datetime) -> datetime:
    """The first hour of the page's window: DAYS calendar days in the site's time zone."""
    first_day = timezone.localdate(now) - timedelta(days=DAYS - 1)
    return floor_hour(timezone.make_aware(datetime.combine(first_day, datetime.min.time())))


def _since(start: datetime) -> str:
    """The window's start as the admin's lookups take it (created_at__gte=), with its offset."""
    return timezone.localtime(start).isoformat()


def _bucket_floor(milliseconds: int) -> int:
    """The lower bound of the latency histogram's bucket that holds `milliseconds`."""
    return math.floor(histogram.BASE ** math.floor(math.log(max(milliseconds, 1)) / histogram.LOG_BASE))


def _slow_calls(calls_list: dict, milliseconds: int | None) -> str:
    if not milliseconds:
        return ""
    return _changelist("conversations_llmcall", **calls_list, latency_ms__gte=_bucket_floor(milliseconds))


def _day_range(day) -> dict:
    """One day of a changelist's date hierarchy."""
    return {"created_at__day": day.day, "created_at__month": day.month, "created_at__year": day.year}


def _quality(agent: Agent, *, start: datetime, may_see_alerts: bool) -> dict:
    eval_runs = list(
        EvalRun.objects.filter(agent_version__agent=agent)
        .select_related("suite", "agent_version")
        .only(
            "status",
            "metrics",
            "started_at",
            "finished_at",
            "suite__name",
            "agent_version__number",
            "agent_version__playground",
        )
        .order_by("-started_at")[:5]
    )
    since = _since(start)
    feedback = RunFeedback.objects.filter(run__agent=agent, created_at__gte=start).aggregate(
        positive=Count("pk", filter=Q(rating=1)), negative=Count("pk", filter=Q(rating=-1))
    )
    # Runs a guardrail flagged for review in the window: the runs list's review filter.
    flagged = (
        GuardrailTrigger.objects.filter(run__agent=agent, action=GuardrailTrigger.Action.FLAG, created_at__gte=start)
        .values("run_id")
        .distinct()
        .count()
    )
    feedback_list = {"run__agent__id__exact": agent.pk, "created_at__gte": since}
    gate = ReleaseGate.objects.filter(agent=agent).select_related("suite").only("enabled", "suite__name").first()
    # The alert rules on this agent firing now, for those who may read firings (as the dashboard).
    open_alerts = (
        AlertFiring.objects.filter(rule__agent=agent, resolved_at__isnull=True).count() if may_see_alerts else None
    )
    return {
        "eval_runs": [
            # A run that failed or is still going has no metrics yet.
            {
                "run": eval_run,
                "completion": (eval_run.metrics or {}).get("task_completion_rate"),
                "url": reverse("admin:evals_evalrun_change", args=[eval_run.pk]),
            }
            for eval_run in eval_runs
        ],
        "eval_runs_url": _changelist("evals_evalrun", agent_version__agent__id__exact=agent.pk),
        "positive": feedback["positive"],
        "positive_url": _changelist("conversations_runfeedback", **feedback_list, rating__exact=1),
        "negative": feedback["negative"],
        "negative_url": _changelist("conversations_runfeedback", **feedback_list, rating__exact=-1),
        "feedback_url": _changelist("conversations_runfeedback", run__agent__id__exact=agent.pk),
        "gate": gate,
        "gate_url": reverse("admin:evals_releasegate_change", args=[gate.pk]) if gate else "",
        "open_alerts": open_alerts,
        "open_alerts_url": _changelist("alerts_alertfiring", state="open", rule__agent__id__exact=agent.pk),
        "flagged": flagged,
        "flagged_url": _changelist(
            "conversations_run", agent__id__exact=agent.pk, guardrail="flag", created_at__gte=since
        ),
    }


# The prices of each rollup row's model config, joined to it: what its cached tokens saved.
_CACHE_PRICES = ("model_config__price_input_per_million", "model_config__price_cached_input_per_million")


def _cache_saving(row: dict) -> Decimal:
    """What a rollup row's cached prompt tokens saved: each at the input price less the cached
    one, at its model config's prices now (the rollups keep tokens and cost, not prices)."""
    price, cached_price = (row[name] or 0 for name in _CACHE_PRICES)
    return Decimal(row["cached_tokens"] or 0) * (price - cached_price) / 1_000_000


def _traffic(agent: Agent, *, start: datetime) -> dict:
    """The last DAYS calendar days (the site's time zone) from the hourly rollups."""
    first_day = timezone.localdate(start)
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
    cost, calls, failed_calls, histograms, saved = Decimal(0), 0, 0, [], Decimal(0)
    for row in LLMCallHourly.objects.filter(agent=agent, hour__gte=start).values(
        "calls", "failed", "cost", "latency_histogram", *USAGE_FIELDS, *_CACHE_PRICES
    ):
        calls += row["calls"]
        failed_calls += row["failed"]
        cost += row["cost"] or 0
        saved += _cache_saving(row)
        histograms.append(row["latency_histogram"])
        for kind in USAGE_FIELDS:
            tokens[kind] += row[kind] or 0
    merged = histogram.merge(histograms)
    p50, p95 = histogram.percentile(merged, 0.5), histogram.percentile(merged, 0.95)
    # The newest failure in the window (the agent's runs by time: run_agent_created_idx), and the
    # approval waiting longest (the pending ones: approval_status_idx).
    last_failed = (
        Run.objects.filter(agent=agent, status=RunStatus.FAILED, created_at__gte=start)
        .only("pk", "created_at", "stop_reason", "error")
        .order_by("-created_at")
        .first()
    )
    pending = Approval.objects.filter(run__agent=agent, status=Approval.Status.PENDING)
    pending_count = pending.count()
    oldest = pending.order_by("created_at", "pk").values_list("pk", flat=True).first()
    since = _since(start)
    window = {"agent__id__exact": agent.pk, "created_at__gte": since}
    calls_list = {"run__agent__id__exact": agent.pk, "started_at__gte": since}
    return {
        "days": [
            {
                "day": day,
                **runs[day],
                "url": _changelist("conversations_run", agent__id__exact=agent.pk, **_day_range(day)),
                "failed_url": _changelist(
                    "conversations_run", agent__id__exact=agent.pk, status__exact=RunStatus.FAILED, **_day_range(day)
                ),
            }
            for day in days
        ],
        "runs": sum(cell["runs"] for cell in runs.values()),
        "runs_url": _changelist("conversations_run", **window),
        "failed": sum(cell["failed"] for cell in runs.values()),
        "failed_url": _changelist("conversations_run", **window, status__exact=RunStatus.FAILED),
        "last_failed": last_failed,
        "last_failed_url": reverse("monitoring:run", args=[last_failed.pk]) if last_failed else "",
        "tokens": tokens,
        "cost": fixed_amount(cost),
        "cache": {
            "share": round(100 * tokens["cached_tokens"] / tokens["prompt_tokens"]) if tokens["prompt_tokens"] else 0,
            "saved": fixed_amount(saved.quantize(Decimal("0.00000001"))),
        },
        "llm_calls": calls,
        "llm_calls_url": _changelist("conversations_llmcall", **calls_list),
        "llm_calls_failed": failed_calls,
        "llm_calls_failed_url": _changelist("conversations_llmcall", **calls_list, status__exact="failed"),
        "p50_ms": p50,
        "p95_ms": p95,
        # The calls at or above each percentile (from its histogram bucket's lower bound: the
        # percentile is interpolated inside it): the slow ones behind the number.
        "p50_url": _slow_calls(calls_list, p50),
        "p95_url": _slow_calls(calls_list, p95),
        "pending_approvals": pending_count,
        # The approval queue, narrowed to this agent (console/approvals: ?agent=<slug>).
        "pending_approvals_url": f"{reverse('approvals:queue')}?{urlencode({'agent': agent.slug})}",
        "oldest_pending_url": reverse("approvals:detail", args=[oldest]) if oldest else "",
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
        # Where the API mounts its MCP server (api.mcp_server.PATHS; the console does not import the API).
        "mcp_url": public_url("/mcp/", request=request) if agent.mcp_exposed else "",
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
                "copy_id": f"hub-hook-{hook.pk}",
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
                "copy_id": f"hub-widget-{widget.pk}",
            }
            for widget in widgets
        ],
        "widgets_url": _changelist("widgets_widget", agent__id__exact=agent.pk),
        # Where the agent's run outcomes, approval requests and alerts are sent (notifications).
        "channels": [
            {
                "channel": channel,
                # The host only: a chat app's webhook address carries its key in the path.
                "target": channel.target if channel.format == Webhook.Format.EMAIL else urlsplit(channel.url).netloc,
                "admin_url": reverse("admin:notifications_webhook_change", args=[channel.pk]),
            }
            for channel in Webhook.objects.filter(agent=agent).order_by("pk")[:LIST_LIMIT]
        ],
        "channels_url": _changelist("notifications_webhook", agent__id__exact=agent.pk),
    }


def agent_hub(*, agent: Agent, request) -> dict:
    """Everything the agent's page shows; `agent` is read with agent_for_hub."""
    now = timezone.now()
    start = _window_start(now)
    return {
        "identity": _identity(agent),
        "versions": _versions(agent, may_publish=request.user.has_perm(PUBLISH_PERMISSION)),
        "quality": _quality(agent, start=start, may_see_alerts=request.user.has_perm(VIEW_FIRINGS_PERMISSION)),
        "traffic": _traffic(agent, start=start),
        "reach": _reach(agent, request=request),
        "change_url": reverse("admin:agents_agent_change", args=[agent.pk]),
        "timezone": timezone.localtime(now).tzname(),
    }


def agent_for_hub(queryset):
    """The agents' queryset with what the page reads of each in the same statement."""
    return queryset.select_related("model_config", "fallback_model_config", "published_version", "canary_version")
