"""Reads on approvals: who may see which, and the queue's filters."""

from uuid import UUID

from django.db.models import QuerySet

from agents.models import Agent
from conversations.models import Approval
from conversations.permissions import DECIDE_PERMISSION
from workspaces.access import in_workspace


def approvals_visible_to(*, user) -> QuerySet:
    """Approvers, and staff with the view permission, see every approval; anyone else only those
    of their own conversations."""
    # The parent run and its agent: an approval asked inside a delegated run shows who delegated.
    queryset = Approval.objects.select_related(
        "run__agent", "run__conversation", "run__parent_run__agent", "invocation__tool", "decided_by"
    )
    queryset = in_workspace(queryset, user)
    if user.has_perm(DECIDE_PERMISSION) or (user.is_staff and user.has_perm("conversations.view_approval")):
        return queryset
    return queryset.filter(run__conversation__owner=user)


def approvals_filter(
    *, queryset: QuerySet, status: str = "", agent: str = "", tool: str = "", run: UUID | str = ""
) -> QuerySet:
    if status == "decided":
        queryset = queryset.exclude(status=Approval.Status.PENDING)
    elif status:
        queryset = queryset.filter(status=status)
    if agent:
        queryset = queryset.filter(run__agent__slug=agent)
    if tool:
        queryset = queryset.filter(invocation__tool_name=tool)
    if run:
        queryset = queryset.filter(run_id=run)
    return queryset


def approval_filter_choices(*, queryset: QuerySet) -> dict:
    """The agents and tools that occur among these approvals, for the queue's filter menus."""
    slugs = queryset.order_by().values_list("run__agent__slug", flat=True).distinct()
    tools = queryset.order_by().values_list("invocation__tool_name", flat=True).distinct()
    return {
        "agents": list(Agent.objects.filter(slug__in=list(slugs)).order_by("name").values("slug", "name")),
        "tools": sorted(tools),
    }
