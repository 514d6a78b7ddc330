"""Reads behind the monitoring dashboard.

Everything about the past comes from the hourly rollups (a few rows per hour, whatever the
size of the ledger); what is happening now comes from the runs table through its status index
(active runs are few); the broker and the workers are asked through cached probes.

Each read is of the workspace the user acts in (workspaces.access.in_workspace); the broker's
queues and the workers are the installation's, shared by every workspace.
"""

from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db.models import Avg, Count, Q, Sum
from django.utils import timezone

from agents.models import Agent, ModelConfig
from alerts.selectors import alert_firings_open, number_text
from console.formatting import fixed_amount
from console.monitoring.broker import queue_depths, workers_online
from console.monitoring.labels import approval_status_text, step_status_text
from console.monitoring.presenters import status_words
from conversations.models import Approval, LLMCall, Message, Run, RunFeedback, RunRequest, RunStatus, ToolInvocation
from conversations.monitoring import histogram
from conversations.monitoring.models import ErrorHourly, LLMCallHourly, RollupState, RunHourly
from conversations.monitoring.rollups import floor_hour
from conversations.selectors import run_final_answer
from conversations.usage import USAGE_FIELDS
from engine.memory import memory_extraction_spent
from evals.selectors import eval_runs_latest
from workspaces.access import in_workspace, in_workspace_of

RUN_COST_SCALE = Decimal(1).scaleb(-Run._meta.get_field("cost").decimal_places)
ACTIVE_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.AWAITING_APPROVAL, RunStatus.AWAITING_CHILDREN)
ENDED_STATUSES = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.EXPIRED)


def runs_now(*, user) -> dict[str, int]:
    counts = dict(
        in_workspace(Run.objects.filter(status__in=ACTIVE_STATUSES), user)
        .values_list("status")
        .annotate(n=Count("id"))
        .order_by()
    )
    return {status: counts.get(status, 0) for status in ACTIVE_STATUSES}


def stuck_runs(*, user, now: datetime, limit: int = 50) -> list[dict]:
    """Running runs whose lease lapsed (their worker is gone) or that run past the threshold."""
    threshold = now - timedelta(seconds=settings.AGENTRY_MONITOR_STUCK_SECONDS)
    runs = (
        in_workspace(Run.objects.filter(status=RunStatus.RUNNING), user)
        .filter(Q(lease_expires_at__lt=now) | Q(lease_expires_at__isnull=True) | Q(started_at__lt=threshold))
        .select_related("agent")
        .order_by("started_at")[:limit]
    )
    return [
        {
            "id": str(run.pk),
            "agent": run.agent.name,
            "agent_id": run.agent_id,
            "agent_slug": run.agent.slug,
            "reason": "lease lapsed" if not run.lease_expires_at or run.lease_expires_at < now else "running too long",
            "started_at": run.started_at.isoformat() if run.started_at else None,
            "running_seconds": int((now - run.started_at).total_seconds()) if run.started_at else None,
            "lease_owner": run.lease_owner,
            "lease_expires_at": run.lease_expires_at.isoformat() if run.lease_expires_at else None,
            "iterations": run.iterations,
            "recoveries": run.recoveries,
        }
        for run in runs
    ]


def _hours(start: datetime, count: int) -> list[datetime]:
    return [start + timedelta(hours=i) for i in range(count)]


def runs_by_hour(*, user, start: datetime, hours: int) -> list[dict]:
    counts: dict[tuple, int] = {}
    for hour, status, n in (
        in_workspace(RunHourly.objects.filter(hour__gte=start), user)
        .values_list("hour", "status")
        .annotate(n=Sum("runs"))
        .order_by()
    ):
        counts[(hour, status)] = n
    return [
        {"hour": hour.isoformat(), **{status: counts.get((hour, status), 0) for status in ENDED_STATUSES}}
        for hour in _hours(start, hours)
    ]


