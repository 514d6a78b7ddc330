"""Geometry of the dashboard's charts, drawn as inline SVG by the templates (no script, no
chart library): every bar is a rectangle with a tooltip title."""

import math

from django.utils.translation import gettext as _

PALETTE = ["#417690", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#0072b2", "#999999"]
STATUS_COLORS = {"completed": "#2e7d32", "failed": "#c62828", "cancelled": "#8d8d8d", "expired": "#ef6c00"}

WIDTH, HEIGHT = 640, 180
LEFT, BOTTOM, TOP = 48, 22, 8


def nice_ceiling(value: float) -> float:
    """The smallest 1, 2 or 5 × 10^k at or above `value` (axis maximum)."""
    if value <= 0:
        return 1
    power = 10 ** math.floor(math.log10(value))
    return next(step * power for step in (1, 2, 5, 10) if step * power >= value)


def stacked_bars(*, categories: list[str], series: list[dict], unit: str = "") -> dict:
    """categories: x labels; series: [{"name", "color", "values": [one per category]}]."""
    totals = [sum(s["values"][i] for s in series) for i in range(len(categories))]
    top = nice_ceiling(max(totals, default=0))
    plot_w, plot_h = WIDTH - LEFT - 4, HEIGHT - BOTTOM - TOP
    slot = plot_w / max(len(categories), 1)
    bar_w = max(slot * 0.75, 1)
    bars, labels = [], []
    label_every = max(1, math.ceil(len(categories) / 12))
    for i, category in enumerate(categories):
        x = LEFT + i * slot + (slot - bar_w) / 2
        base = 0.0
        for s in series:
            value = s["values"][i]
            if value:
                h = value / top * plot_h
                bars.append(
                    {
                        "x": round(x, 1),
                        "y": round(TOP + plot_h - base - h, 1),
                        "w": round(bar_w, 1),
                        "h": round(h, 1),
                        "color": s["color"],
                        "title": f"{category} · {s['name']}: {_fmt(value)}{unit}",
                    }
                )
                base += h
        if i % label_every == 0:
            labels.append({"x": round(x + bar_w / 2, 1), "text": category})
    return {
        "width": WIDTH,
        "height": HEIGHT,
        "left": LEFT,
        "baseline": TOP + plot_h,
        "top": TOP,
        "right": WIDTH - 4,
        "max_label": f"{_fmt(top)}{unit}",
        "bars": bars,
        "labels": labels,
        "legend": [{"name": s["name"], "color": s["color"]} for s in series],
        "empty": not any(totals),
        "mid_x": WIDTH / 2,
        "mid_y": HEIGHT / 2,
    }


def latency_bars(rows: list[dict]) -> dict:
    """One row per model: a pale bar to p95 with a dark bar to p50 on top."""
    top = nice_ceiling(max((row["p95_ms"] or 0 for row in rows), default=0))
    label_w, row_h = 180, 26
    plot_w = WIDTH - label_w - 70
    items = []
    for i, row in enumerate(rows):
        y = TOP + i * row_h
        items.append(
            {
                "y": y,
                "text_y": y + 14,
                "name": row["name"],
                "p50_w": round((row["p50_ms"] or 0) / top * plot_w, 1),
                "p95_w": round((row["p95_ms"] or 0) / top * plot_w, 1),
                "title": _("%(name)s: p50 %(p50)s ms, p95 %(p95)s ms over %(calls)s calls")
                % {"name": row["name"], "p50": row["p50_ms"], "p95": row["p95_ms"], "calls": row["calls"]},
                "value_x": label_w + round((row["p95_ms"] or 0) / top * plot_w, 1) + 6,
                "value": f"{row['p50_ms']} / {row['p95_ms']} ms" if row["p95_ms"] is not None else _("no data"),
            }
        )
    return {
        "width": WIDTH,
        "height": TOP * 2 + max(len(rows), 1) * row_h,
        "label_w": label_w,
        "items": items,
        "max_label": f"{_fmt(top)} ms",
    }


def score_lines(*, days: list, versions: list[dict]) -> dict:
    """Scores from 0 to 1 per day, one line per version: versions are [{"name", "points": [one
    (average, count) or None per day]}]; a day without scores breaks the line."""
    plot_w, plot_h = WIDTH - LEFT - 4, HEIGHT - BOTTOM - TOP
    slot = plot_w / max(len(days) - 1, 1)
    label_every = max(1, math.ceil(len(days) / 10))
    lines = []
    for index, version in enumerate(versions):
        color = PALETTE[index % len(PALETTE)]
        points, segments, segment = [], [], []
        for i, point in enumerate(version["points"]):
            if point is None:
                if segment:
                    segments.append(" ".join(segment))
                segment = []
                continue
            average, count = point
            x, y = round(LEFT + i * slot, 1), round(TOP + plot_h - average * plot_h, 1)
            segment.append(f"{x},{y}")
            points.append(
                {
                    "x": x,
                    "y": y,
                    "title": _("%(day)s · %(name)s: %(average)s over %(count)s scores")
                    % {"day": days[i], "name": version["name"], "average": f"{average:.2f}", "count": count},
                }
            )
        if segment:
            segments.append(" ".join(segment))
        lines.append({"name": version["name"], "color": color, "segments": segments, "points": points})
    return {
        "width": WIDTH,
        "height": HEIGHT,
        "left": LEFT,
        "baseline": TOP + plot_h,
        "top": TOP,
        "right": WIDTH - 4,
        "max_label": "1",
        "lines": lines,
        "labels": [
            {"x": round(LEFT + i * slot, 1), "text": day.strftime("%m-%d")}
            for i, day in enumerate(days)
            if i % label_every == 0
        ],
        "legend": [{"name": line["name"], "color": line["color"]} for line in lines],
        "empty": not any(line["points"] for line in lines),
        "mid_x": WIDTH / 2,
        "mid_y": HEIGHT / 2,
    }


def _fmt(value: float) -> str:
    if value >= 1_000_000:
        return f"{value / 1_000_000:.3g}M"
    if value >= 10_000:
        return f"{value / 1000:.3g}k"
    return f"{value:.4g}" if isinstance(value, float) else str(value)
