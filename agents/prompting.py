"""System prompt rendering.

Seed 000's system message opens with the current date and time ("今天是 2026年02月28日
15时05分30秒 星期六 。"); templates get that and friends, rendered in the agent's time zone.
The template engine runs without autoescaping: this is prompt text, not HTML. A prompt is tried
when it is saved (system_prompt_check), so one that cannot render is refused then rather than
failing every run of the agent. Every render has a budget of work (agents.prompt_budget): one
past it stops with PromptBudgetExceeded, at a save as at a run.
"""

import zoneinfo
from datetime import datetime
from functools import lru_cache

from django.core.exceptions import ValidationError
from django.template import Context, Engine
from django.utils import timezone
from django.utils.translation import gettext as _

from agents.prompt_budget import RenderBudget, template_meter

_WEEKDAYS_CN = ["星期一", "星期二", "星期三", "星期四", "星期五", "星期六", "星期日"]
# Autoescaping is a property of the Context, not only of the Engine: render() passes one that
# says so, or "A & B" would reach the model as "A &amp; B".
_engine = Engine(autoescape=False, builtins=["agents.prompt_budget"])
# A short template can render a huge prompt ({% for %} over a padded string): past this the
# prompt is refused when saved, before every run pays for it in tokens.
MAX_RENDERED_CHARS = 200_000


@lru_cache(maxsize=256)
def _compile(template: str):
    compiled = _engine.from_string(template)
    template_meter(compiled)
    return compiled


def prompt_variables(*, now: datetime, time_zone: str, agent_name: str) -> dict:
    local = now.astimezone(zoneinfo.ZoneInfo(time_zone))
    weekday = _WEEKDAYS_CN[local.weekday()]
    return {
        "now": local.isoformat(timespec="seconds"),
        "now_cn": local.strftime("%Y年%m月%d日 %H时%M分%S秒 ") + weekday,
        "date": local.date().isoformat(),
        "time": local.strftime("%H:%M:%S"),
        "weekday": weekday,
        "weekday_en": local.strftime("%A"),
        "time_zone": time_zone,
        "agent_name": agent_name,
    }


def prompt_text_render(template: str, variables: dict) -> str:
    """A template that makes text a model reads (a system prompt, a schedule's or a hook's
    message): compiled once per process, never HTML-escaped, stopped with PromptBudgetExceeded
    when it does more work than agents.prompt_budget allows."""
    context = Context(variables, autoescape=False)
    context.prompt_budget = RenderBudget()
    return _compile(template).render(context)


def render_system_prompt(*, template: str, now: datetime, time_zone: str, agent_name: str) -> str:
    if not template:
        return ""
    return prompt_text_render(template, prompt_variables(now=now, time_zone=time_zone, agent_name=agent_name))


def system_prompt_check(*, template: str, time_zone: str, agent_name: str) -> None:
    """ValidationError if the template does not render now: a syntax error, an unknown tag or
    filter, a filter that raises on these variables, an include or url that cannot resolve."""
    if time_zone not in zoneinfo.available_timezones():
        time_zone = "UTC"  # the time zone's own field reports it
    try:
        rendered = render_system_prompt(
            template=template, now=timezone.now(), time_zone=time_zone, agent_name=agent_name
        )
    except Exception as exc:  # noqa: BLE001 - whatever a template raises, every run would raise it too
        raise ValidationError(
            _("The system prompt cannot be rendered: %(error)s"),
            code="invalid_template",
            params={"error": str(exc) or type(exc).__name__},
        ) from None
    if len(rendered) > MAX_RENDERED_CHARS:
        raise ValidationError(
            _("The system prompt renders to %(size)s characters; at most %(limit)s are allowed."),
            code="prompt_too_long",
            params={"size": len(rendered), "limit": MAX_RENDERED_CHARS},
        )