def outcomes(*, user, start: datetime) -> dict:
    """Failure rates and the most frequent stop reasons and errors since `start`. The error
    rollup has no agent to place it in a workspace: its rows are a superuser's only."""
    run_rows = in_workspace(RunHourly.objects.filter(hour__gte=start), user)
    by_status = dict(run_rows.values_list("status").annotate(n=Sum("runs")).order_by())
    ended, failed = sum(by_status.values()), by_status.get(RunStatus.FAILED, 0)
    calls = in_workspace(LLMCallHourly.objects.filter(hour__gte=start), user).aggregate(
        calls=Sum("calls"), failed=Sum("failed")
    )
    stop_reasons = run_rows.values("status", "stop_reason").annotate(count=Sum("runs")).order_by("-count")[:10]
    errors = (
        in_workspace(ErrorHourly.objects.filter(hour__gte=start), user)
        .values("source", "message")
        .annotate(count=Sum("count"))
        .order_by("-count")[:10]
    )
    return {
        "runs_ended": ended,
        "runs_failed": failed,
        "run_failure_rate": failed / ended if ended else None,
        "llm_calls": calls["calls"] or 0,
        "llm_calls_failed": calls["failed"] or 0,
        "llm_call_failure_rate": (calls["failed"] or 0) / calls["calls"] if calls["calls"] else None,
        "stop_reasons": list(stop_reasons),
        "top_errors": list(errors),
    }


def model_latency(*, user, start: datetime) -> list[dict]:
    """p50 / p95 of successful model-call latency per model config (from the histograms)."""
    per_model: dict[int, dict] = {}
    hourly = in_workspace(LLMCallHourly.objects.filter(hour__gte=start), user)
    for model_id, calls, failed, hist in hourly.values_list("model_config_id", "calls", "failed", "latency_histogram"):
        entry = per_model.setdefault(model_id, {"calls": 0, "failed": 0, "histograms": []})
        entry["calls"] += calls
        entry["failed"] += failed
        entry["histograms"].append(hist)
    names = dict(ModelConfig.objects.filter(pk__in=per_model).values_list("pk", "name"))
    rows = []
    for model_id, entry in per_model.items():
        merged = histogram.merge(entry["histograms"])
        rows.append(
            {
                "model_config_id": model_id,
                "name": names.get(model_id, f"#{model_id}"),
                "calls": entry["calls"],
                "failed": entry["failed"],
                "p50_ms": histogram.percentile(merged, 0.5),
                "p95_ms": histogram.percentile(merged, 0.95),
            }
        )
    return sorted(rows, key=lambda row: row["name"])


def usage_by_agent_day(*, user, days: int, now: datetime) -> dict:
    """Tokens by kind and cost per agent per day (days in the site's time zone)."""
    today = timezone.localdate(now)
    first_day = today - timedelta(days=days - 1)
    start = floor_hour(timezone.make_aware(datetime.combine(first_day, datetime.min.time())))
    rows = (
        in_workspace(LLMCallHourly.objects.filter(hour__gte=start), user)
        .values("hour", "agent_id")
        .annotate(cost=Sum("cost"), **{kind: Sum(kind) for kind in USAGE_FIELDS})
        .order_by()
    )
    cells: dict[tuple, dict] = {}
    for row in rows:
        day = timezone.localdate(row["hour"])
        if day < first_day:
            continue
        cell = cells.setdefault((day, row["agent_id"]), {"cost": Decimal(0), **dict.fromkeys(USAGE_FIELDS, 0)})
        cell["cost"] += row["cost"] or 0
        for kind in USAGE_FIELDS:
            cell[kind] += row[kind] or 0
    named = list(Agent.objects.filter(pk__in={agent for _, agent in cells}).values_list("pk", "name", "slug"))
    names = {pk: name for pk, name, _slug in named}
    slugs = {pk: slug for pk, _name, slug in named}
    day_list = [first_day + timedelta(days=i) for i in range(days)]
    empty = {"cost": Decimal(0), **dict.fromkeys(USAGE_FIELDS, 0)}
    agents = []
    for agent_id, name in sorted(names.items(), key=lambda item: item[1]):
        per_day = []
        for day in day_list:
            cell = cells.get((day, agent_id), empty)
            per_day.append({"day": day.isoformat(), **cell, "cost": str(cell["cost"])})
        agents.append({"id": agent_id, "name": name, "slug": slugs[agent_id], "per_day": per_day})
    return {"days": [day.isoformat() for day in day_list], "agents": agents}


