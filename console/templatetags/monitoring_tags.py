"""Small formatting filters for the monitoring pages."""

import json

from django import template

from agents.page_links import agent_page_link
from console import formatting
from console.monitoring.labels import run_status_text, stop_reason_text
from console.monitoring.missing import missing_process
from console.monitoring.presenters import duration_text
from platform_site.admin_mixins import json_html

register = template.Library()


@register.filter
def amount(value) -> str:
    """A cost in plain notation: 0.00042, never 0E-8."""
    return formatting.plain_amount(value)


@register.filter
def short_id(value) -> str:
    """The id's first characters, the whole id in the tooltip."""
    return formatting.short_id_html(value)


@register.filter
def agent_link(agent) -> str:
    """The agent's name linked to its page (agents.page_links: the admin lists' column too)."""
    return agent_page_link(agent)


@register.filter
def ms_duration(milliseconds) -> str:
    return duration_text(milliseconds)


@register.filter
def duration(seconds) -> str:
    """12 s, 4 min, 3 h 5 min."""
    if seconds is None or seconds == "":
        return "–"
    seconds = int(float(seconds))
    if seconds < 120:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 120:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60} min"


@register.filter
def percent(rate) -> str:
    return "–" if rate is None else f"{rate * 100:.1f} %"


@register.filter
def iso_time(value) -> str:
    """A moment (a datetime or the ISO text of the JSON data) as every operator page prints it:
    in the site's time zone, the zone named (console.formatting.local_time)."""
    return formatting.local_time(value)


@register.filter
def pretty_json(value) -> str:
    """A stored JSON value as the admin shows it: indented JSON, escaped (admin_mixins.json_html)."""
    return json_html(value)


@register.filter
def as_json(value) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


@register.filter
def missing(snapshot: dict) -> str:
    """The process the dashboard's hint names (console.monitoring.missing)."""
    return missing_process(snapshot)


@register.filter
def run_status(value: str) -> str:
    """A stored run status in the reader's words (its choice's label)."""
    return run_status_text(value)


@register.filter
def stop_reason(value: str) -> str:
    """A stored stop reason in the reader's words; empty for none."""
    return stop_reason_text(value)
