"""The usage page of the workspace the operator acts in: today's and this month's tokens and
cost against its limits, its runs in flight, and each agent's share (conversations.workspace_usage)."""

from dataclasses import dataclass
from decimal import Decimal

from django.contrib import admin
from django.shortcuts import render
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from console.monitoring.views import operator_required
from conversations.workspace_usage import Period, Usage, workspace_agents_usage
from platform_site.http_methods import require_GET
from workspaces.access import current_workspace

# Members who may see their workspace (viewer and up; an approver sees only the approval queue).
VIEW_PERMISSION = "workspaces.view_workspace"
CENTS = Decimal("0.0001")


@dataclass(frozen=True)
class Line:
    """One budget or quota: what is used, its limit (None: none) and the share used, in percent."""

    label: str
    used: object
    limit: object
    percent: int | None


def _line(label, used, limit) -> Line:
    percent = None if not limit else min(100, int(used * 100 / limit))
    if isinstance(used, Decimal):
        used = used.quantize(CENTS)  # the ledger keeps 8 places; a page shows 4
    return Line(label, used, limit, percent)


def usage_lines(workspace, usage: Usage) -> list[Line]:
    return [
        _line(_("Tokens today"), usage.tokens_today, workspace.daily_token_limit),
        _line(_("Cost today"), usage.cost_today, workspace.daily_cost_limit),
        _line(_("Tokens this month"), usage.tokens_month, workspace.monthly_token_limit),
        _line(_("Cost this month"), usage.cost_month, workspace.monthly_cost_limit),
        _line(_("Runs in flight"), usage.runs_in_flight, workspace.max_runs_in_flight),
    ]


@require_GET
@operator_required(VIEW_PERMISSION)
def workspace_usage(request):
    workspace = current_workspace(request.user)
    context = {**admin.site.each_context(request), "title": _("Workspace usage"), "workspace": workspace}
    if workspace is not None:
        period = Period.at(timezone.now())
        # One statement for the agents and their usage; the workspace's total is their sum.
        agents = list(workspace_agents_usage(workspace_id=workspace.pk, period=period))
        usage = Usage(
            tokens_today=sum(a.tokens_today for a in agents),
            cost_today=sum((a.cost_today for a in agents), start=Usage().cost_today),
            tokens_month=sum(a.tokens_month for a in agents),
            cost_month=sum((a.cost_month for a in agents), start=Usage().cost_month),
            runs_in_flight=sum(a.runs_in_flight for a in agents),
        )
        context |= {"period": period, "lines": usage_lines(workspace, usage), "agents": agents}
    return render(request, "console/workspace_usage.html", context)