def memory_extractions(*, user, start: datetime, now: datetime) -> list[dict]:
    """Per agent that keeps long-term memory (or made extraction calls since `start`): its
    extraction calls that ended since then, how many succeeded (an answer that could not be
    used is a failed call), their tokens, and today's spend against its daily extraction budget
    (engine.memory). Read from the ledger by the calls' start, within the window only."""
    ended = in_workspace(
        LLMCall.objects.filter(purpose=LLMCall.Purpose.MEMORY, started_at__gte=start, started_at__lte=now), user
    ).exclude(status=LLMCall.Status.STARTED)
    counts = {
        row["run__agent_id"]: row
        for row in ended.values("run__agent_id")
        .annotate(
            calls=Count("pk"),
            succeeded=Count("pk", filter=Q(status=LLMCall.Status.SUCCEEDED)),
            tokens=Sum("total_tokens"),
        )
        .order_by()
    }
    agents = in_workspace(Agent.objects.filter(Q(memory_enabled=True) | Q(pk__in=counts)), user).order_by("name", "pk")
    rows = []
    for agent in agents.only("pk", "name", "slug", "time_zone", "memory_enabled", "memory_daily_tokens"):
        row = counts.get(agent.pk, {})
        calls, succeeded = row.get("calls", 0), row.get("succeeded", 0)
        spent = memory_extraction_spent(agent_id=agent.pk, time_zone=agent.time_zone, now=now)
        rows.append(
            {
                "id": agent.pk,
                "name": agent.name,
                "slug": agent.slug,
                "enabled": agent.memory_enabled,
                "calls": calls,
                "succeeded": succeeded,
                "success_rate": succeeded / calls if calls else None,
                "tokens": row.get("tokens") or 0,
                "spent_today": spent,
                "daily_tokens": agent.memory_daily_tokens,
                # Extraction is skipped until the day ends (engine.memory).
                "budget_spent": agent.memory_daily_tokens is not None and spent >= agent.memory_daily_tokens,
            }
        )
    return rows


def alerts_open(*, user) -> list[dict]:
    """The open alert firings of the workspace's rules, oldest first."""
    return [
        {
            "id": firing.pk,
            "rule": firing.rule.name,
            "kind": firing.rule.kind,
            "kind_text": firing.rule.get_kind_display(),
            "scope": firing.rule.scope_text(),
            "value": number_text(firing.value),
            "threshold": number_text(firing.threshold),
            "summary": firing.summary,
            "started_at": firing.started_at.isoformat(),
        }
        for firing in alert_firings_open()
        if in_workspace_of(user, firing)
    ]


def _eval_score(eval_run) -> dict | None:
    if eval_run is None:
        return None
    return {
        "id": eval_run.pk,
        "suite": eval_run.suite.name,
        "completion": (eval_run.metrics or {}).get("task_completion_rate"),
    }


