"""Turning the dashboard's and the timeline's data into what the templates draw."""

import json
from datetime import date, datetime

from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from console.approvals.diff import arguments_diff
from console.monitoring.charts import PALETTE, STATUS_COLORS, latency_bars, stacked_bars
from console.monitoring.labels import (
    approval_channel_text,
    approval_status_text,
    fork_change_text,
    llm_call_title,
    routing_text,
    run_status_text,
    step_status_text,
    stop_reason_text,
)
from conversations.models import RunStatus
from tools.arguments import arguments_hash

# A run's status as the try page says it while the run goes on.
STATUS_WORDS = {
    RunStatus.QUEUED: _("queued, waiting for a worker"),
    RunStatus.RUNNING: _("running"),
    RunStatus.AWAITING_APPROVAL: _("waiting for approval"),
    RunStatus.AWAITING_CHILDREN: _("waiting for the agents it asked"),
    RunStatus.COMPLETED: _("completed"),
    RunStatus.FAILED: _("failed"),
    RunStatus.CANCELLED: _("cancelled"),
    RunStatus.EXPIRED: _("expired"),
}


def status_words(status: str) -> str:
    return str(STATUS_WORDS.get(status, status))


def duration_text(milliseconds: int | None) -> str:
    """850 ms, 12.3 s, 4 min 5 s."""
    if milliseconds is None:
        return "–"
    if milliseconds < 1000:
        return f"{milliseconds} ms"
    seconds = milliseconds / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    return f"{int(seconds // 60)} min {int(seconds % 60)} s"


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
                {"name": run_status_text(status), "color": color, "values": [row[status] for row in hours]}
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


def approval_edit(*, original, approved, approved_by: str = "") -> dict | None:
    """When a person approved other arguments than the model's: both sets and their line diff
    (the tool ran with the approved ones). None when nothing was changed."""
    if approved is None or arguments_hash(original or {}) == arguments_hash(approved):
        return None
    return {
        "original": _pretty(original or {}),
        "approved": _pretty(approved),
        "diff": arguments_diff(original or {}, approved),
        "approved_by": approved_by,
    }


def _tool_duration(step: dict) -> int | None:
    """The call's own latency; a delegate call records none, so it took as long as the last run
    it delegated to."""
    if step["latency_ms"] is not None or not step["child_runs"]:
        return step["latency_ms"]
    return step["child_runs"][-1]["duration_ms"]


def timeline_rows(steps: list[dict]) -> list[dict]:
    """Each step with its words (title, status), its duration, and its JSON parts pretty-printed
    for <pre> blocks."""
    rows = []
    for number, step in enumerate(steps, start=1):
        row = {"number": number, "step": step, "status_text": step_status_text(step)}
        if step["kind"] == "llm_call":
            row.update(
                title=llm_call_title(step),
                routing_text=routing_text(step.get("routing")),
                duration_ms=step["latency_ms"],
                request=_pretty(step["request"]),
                response=_pretty(step["response"]),
            )
        else:
            row.update(
                duration_ms=_tool_duration(step),
                arguments=_pretty(step["arguments"]) if step["arguments"] is not None else step["raw_arguments"],
                children=[{**child, "status_text": run_status_text(child["status"])} for child in step["child_runs"]],
            )
            approval = step["approval"]
            if approval:
                row["approval_text"] = approval_status_text(approval["status"]).lower()
                row["channel_text"] = approval_channel_text(approval["channel"])
            if approval and approval["edited"]:
                row["edit"] = approval_edit(
                    original=step["arguments"], approved=approval["arguments"], approved_by=approval["decided_by"] or ""
                )
        rows.append(row)
    return rows


def run_outcome(run: dict) -> dict:
    """The run's ending in words, for the top of its timeline."""
    return {
        "status_text": run_status_text(run["status"]),
        "stop_reason_text": stop_reason_text(run["stop_reason"]),
        "duration_text": duration_text(run["duration_ms"]),
    }


def fork_context(run: dict) -> dict:
    """A run's forks in words, for its timeline: what it was forked with (when it is a fork),
    and the runs forked from it."""
    change = run["fork_change"] or {}
    fork_of = None
    if run["forked_from"]:
        fork_of = {"step": run["fork_step"], "change_text": fork_change_text(change.get("kind", ""))}
    return {
        "fork_of": fork_of,
        "forks": [
            {**fork, "change_text": fork_change_text(fork["change"]), "status_text": run_status_text(fork["status"])}
            for fork in run["forks"]
        ],
    }
