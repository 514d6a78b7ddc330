"""A run's steps on one time axis: each model call, tool call, wait for an approval and delegated
run as a bar from its start to its end, measured from the run's start. Pure over the timeline's
export (console.monitoring.timeline), so the geometry is tested without a database.

Positions are percentages of the run's span; the template draws them as SVG rectangles (no
script, no inline style), the way the dashboard's charts are drawn.
"""

from datetime import datetime

from django.utils.translation import gettext as _

from console.monitoring.labels import approval_status_text, llm_call_title, step_status_text
from console.monitoring.presenters import duration_text

# A bar too short to see at this scale is drawn this wide (percent), so every step shows.
MIN_WIDTH = 0.4
TICKS = 4


def _moment(iso: str | None) -> datetime | None:
    return datetime.fromisoformat(iso) if iso else None


def _milliseconds(later: datetime, earlier: datetime) -> int:
    return int((later - earlier).total_seconds() * 1000)


# The statuses in which a step has not ended yet; in any other, a step without an end time (a call
# rejected before it ran) is drawn as a mark at its start, with no duration.
GOING = frozenset({"started", "pending", "awaiting_approval", "running", "queued", "awaiting_children"})


def _bar(*, kind, label, start, end, origin, span_ms, status, status_text, now, url=None, nested=False) -> dict:
    """`end` None: still going (drawn up to now), or ended without saying when."""
    running = end is None and status in GOING
    unknown = end is None and not running
    end = end or (now if running else start or now)
    start = start or end
    offset = max(_milliseconds(start, origin), 0)
    duration = max(_milliseconds(end, start), 0)
    left = min(offset / span_ms * 100, 100 - MIN_WIDTH)
    width = max(min(duration / span_ms * 100, 100 - left), MIN_WIDTH)
    return {
        "kind": kind,
        "label": label,
        "left": round(left, 3),
        "width": round(width, 3),
        "offset_text": duration_text(offset),
        "duration_ms": None if running or unknown else duration,
        "duration_text": _("still going") if running else duration_text(None if unknown else duration),
        "status": status,
        "status_text": status_text,
        "url": url,
        "nested": nested,
    }


def _ends(steps: list[dict]) -> list[datetime]:
    moments = []
    for step in steps:
        moments += [_moment(step.get("finished_at")), _moment(step.get("started_at"))]
        if step["kind"] == "tool_invocation":
            approval = step["approval"] or {}
            moments.append(_moment(approval.get("decided_at")))
            moments += [_moment(child["finished_at"]) for child in step["child_runs"]]
    return [moment for moment in moments if moment]


def run_waterfall(*, export: dict, now: datetime, run_url) -> dict:
    """The bars in the order the steps happened, and the axis' tick labels. `run_url(id)` links
    a delegated run to its own timeline."""
    run, steps = export["run"], export["steps"]
    origin = _moment(run["started_at"]) or _moment(run["created_at"])
    finished = _moment(run["finished_at"])
    ends = _ends(steps) + [finished or now]
    span_ms = max(max(_milliseconds(end, origin) for end in ends), 1)
    common = {"origin": origin, "span_ms": span_ms, "now": now}
    rows = []
    for step in steps:
        if step["kind"] == "llm_call":
            rows.append(
                _bar(
                    kind="llm_call",
                    label=llm_call_title(step),
                    start=_moment(step["started_at"]),
                    end=_moment(step["finished_at"]),
                    status=step["status"],
                    status_text=step_status_text(step),
                    **common,
                )
            )
            continue
        approval = step["approval"]
        if approval:
            rows.append(
                _bar(
                    kind="approval",
                    label=_("Approval of %(tool)s") % {"tool": step["tool"]},
                    start=_moment(approval["created_at"]),
                    end=_moment(approval["decided_at"]),
                    status=approval["status"],
                    status_text=approval_status_text(approval["status"]),
                    nested=True,
                    **common,
                )
            )
        children = step["child_runs"]
        rows.append(
            _bar(
                kind="tool",
                label=_("Tool %(tool)s") % {"tool": step["tool"]},
                start=_moment(step["started_at"]) or _moment(step["created_at"]),
                # A delegate call ends when its last delegated run does, if its own row says nothing.
                end=_moment(step["finished_at"]) or (_moment(children[-1]["finished_at"]) if children else None),
                status=step["status"],
                status_text=step_status_text(step),
                nested=True,
                **common,
            )
        )
        for child in children:
            rows.append(
                _bar(
                    kind="child",
                    label=_("Delegated run %(id)s (%(agent)s)") % {"id": child["id"][:8], "agent": child["agent"]},
                    start=_moment(child["started_at"]),
                    end=_moment(child["finished_at"]),
                    status=child["status"],
                    status_text=step_status_text({"kind": "run", "status": child["status"]}),
                    url=run_url(child["id"]),
                    nested=True,
                    **common,
                )
            )
    ticks = [duration_text(round(span_ms * i / TICKS)) for i in range(TICKS + 1)]
    return {"rows": rows, "ticks": ticks, "span_text": duration_text(span_ms)}