def live_versions(*, user, start: datetime) -> list[dict]:
    """Each published agent's live versions side by side (the published one, and a canary's
    candidate while one runs): runs since `start`, failure rate, stop reasons, tokens, cost and
    model latency. Read from the runs of those versions (the hourly rollups are per agent, not per
    version); the version foreign key's index keeps it to their runs."""
    agents = list(
        in_workspace(Agent.objects.filter(published_version__isnull=False), user)
        .select_related("published_version", "canary_version")
        .only(
            "name",
            "slug",
            "canary_percent",
            "published_version",
            "canary_version",
            "published_version__number",
            "canary_version__number",
        )
        .order_by("name")
    )
    ids = [v.pk for agent in agents for v in (agent.published_version, agent.canary_version) if v is not None]
    # Live traffic only: an evaluation's runs of these versions are not what users got.
    runs = Run.objects.filter(agent_version_id__in=ids, created_at__gte=start, sandbox__isnull=True)
    evaluated = eval_runs_latest(version_ids=ids)
    totals = {
        row["agent_version_id"]: row
        for row in runs.values("agent_version_id").annotate(
            runs=Count("id"),
            ended=Count("id", filter=Q(status__in=ENDED_STATUSES)),
            failed=Count("id", filter=Q(status=RunStatus.FAILED)),
            tokens=Sum("total_tokens"),
            cost=Sum("cost"),
        )
    }
    reasons: dict[int, list] = {}
    for version_id, reason, count in (
        runs.filter(status__in=ENDED_STATUSES)
        .values_list("agent_version_id", "stop_reason")
        .annotate(n=Count("id"))
        .order_by("-n")
    ):
        reasons.setdefault(version_id, []).append({"stop_reason": reason, "count": count})
    # End users' ratings of those runs' answers (api/feedback.py): how many, and how many negative.
    feedback = {
        version_id: (count, negative)
        for version_id, count, negative in RunFeedback.objects.filter(run__in=runs)
        .values_list("run__agent_version_id")
        .annotate(n=Count("pk"), negative=Count("pk", filter=Q(rating=-1)))
        .order_by()
    }
    latency = dict(
        LLMCall.objects.filter(run__in=runs, latency_ms__isnull=False)
        .values_list("run__agent_version_id")
        .annotate(avg=Avg("latency_ms"))
        .order_by()
    )
    rows = []
    for agent in agents:
        columns = []
        for role, version in (("published", agent.published_version), ("canary", agent.canary_version)):
            if version is None:
                continue
            total = totals.get(version.pk, {})
            ended, failed = total.get("ended", 0), total.get("failed", 0)
            rated, negative = feedback.get(version.pk, (0, 0))
            columns.append(
                {
                    "role": role,
                    "number": version.number,
                    "share": agent.canary_percent if role == "canary" else 100 - agent.canary_percent,
                    "runs": total.get("runs", 0),
                    "failed": failed,
                    "failure_rate": failed / ended if ended else None,
                    "stop_reasons": reasons.get(version.pk, []),
                    "tokens": total.get("tokens") or 0,
                    # At the column's scale: SQLite sums decimals as floats.
                    "cost": fixed_amount(Decimal(str(total.get("cost") or 0)).quantize(RUN_COST_SCALE)),
                    "latency_ms": round(latency[version.pk]) if latency.get(version.pk) is not None else None,
                    "feedback": rated,
                    "negative_feedback": negative,
                    "negative_feedback_rate": negative / rated if rated else None,
                    "eval": _eval_score(evaluated.get(version.pk)),
                }
            )
        rows.append({"id": agent.pk, "name": agent.name, "slug": agent.slug, "versions": columns})
    return rows


def rollup_freshness(*, now: datetime) -> dict:
    state = RollupState.objects.filter(name="ledger").first()
    if state is None:
        return {"refreshed_at": None, "age_seconds": None, "stale": True}
    age = (now - state.refreshed_at).total_seconds()
    return {
        "refreshed_at": state.refreshed_at.isoformat(),
        "age_seconds": int(age),
        "stale": age > 3 * settings.AGENTRY_MONITOR_ROLLUP_SECONDS + 60,
    }


