"""Reads behind an agent's online scores page: each evaluator's daily average per version over
the last days (evals.online_selectors), drawn as lines, and the latest scores, each linked to its
run's timeline and showing the attachments its question carried (as the timeline shows them:
images as thumbnails, files as chips). The agent is one of the viewer's workspace (the view
finds it through it)."""

from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _

from agents.models import Agent
from console.monitoring.charts import score_lines
from conversations.models import Message
from evals.online_selectors import DASHBOARD_DAYS, online_score_days, online_scores_recent


def _version_name(number) -> str:
    return f"v{number}" if number is not None else _("draft")


def _question_parts(run_ids: list) -> dict:
    """Each run's question's attachments (its first user message's parts), in one read."""
    parts: dict = {}
    asked = Message.objects.filter(run_id__in=run_ids, role=Message.Role.USER).order_by("run_id", "order")
    for run_id, found in asked.values_list("run_id", "parts"):
        parts.setdefault(run_id, found or [])
    return parts


def online_page(*, agent: Agent) -> dict:
    rows = online_score_days(agent=agent)
    recent = online_scores_recent(agent=agent)
    parts = _question_parts([score.run_id for score in recent])
    return {
        "days": DASHBOARD_DAYS,
        "charts": [
            {
                "evaluator": row["evaluator"],
                "chart": score_lines(
                    days=row["days"],
                    versions=[
                        {"name": _version_name(version["number"]), "points": version["points"]}
                        for version in row["versions"]
                    ],
                ),
            }
            for row in rows
        ],
        "recent": [{"score": score, "parts": parts.get(score.run_id, [])} for score in recent],
        "attachments_shown": any(parts.values()),
        "evaluators_url": reverse("admin:evals_onlineevaluator_changelist") + f"?agent__id__exact={agent.pk}",
        "scores_url": reverse("admin:evals_onlinescore_changelist") + f"?evaluator__agent__id__exact={agent.pk}",
        "add_url": reverse("admin:evals_onlineevaluator_add") + f"?agent={agent.pk}",
        "timezone": timezone.localtime().tzname(),
    }
