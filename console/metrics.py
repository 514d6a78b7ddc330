"""Prometheus metrics at /metrics, computed from the database when scraped.

Web and worker processes are separate (and there are several of each), so no process holds the
platform's counts in memory: the ledger does. Each scrape costs a handful of aggregate queries
whose size does not grow with the ledger:

- cumulative counters (runs finished, model calls, tokens, cost) are sums over the hourly
  rollups (conversations.monitoring: a row per hour, agent and model), so they only go up;
- gauges of what is open now (runs by active status, pending approvals and the oldest one's
  age) read the status indexes of the runs and approvals;
- latency histograms and tool calls cover the ledger rows of the last
  AGENTRY_METRICS_WINDOW_SECONDS (reached through the model calls' start-time index), exposed
  as gauge histograms: a distribution of a recent window, not a counter since the start;
- broker queue depths come from the monitoring page's cached probe;
- alerts firing: one gauge per enabled rule (or rule still firing), 1 while it has an open firing.

Scraped with `Authorization: Bearer <AGENTRY_METRICS_TOKEN>` (the whole installation), or by a
staff member allowed to see runs in a browser session (the workspace they act in, through
workspaces.access.in_workspace). The per-agent families carry a `workspace` label (its slug);
the totals keep their labels.
"""

import hmac
from datetime import timedelta

from django.conf import settings
from django.db.models import Count, Min, Q, Sum
from django.http import HttpResponse
from django.urls import path
from django.utils import timezone
from django.utils.translation import gettext as _
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeHistogramMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from alerts.models import AlertRule
from alerts.selectors import alert_rules_firing
from console.monitoring.broker import queue_depths
from conversations.models import Approval, LLMCall, Run, ToolInvocation
from conversations.monitoring.models import LLMCallHourly, RunHourly
from conversations.usage import USAGE_FIELDS
from conversations.workspace_usage import Period, workspaces_usage
from engine.dispatch import ACTIVE_STATUSES
from platform_site.error_responses import error_json
from platform_site.http_methods import require_GET
from workspaces.access import in_workspace

# Seconds: from a fast tool to a model call that waits on a long answer.
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_TOKEN_KINDS = {
    "prompt_tokens": "input",
    "completion_tokens": "output",
    "cached_tokens": "cached_input",
    "reasoning_tokens": "reasoning",
}


def _window_start():
    return timezone.now() - timedelta(seconds=settings.AGENTRY_METRICS_WINDOW_SECONDS)


def _buckets(rows) -> dict:
    """Aggregates counting the rows at or under each bucket's bound (latency_ms), in one query."""
    bounds = {f"le_{i}": Count("pk", filter=Q(latency_ms__lte=int(b * 1000))) for i, b in enumerate(LATENCY_BUCKETS)}
    return rows.filter(latency_ms__isnull=False).aggregate(n=Count("pk"), total=Sum("latency_ms"), **bounds)


def _histogram(name: str, documentation: str, rows) -> GaugeHistogramMetricFamily:
    counts = _buckets(rows)
    buckets = [(str(b), counts[f"le_{i}"]) for i, b in enumerate(LATENCY_BUCKETS)]
    buckets.append(("+Inf", counts["n"]))
    return GaugeHistogramMetricFamily(name, documentation, buckets=buckets, gsum_value=(counts["total"] or 0) / 1000)


def _everything(queryset):
    return queryset


class LedgerCollector:
    """`scope` narrows every read to what the scraper may see (the bearer token: everything)."""

    def __init__(self, scope=_everything):
        self.scope = scope

    def collect(self):
        yield from self._runs()
        yield from self._model_calls()
        yield from self._tools()
        yield from self._queues()
        yield from self._alerts()

    def _runs(self):
        active = GaugeMetricFamily("agentry_runs", "Runs open now, by status.", labels=["status"])
        counts = dict(
            self.scope(Run.objects.filter(status__in=ACTIVE_STATUSES))
            .values_list("status")
            .annotate(n=Count("pk"))
            .order_by()
        )
        for status in ACTIVE_STATUSES:
            active.add_metric([status], counts.get(status, 0))
        yield active
        finished = CounterMetricFamily(
            "agentry_runs_finished",
            "Runs ended, by workspace, agent, status and stop reason.",
            labels=["workspace", "agent", "status", "stop_reason"],
        )
        rows = (
            self.scope(RunHourly.objects.all())
            .values_list("agent__workspace__slug", "agent__slug", "status", "stop_reason")
            .annotate(n=Sum("runs"))
            .order_by("agent__workspace__slug", "agent__slug", "status", "stop_reason")
        )
        for workspace, agent, status, stop_reason, n in rows:
            finished.add_metric([workspace, agent, status, stop_reason], n)
        yield finished

    def _model_calls(self):
        labels = ["workspace", "agent", "model"]
        calls = CounterMetricFamily("agentry_model_calls", "Model call attempts.", labels=[*labels, "status"])
        tokens = CounterMetricFamily("agentry_tokens", "Tokens used, by kind.", labels=[*labels, "kind"])
        cost = CounterMetricFamily("agentry_cost", "Cost of the model calls, in the prices' currency.", labels=labels)
        sums = {field: Sum(field) for field in USAGE_FIELDS if field in _TOKEN_KINDS}
        rows = (
            self.scope(LLMCallHourly.objects.all())
            .values("agent__workspace__slug", "agent__slug", "model_config__name")
            .annotate(calls=Sum("calls"), failed=Sum("failed"), cost=Sum("cost"), **sums)
            .order_by("agent__workspace__slug", "agent__slug", "model_config__name")
        )
        for row in rows:
            key = [row["agent__workspace__slug"], row["agent__slug"], row["model_config__name"]]
            calls.add_metric([*key, "succeeded"], row["calls"] - row["failed"])
            calls.add_metric([*key, "failed"], row["failed"])
            for field, kind in _TOKEN_KINDS.items():
                tokens.add_metric([*key, kind], row[field])
            cost.add_metric(key, float(row["cost"]))
        yield from (calls, tokens, cost)
        yield _histogram(
            "agentry_model_call_latency_seconds",
            "Latency of the model call attempts of the recent window.",
            self.scope(LLMCall.objects.filter(started_at__gte=_window_start())),
        )

    def _tools(self):
        # Through the model call that asked for them: its start-time index bounds the scan.
        recent = self.scope(ToolInvocation.objects.filter(llm_call__started_at__gte=_window_start()))
        calls = GaugeMetricFamily(
            "agentry_tool_calls_recent",
            "Tool calls of the recent window, by tool and status.",
            labels=["tool", "status"],
        )
        rows = recent.values_list("tool_name", "status").annotate(n=Count("pk")).order_by("tool_name", "status")
        for tool, status, n in rows:
            calls.add_metric([tool, status], n)
        yield calls
        yield _histogram("agentry_tool_call_latency_seconds", "Latency of the tool calls of the recent window.", recent)

    def _queues(self):
        queued = GaugeMetricFamily("agentry_broker_queue_depth", "Messages waiting per Celery queue.", labels=["queue"])
        for queue in queue_depths()["queues"]:
            if queue["depth"] is not None:
                queued.add_metric([queue["name"]], queue["depth"])
        yield queued
        pending = self.scope(Approval.objects.filter(status=Approval.Status.PENDING)).aggregate(
            n=Count("pk"), oldest=Min("created_at")
        )
        yield GaugeMetricFamily("agentry_approvals_pending", "Approvals waiting for a decision.", value=pending["n"])
        age = (timezone.now() - pending["oldest"]).total_seconds() if pending["oldest"] else 0
        yield GaugeMetricFamily(
            "agentry_approval_oldest_pending_age_seconds", "How long the oldest pending approval has waited.", value=age
        )

    def _alerts(self):
        firing = GaugeMetricFamily("agentry_alerts_firing", "1 while the alert rule fires, by rule.", labels=["rule"])
        for rule, is_firing in alert_rules_firing(self.scope(AlertRule.objects.all())):
            firing.add_metric([rule], int(is_firing))
        yield firing


