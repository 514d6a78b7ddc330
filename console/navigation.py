"""The operator pages a user can open, for the admin's header and index and the landing page.

Each link is offered only to users whose permissions open it, so nobody is shown a link that
answers 403; the approval queue carries the number of pending approvals."""

from dataclasses import dataclass

from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from agents.models import Agent
from console.monitoring.views import TRY_PERMISSIONS, VIEW_PERMISSION
from console.workspace_usage import VIEW_PERMISSION as USAGE_PERMISSION
from conversations.models import Approval
from conversations.permissions import user_may_decide
from reviews.services import REVIEW_PERMISSION
from workspaces.access import in_workspace, may


@dataclass(frozen=True)
class OperatorLink:
    key: str
    label: str
    url: str
    description: str
    count: int | None = None


def _is_operator(user, *permissions: str) -> bool:
    # The monitoring pages' own check (console.monitoring.views.operator_required).
    return user.is_authenticated and user.is_active and user.is_staff and user.has_perms(permissions)


def operator_links(user) -> list[OperatorLink]:
    links = []
    if _is_operator(user, VIEW_PERMISSION):
        links.append(
            OperatorLink(
                "monitoring",
                _("Monitoring"),
                reverse("monitoring:dashboard"),
                _("Queues, workers, stuck runs, failures, latency, tokens and cost."),
            )
        )
    if _is_operator(user, VIEW_PERMISSION):
        links.append(
            OperatorLink(
                "guardrails",
                _("Guardrail review"),
                reverse("admin:conversations_run_changelist") + "?guardrail=flag",
                _("Runs a guardrail flagged for review, with what matched (masked)."),
            )
        )
    if user.is_authenticated and user_may_decide(user):
        # The workspace's own: another's waiting approvals are neither shown nor counted.
        pending = in_workspace(Approval.objects.filter(status=Approval.Status.PENDING), user).count()
        links.append(
            OperatorLink(
                "approvals",
                _("Approval queue"),
                reverse("approvals:queue"),
                _("Tool calls waiting for a person: approve, edit or reject."),
                count=pending,
            )
        )
    if user.is_authenticated and may(user, REVIEW_PERMISSION):
        links.append(
            OperatorLink(
                "reviews",
                _("Review queues"),
                reverse("reviews:queues"),
                _("Production runs picked for people to label, correct and make eval cases of."),
            )
        )
    if _is_operator(user, *TRY_PERMISSIONS):
        links.append(
            OperatorLink(
                "try",
                _("Try an agent"),
                reverse("monitoring:try"),
                _("Send a message through the real queue and watch the run."),
            )
        )
    if _is_operator(user, USAGE_PERMISSION):
        links.append(
            OperatorLink(
                "workspace-usage",
                _("Workspace usage"),
                reverse("workspace_usage"),
                _("Tokens and cost today and this month against the workspace's limits, runs in flight."),
            )
        )
    links.append(
        OperatorLink(
            "api-docs", _("API docs"), reverse("api-docs"), _("The REST API, its schema and a console to call it.")
        )
    )
    return links


# The front door lists the workspace's agents up to this many; the admin's list has them all.
FRONT_DOOR_AGENTS = 100


def agent_links(user) -> list[OperatorLink]:
    """Each agent of the workspace the user acts in, linked to its page (for those who may open
    it), by name."""
    if not _is_operator(user, VIEW_PERMISSION):
        return []
    agents = in_workspace(Agent.objects.order_by("name", "pk"), user).values_list("name", "slug", "description")
    return [
        OperatorLink(slug, name, reverse("monitoring:agent", args=[slug]), description)
        for name, slug, description in agents[:FRONT_DOOR_AGENTS]
    ]
