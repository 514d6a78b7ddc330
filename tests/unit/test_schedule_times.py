"""Schedules' fire times and what a tick does with the ones due, with plain objects: cron on the
local wall clock across clock changes, intervals on their grid, and the missed-fire policies."""

from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from django.core.exceptions import ValidationError

from agents.models import Agent
from triggers.models import Schedule
from triggers.schedules import due_fires, message_render, next_fire_after, schedule_check


def cron(expr, zone="Asia/Shanghai", missed=Schedule.Missed.ONCE):
    return SimpleNamespace(kind="cron", cron=expr, interval_seconds=None, time_zone=zone, missed=missed)


def at(*args):
    return datetime(*args, tzinfo=UTC)


def fires(schedule, after, n):
    times = []
    for _ in range(n):
        after = next_fire_after(schedule, after)
        times.append(after)
    return times


def test_a_daily_cron_stays_on_the_local_wall_clock_in_shanghai():
    # No clock changes in China: 09:00 is 01:00 UTC every day.
    assert fires(cron("0 9 * * *"), at(2026, 3, 1, 2), 2) == [at(2026, 3, 2, 1), at(2026, 3, 3, 1)]


def test_a_daily_cron_keeps_its_local_hour_across_the_spring_change_in_new_york():
    # 2026-03-08 02:00 EST -> 03:00 EDT: 09:00 is 14:00 UTC before, 13:00 UTC after.
    assert fires(cron("0 9 * * *", "America/New_York"), at(2026, 3, 7, 0), 3) == [
        at(2026, 3, 7, 14),
        at(2026, 3, 8, 13),
        at(2026, 3, 9, 13),
    ]


def test_a_skipped_wall_time_fires_as_if_the_clock_had_not_jumped():
    # 02:30 does not exist on 2026-03-08 in New York: it fires at 03:30 EDT (07:30 UTC), once.
    assert fires(cron("30 2 * * *", "America/New_York"), at(2026, 3, 7, 12), 2) == [
        at(2026, 3, 8, 7, 30),
        at(2026, 3, 9, 6, 30),
    ]


def test_a_repeated_wall_time_fires_once():
    # 01:30 happens twice on 2026-11-01 in New York (05:30 and 06:30 UTC): it fires at the first.
    assert fires(cron("30 1 * * *", "America/New_York"), at(2026, 10, 31, 12), 2) == [
        at(2026, 11, 1, 5, 30),
        at(2026, 11, 2, 6, 30),
    ]


def test_an_interval_is_a_grid_through_its_next_fire_time():
    schedule = SimpleNamespace(kind="interval", cron="", interval_seconds=600, time_zone="UTC", next_fire_at=None)
    anchor = at(2026, 1, 1, 0, 0)
    assert next_fire_after(schedule, at(2026, 1, 1, 0, 25), anchor=anchor) == at(2026, 1, 1, 0, 30)
    assert next_fire_after(schedule, at(2026, 1, 1, 0, 30), anchor=anchor) == at(2026, 1, 1, 0, 40)
    assert next_fire_after(schedule, at(2026, 1, 1, 0, 0, 7)) == at(2026, 1, 1, 0, 10, 7)  # no anchor: from after


def test_one_fire_due_within_the_grace_fires_on_its_own():
    plan = due_fires(cron("* * * * *", "UTC"), next_fire_at=at(2026, 1, 1, 9), now=at(2026, 1, 1, 9, 0, 10))
    assert (plan.fire_at, plan.covers, plan.skipped, plan.next_fire_at) == (
        at(2026, 1, 1, 9),
        1,
        0,
        at(2026, 1, 1, 9, 1),
    )


def test_nothing_is_due_before_the_next_fire_time():
    assert due_fires(cron("* * * * *", "UTC"), next_fire_at=at(2026, 1, 1, 9), now=at(2026, 1, 1, 8, 59)) is None


def test_after_downtime_once_fires_the_latest_covering_all_missed():
    plan = due_fires(cron("0 * * * *", "UTC"), next_fire_at=at(2026, 1, 1, 9), now=at(2026, 1, 1, 12, 30))
    assert (plan.fire_at, plan.covers, plan.skipped) == (at(2026, 1, 1, 12), 4, 0)
    assert plan.next_fire_at == at(2026, 1, 1, 13)  # never in the past


def test_after_downtime_skip_records_the_missed_and_fires_only_one_on_time():
    schedule = cron("0 * * * *", "UTC", missed=Schedule.Missed.SKIP)
    late = due_fires(schedule, next_fire_at=at(2026, 1, 1, 9), now=at(2026, 1, 1, 12, 30))
    assert (late.fire_at, late.skipped_at, late.skipped) == (None, at(2026, 1, 1, 12), 4)
    on_time = due_fires(schedule, next_fire_at=at(2026, 1, 1, 9), now=at(2026, 1, 1, 12, 0, 20))
    assert (on_time.fire_at, on_time.covers, on_time.skipped_at, on_time.skipped) == (
        at(2026, 1, 1, 12),
        1,
        at(2026, 1, 1, 11),
        3,
    )


def test_a_single_fire_older_than_the_grace_is_missed():
    schedule = cron("0 9 * * *", "UTC", missed=Schedule.Missed.SKIP)
    plan = due_fires(schedule, next_fire_at=at(2026, 1, 1, 9), now=at(2026, 1, 1, 9, 5))
    assert (plan.fire_at, plan.skipped) == (None, 1)
    assert due_fires(schedule, next_fire_at=at(2026, 1, 1, 9), now=at(2026, 1, 1, 9, 5), coalesce=True).fire_at == at(
        2026, 1, 1, 9
    )


def _schedule(**fields):
    values = {
        "name": "report",
        "kind": "cron",
        "cron": "0 9 * * *",
        "time_zone": "Asia/Shanghai",
        "message": "Report for {{ date }} in {{ vars.city }}",
        "variables": {"city": "Hangzhou"},
    }
    return Schedule(agent=Agent(name="Reporter"), **{**values, **fields})  # unsaved: no database


def test_the_message_renders_the_fire_time_locally_and_the_variables_unescaped():
    schedule = _schedule(
        message="{{ fire_time }} {{ weekday_en }} {{ vars.city }} {{ schedule }} <b>&</b>",
        variables={"city": "Hangzhou & <Shanghai>"},
    )
    assert message_render(schedule, fire_at=at(2026, 3, 2, 1)) == (
        "2026-03-02T09:00:00+08:00 Monday Hangzhou & <Shanghai> report <b>&</b>"
    )


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"cron": "0 9 * *"}, "cron"),
        ({"cron": "61 9 * * *"}, "cron"),
        ({"time_zone": "Mars/Olympus"}, "time_zone"),
        ({"kind": "interval", "cron": "", "interval_seconds": 59}, "interval_seconds"),
        ({"kind": "interval", "interval_seconds": 60}, "cron"),
        ({"message": "{% for %}"}, "message"),
        ({"message": "{{ vars.x|ljust:200000 }}"}, "message"),
    ],
)
def test_a_schedule_that_cannot_fire_is_refused_by_field(fields, field):
    with pytest.raises(ValidationError) as caught:
        schedule_check(_schedule(**fields))
    assert field in caught.value.message_dict


def test_a_schedule_that_can_fire_passes_its_check():
    schedule_check(_schedule())
    schedule_check(_schedule(kind="interval", cron="", interval_seconds=60))