# Workspaces' budgets and quotas: families of their own, labelled by workspace (its slug), apart
# from the ledger's per-agent families above.
_WORKSPACE_LIMITS = {
    "daily_token_limit": "tokens_day",
    "monthly_token_limit": "tokens_month",
    "daily_cost_limit": "cost_day",
    "monthly_cost_limit": "cost_month",
    "max_runs_in_flight": "runs_in_flight",
}


class WorkspaceBudgetCollector:
    """Each workspace's usage of the day and the month (the installation's time zone: they fall
    back to 0 at its midnight, so gauges), its runs in flight and its limits, in one statement
    (conversations.workspace_usage.workspaces_usage, as admission reads them)."""

    def collect(self):
        labels = ["workspace", "period"]
        tokens = GaugeMetricFamily(
            "agentry_workspace_tokens", "Tokens a workspace's agents used this day or month.", labels=labels
        )
        cost = GaugeMetricFamily(
            "agentry_workspace_cost", "Cost of a workspace's model calls this day or month.", labels=labels
        )
        in_flight = GaugeMetricFamily(
            "agentry_workspace_runs_in_flight", "A workspace's runs not ended yet.", labels=["workspace"]
        )
        limits = GaugeMetricFamily(
            "agentry_workspace_limit",
            "A workspace's budgets and quotas, by kind (only those set).",
            labels=["workspace", "limit"],
        )
        for usage in workspaces_usage(period=Period.at(timezone.now())).values():
            tokens.add_metric([usage.slug, "day"], usage.tokens_today)
            tokens.add_metric([usage.slug, "month"], usage.tokens_month)
            cost.add_metric([usage.slug, "day"], float(usage.cost_today))
            cost.add_metric([usage.slug, "month"], float(usage.cost_month))
            in_flight.add_metric([usage.slug], usage.runs_in_flight)
            for field, kind in _WORKSPACE_LIMITS.items():
                if usage.limits[field] is not None:
                    limits.add_metric([usage.slug, kind], float(usage.limits[field]))
        yield from (tokens, cost, in_flight, limits)


_registry = CollectorRegistry(auto_describe=False)
_registry.register(LedgerCollector())
_registry.register(WorkspaceBudgetCollector())


def _bearer_ok(request) -> bool | None:
    """True/False for a bearer token that matches or not; None when the request has none."""
    header = request.headers.get("Authorization", "")
    if not header.startswith("Bearer "):
        return None
    token = settings.AGENTRY_METRICS_TOKEN
    return bool(token) and hmac.compare_digest(header[len("Bearer ") :].encode(), token.encode())


@require_GET
def metrics(request):
    bearer = _bearer_ok(request)
    if bearer is False or (bearer is None and not request.user.is_authenticated):
        return error_json(
            request,
            401,
            _("Scrape with the metrics bearer token, or sign in."),
            code="not_authenticated",
            headers={"WWW-Authenticate": 'Bearer realm="metrics"'},
        )
    if not bearer and not (request.user.is_staff and request.user.has_perm("conversations.view_run")):
        return error_json(request, 403, _("You are not allowed to read the metrics."), code="permission_denied")
    registry = _registry if bearer else _session_registry(request.user)
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


def _session_registry(user) -> CollectorRegistry:
    """A signed-in scraper's metrics: of the workspace they act in only."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LedgerCollector(scope=lambda queryset: in_workspace(queryset, user)))
    return registry


urlpatterns = [path("metrics", metrics, name="metrics")]
