"""Reads of the online scores: the dashboard's daily averages per evaluator and version, the
alert rule's window (registered with alerts from EvalsConfig.ready) and the release gate's
averages per version over a canary's time. Empty scores (a judge that could not answer) count
in no average."""

from collections import defaultdict
from datetime import datetime, timedelta

from django.db.models import Avg, Count, Q
from django.db.models.functions import TruncDate
from django.utils import timezone

from agents.models import Agent
from evals.models import OnlineEvaluator, OnlineScore
from workspaces.access import of_workspace

DASHBOARD_DAYS = 30
RECENT_LIMIT = 50
SCORED = Q(score__isnull=False)


def online_scores_window(
    *, workspace_id: int, agent_id: int | None, start: datetime, end: datetime
) -> tuple[int, float]:
    """How many scores were made in [start, end] (of the agent, or of the workspace's agents)
    and their average (0 when none)."""
    scores = of_workspace(OnlineScore.objects.filter(SCORED, created_at__gte=start, created_at__lte=end), workspace_id)
    if agent_id is not None:
        scores = scores.filter(evaluator__agent_id=agent_id)
    row = scores.aggregate(n=Count("pk"), average=Avg("score"))
    return row["n"], row["average"] or 0.0


def online_score_days(*, agent: Agent, now: datetime | None = None, days: int = DASHBOARD_DAYS) -> list[dict]:
    """Per evaluator of the agent: the last `days` calendar days (the site's time zone) and, per
    version, the average score and count of each day (None for a day without scores)."""
    now = now or timezone.now()
    first = timezone.localdate(now) - timedelta(days=days - 1)
    start = timezone.make_aware(datetime.combine(first, datetime.min.time()))
    day_list = [first + timedelta(days=i) for i in range(days)]
    evaluators = list(OnlineEvaluator.objects.filter(agent=agent).order_by("name"))
    cells: dict[int, dict[int | None, dict]] = defaultdict(dict)
    rows = (
        OnlineScore.objects.filter(SCORED, evaluator__agent=agent, created_at__gte=start)
        .annotate(day=TruncDate("created_at", tzinfo=timezone.get_current_timezone()))
        .values("evaluator_id", "agent_version__number", "day")
        .annotate(average=Avg("score"), n=Count("pk"))
        .order_by()
    )
    for row in rows:
        cells[row["evaluator_id"]].setdefault(row["agent_version__number"], {})[row["day"]] = (row["average"], row["n"])
    return [
        {
            "evaluator": evaluator,
            "days": day_list,
            "versions": [
                {"number": number, "points": [by_day.get(day) for day in day_list]}
                for number, by_day in sorted(cells[evaluator.pk].items(), key=lambda item: item[0] or 0)
            ],
        }
        for evaluator in evaluators
    ]


def online_scores_recent(*, agent: Agent, limit: int = RECENT_LIMIT) -> list[OnlineScore]:
    return list(
        OnlineScore.objects.filter(evaluator__agent=agent)
        .select_related("evaluator", "agent_version")
        .order_by("-created_at", "-pk")[:limit]
    )


def online_averages(
    *, agent: Agent, version_ids: list[int], since: datetime
) -> dict[tuple[int, int], tuple[int, float]]:
    """(evaluator id, version id) -> (scores, average) of the agent's scores since `since`."""
    rows = (
        OnlineScore.objects.filter(
            SCORED, evaluator__agent=agent, agent_version_id__in=version_ids, created_at__gte=since
        )
        .values("evaluator_id", "agent_version_id")
        .annotate(n=Count("pk"), average=Avg("score"))
        .order_by()
    )
    return {(row["evaluator_id"], row["agent_version_id"]): (row["n"], row["average"]) for row in rows}
