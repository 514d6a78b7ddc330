"""Turning the dashboard's and the timeline's data into what the templates draw."""

import json
from datetime import date, datetime

from django.utils import timezone

from console.monitoring.charts import PALETTE, STATUS_COLORS, latency_bars, stacked_bars


def _hour_label(iso: str) -> str:
    return timezone.localtime(datetime.fromisoformat(iso)).strftime("%H:00")


def _day_label(iso: str) -> str:
    return date.fromisoformat(iso).strftime("%m-%d")


HOUR_CHOICES = (6, 24, 72, 168)


def dashboard_context(snapshot: dict) -> dict:
    return {"snapshot": snapshot, "charts": _charts(snapshot), "hour_choices": HOUR_CHOICES}


def _charts(snapshot: dict) -> dict:
    hours = snapshot["runs_by_hour"]
    usage = snapshot["usage"]
    days = [_day_label(day) for day in usage["days"]]
    agents = [(agent, PALETTE[i % len(PALETTE)]) for i, agent in enumerate(usage["agents"])]
    return {
        "runs": stacked_bars(
            categories=[_hour_label(row["hour"]) for row in hours],
            series=[
                {"name": status, "color": color, "values": [row[status] for row in hours]}
                for status, color in STATUS_COLORS.items()
            ],
        ),
        "tokens": stacked_bars(
            categories=days,
            series=[
                {"name": agent["name"], "color": color, "values": [cell["total_tokens"] for cell in agent["per_day"]]}
                for agent, color in agents
            ],
        ),
        "cost": stacked_bars(
            categories=days,
            series=[
                {"name": agent["name"], "color": color, "values": [float(cell["cost"]) for cell in agent["per_day"]]}
                for agent, color in agents
            ],
        ),
        "latency": latency_bars(snapshot["latency"]),
    }


def _pretty(value) -> str:
    return "" if value is None else json.dumps(value, ensure_ascii=False, indent=2)


def timeline_rows(steps: list[dict]) -> list[dict]:
    """Each step with its JSON parts pretty-printed for <pre> blocks."""
    rows = []
    for number, step in enumerate(steps, start=1):
        row = {"number": number, "step": step}
        if step["kind"] == "llm_call":
            row.update(request=_pretty(step["request"]), response=_pretty(step["response"]))
        else:
            row.update(arguments=_pretty(step["arguments"]) if step["arguments"] is not None else step["raw_arguments"])
        rows.append(row)
    return rows