def dashboard_snapshot(*, user, hours: int = 24, days: int = 7) -> dict:
    """Everything the monitoring page shows of the workspace `user` acts in, as plain JSON-ready
    data."""
    now = timezone.now()
    start = floor_hour(now) - timedelta(hours=hours - 1)
    return {
        "generated_at": now.isoformat(),
        # The zone the page's days and times are in (TIME_ZONE), as the page names it.
        "time_zone": timezone.localtime(now).tzname(),
        "hours": hours,
        "days": days,
        "rollups": rollup_freshness(now=now),
        "runs_now": runs_now(user=user),
        "stuck_runs": stuck_runs(user=user, now=now),
        "stuck_after_seconds": settings.AGENTRY_MONITOR_STUCK_SECONDS,
        "runs_by_hour": runs_by_hour(user=user, start=start, hours=hours),
        "outcomes": outcomes(user=user, start=start),
        "latency": model_latency(user=user, start=start),
        "releases": live_versions(user=user, start=start),
        "usage": usage_by_agent_day(user=user, days=days, now=now),
        "memory": memory_extractions(user=user, start=start, now=now),
        "broker": queue_depths(),
        "workers": workers_online(),
        "flower_url": settings.AGENTRY_FLOWER_URL,
        "refresh_seconds": settings.AGENTRY_MONITOR_REFRESH_SECONDS,
    }


def run_events_after(*, run: Run, after: int, limit: int = 200) -> dict:
    """A run's events past sequence number `after` (the try-an-agent page polls this), the
    approvals it waits for while it is parked, and once the run has ended, its answer."""
    events = list(
        run.events.filter(seq__gt=after).order_by("seq").values("seq", "type", "payload", "created_at")[:limit]
    )
    answer = run_final_answer(run=run)
    waiting = []
    if run.status == RunStatus.AWAITING_APPROVAL:
        waiting = [
            {"id": approval_id, "tool": tool}
            for approval_id, tool in Approval.objects.filter(run=run, status=Approval.Status.PENDING)
            .order_by("pk")
            .values_list("pk", "invocation__tool_name")
        ]
    return {
        "run": {
            "id": str(run.pk),
            "status": run.status,
            "status_text": status_words(run.status),
            "stop_reason": run.stop_reason,
            "stop_reason_text": run.get_stop_reason_display().lower() if run.stop_reason else "",
            "error": run.error,
            "terminal": run.is_terminal,
            "total_tokens": run.total_tokens,
            "cost": fixed_amount(run.cost),
        },
        "events": [{**event, "created_at": event["created_at"].isoformat()} for event in events],
        "pending_approvals": waiting,
        "tool_calls": run_tool_calls(run=run),
        "answer": answer.content if answer is not None else None,
    }


# What the try page shows of a tool's result: enough to read, not a whole document per poll.
TOOL_RESULT_CHARS = 2000


def run_tool_calls(*, run: Run) -> list[dict]:
    """The run's tool calls as the try page draws them while the run goes on: name, arguments,
    status, result or error, and the approval it waits for or got (one query)."""
    invocations = ToolInvocation.objects.filter(run=run).select_related("approval").order_by("created_at", "pk")
    calls = []
    for invocation in invocations:
        approval = getattr(invocation, "approval", None)
        result = invocation.result or ""
        calls.append(
            {
                "id": invocation.pk,
                "tool": invocation.tool_name,
                "status": invocation.status,
                "status_text": step_status_text({"kind": "tool_invocation", "status": invocation.status}),
                "arguments": invocation.arguments if invocation.arguments is not None else invocation.raw_arguments,
                "result": result[:TOOL_RESULT_CHARS],
                "result_cut": len(result) > TOOL_RESULT_CHARS,
                "error": invocation.error,
                "latency_ms": invocation.latency_ms,
                "approval": None
                if approval is None
                else {
                    "id": approval.pk,
                    "status": approval.status,
                    "status_text": approval_status_text(approval.status),
                },
            }
        )
    return calls


def run_question(*, run: Run) -> tuple[str | None, list[dict]]:
    """What the run was asked, and the attachments it carried (its parts, attachments.parts; []
    for none), in the same read: its user message, or while it waits its turn (or for a
    delegated run, whose task its parent wrote) what it was posted with."""
    asked = Message.objects.filter(run=run, role=Message.Role.USER).order_by("order").values_list("content", "parts")
    found = asked.first()
    if found is None:
        found = RunRequest.objects.filter(run=run).values_list("content", "parts").first()
    content, parts = found or (None, None)
    return content, parts or []
