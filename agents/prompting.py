"""System prompt rendering.

Seed 000's system message opens with the current date and time ("今天是 2026年02月28日
15时05分30秒 星期六 。"); templates get that and friends, rendered in the agent's time zone.
The template engine runs without autoescaping: this is prompt text, not HTML.
"""

import zoneinfo
from datetime import datetime
from functools import lru_cache

from django.template import Context, Engine

_WEEKDAYS_CN = ["星期一", "星期二", "星期三", "星期四", "星期五", "星期六", "星期日"]
_engine = Engine(autoescape=False)


@lru_cache(maxsize=256)
def _compile(template: str):
    return _engine.from_string(template)


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


def render_system_prompt(*, template: str, now: datetime, time_zone: str, agent_name: str) -> str:
    if not template:
        return ""
    variables = prompt_variables(now=now, time_zone=time_zone, agent_name=agent_name)
    return _compile(template).render(Context(variables))
