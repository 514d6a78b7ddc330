"""A schedule end to end: beat's task, sent through the broker as beat sends it, is taken by a
real worker, which fires the due schedule and carries the run it started to its answer."""

from datetime import timedelta

import pytest
from django.utils import timezone

from conversations.models import Run
from tests.support.runs import last_answer
from tests.support.waits import wait_for
from triggers.models import Schedule, ScheduleFire
from triggers.tasks import schedules_tick_task

pytestmark = pytest.mark.e2e


def test_beat_s_tick_fires_a_due_schedule_and_a_worker_answers_it(worker, scripted_agent):
    agent = scripted_agent({"scenarios": [], "fallback": {"content": "Sunny in Hangzhou."}})
    due = timezone.now() - timedelta(seconds=1)
    schedule = Schedule.objects.create(
        agent=agent,
        name="Weather",
        cron="* * * * *",
        time_zone="Asia/Shanghai",
        message="Weather for {{ vars.city }} on {{ date }}",
        variables={"city": "Hangzhou"},
        next_fire_at=due,
    )

    schedules_tick_task.apply_async()  # as beat sends it: by name, to the maintenance queue

    fire = wait_for(lambda: ScheduleFire.objects.filter(schedule=schedule).first(), message="the fire")
    assert (fire.fire_at, fire.outcome, fire.covers) == (due, ScheduleFire.Outcome.STARTED, 1)
    run = wait_for(
        lambda: Run.objects.filter(pk=fire.run_id, status="completed").first(), timeout=30, message="the run"
    )
    assert last_answer(run) == "Sunny in Hangzhou."
    assert run.request.content.startswith("Weather for Hangzhou on ")
    schedule.refresh_from_db()
    assert schedule.last_fired_at == due and schedule.next_fire_at > due
