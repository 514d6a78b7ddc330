"""Schedules on the real database: beat's tick fires them on time (the clock is passed in), the
overlap and missed-fire policies, two ticks at once fire once, and the admin that edits, pauses
and resumes them."""

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from conversations.models import Conversation, Run, RunEvent
from conversations.services import conversation_create
from engine.admission import message_post
from tests.support.runs import advance
from triggers.models import Schedule
from triggers.schedules import schedules_fire_due

NINE = datetime(2026, 3, 2, 1, tzinfo=UTC)  # 09:00 in Shanghai
ANSWER = {"scenarios": [], "fallback": {"content": "report sent"}}


def make_schedule(agent, **fields) -> Schedule:
    values = {
        "agent": agent,
        "name": "Morning report",
        "cron": "0 9 * * *",
        "time_zone": "Asia/Shanghai",
        "message": "Report for {{ date }} in {{ vars.city }}",
        "variables": {"city": "Hangzhou"},
        "end_user": "ops",
        "next_fire_at": NINE,
    }
    return Schedule.objects.create(**{**values, **fields})


def outcomes(schedule) -> list[tuple]:
    return list(schedule.fires.order_by("fire_at").values_list("fire_at", "outcome", "covers"))


@pytest.mark.django_db
def test_a_schedule_fires_on_time_into_a_new_conversation(scripted_agent):
    schedule = make_schedule(scripted_agent(ANSWER))
    assert schedules_fire_due(now=NINE - timedelta(seconds=1)) == {}

    assert schedules_fire_due(now=NINE + timedelta(seconds=5)) == {"started": 1}
    fire = schedule.fires.get()
    assert (fire.fire_at, fire.outcome, fire.covers) == (NINE, "started", 1)
    assert fire.run.request.content == "Report for 2026-03-02 in Hangzhou"
    assert (fire.run.conversation.end_user, fire.run.conversation.title) == ("ops", "Morning report")
    schedule.refresh_from_db()
    assert (schedule.last_fired_at, schedule.next_fire_at) == (NINE, NINE + timedelta(days=1))
    assert schedules_fire_due(now=NINE + timedelta(seconds=20)) == {}  # fired once


@pytest.mark.django_db
def test_the_same_policy_posts_every_fire_into_one_conversation(scripted_agent):
    agent = scripted_agent(ANSWER, concurrent_messages="enqueue")
    schedule = make_schedule(agent, conversation_policy="same", overlap="allow")
    schedules_fire_due(now=NINE)
    schedules_fire_due(now=NINE + timedelta(days=1))  # the first run is still queued
    runs = [fire.run for fire in schedule.fires.order_by("fire_at")]
    assert len({run.conversation_id for run in runs}) == 1
    schedule.refresh_from_db()
    assert schedule.conversation_id == runs[0].conversation_id
    assert Conversation.objects.filter(agent=agent).count() == 1
    # The agent's own concurrency policy applies to the post: enqueue, so the second run waits.
    queued = RunEvent.objects.get(run=runs[1], type="run.queued").payload
    assert queued["waiting_for"] == [str(runs[0].pk)]


@pytest.mark.django_db
def test_a_same_conversation_fire_the_agent_rejects_is_recorded_as_failed(scripted_agent):
    schedule = make_schedule(scripted_agent(ANSWER), conversation_policy="same", overlap="allow")
    schedules_fire_due(now=NINE)
    assert schedules_fire_due(now=NINE + timedelta(days=1)) == {"failed": 1}
    assert "active run" in schedule.fires.get(outcome="failed").detail


@pytest.mark.django_db
def test_a_fire_that_cannot_render_or_post_fails_and_the_others_still_fire(scripted_agent):
    agent = scripted_agent(ANSWER)
    broken = make_schedule(agent, name="broken", message="{% now %}")  # written past the admin's check
    good = make_schedule(agent, name="good")
    assert schedules_fire_due(now=NINE) == {"failed": 1, "started": 1}
    failed = broken.fires.get()
    assert failed.outcome == "failed" and failed.run is None and failed.detail
    assert good.fires.get().outcome == "started"
    broken.refresh_from_db()
    assert broken.next_fire_at == NINE + timedelta(days=1)  # moved on, not retried every tick


@pytest.mark.django_db
def test_a_fire_over_the_agents_limit_per_end_user_is_skipped_with_the_reason(scripted_agent):
    # The end user "ops" (of no application, as the schedule's) spent today's tokens another way.
    agent = scripted_agent(ANSWER, end_user_tokens_per_day=100)
    earlier = message_post(conversation=conversation_create(agent=agent, end_user="ops"), content="hi")
    Run.objects.filter(pk=earlier.pk).update(total_tokens=100)
    schedule = make_schedule(agent, conversation_policy="same")
    assert schedules_fire_due(now=NINE) == {"skipped_limited": 1}
    fire = schedule.fires.get()
    assert fire.run is None and "used 100 tokens" in fire.detail and "limit of 100" in fire.detail
    schedule.refresh_from_db()
    # The conversation the fire opened went with it; the schedule moves on to its next fire.
    assert schedule.conversation is None and schedule.next_fire_at == NINE + timedelta(days=1)
    assert Conversation.objects.filter(agent=agent).count() == 1
    # Another application's end user of the same id is another person.
    theirs = make_schedule(agent, name="theirs", owner=get_user_model().objects.create_user("app"))
    assert schedules_fire_due(now=NINE + timedelta(days=1)) == {"started": 1, "skipped_limited": 1}
    assert theirs.fires.get().outcome == "started"


@pytest.mark.django_db(transaction=True)
def test_skip_overlap_skips_while_the_previous_run_is_going(scripted_agent):
    schedule = make_schedule(scripted_agent(ANSWER), cron="*/5 * * * *", overlap="skip")
    schedules_fire_due(now=NINE)
    schedules_fire_due(now=NINE + timedelta(minutes=5))  # the first run is still queued
    advance(schedule.fires.get(fire_at=NINE).run)
    schedules_fire_due(now=NINE + timedelta(minutes=10))
    assert [outcome for _, outcome, _ in outcomes(schedule)] == ["started", "skipped_running", "started"]


@pytest.mark.django_db(transaction=True)
def test_queue_overlap_waits_for_the_previous_run_then_fires_once(scripted_agent):
    schedule = make_schedule(scripted_agent(ANSWER), cron="*/5 * * * *", overlap="queue", missed="skip")
    schedules_fire_due(now=NINE)
    five = NINE + timedelta(minutes=5)
    assert schedules_fire_due(now=five) == {"waiting": 1}
    assert schedules_fire_due(now=five + timedelta(seconds=15)) == {"waiting": 1}
    schedule.refresh_from_db()
    assert schedule.next_fire_at == five  # still due, nothing recorded
    advance(schedule.fires.get().run)
    # Fires that passed while it waited are one queued fire, whatever the missed policy.
    assert schedules_fire_due(now=NINE + timedelta(minutes=11)) == {"started": 1}
    assert outcomes(schedule) == [(NINE, "started", 1), (NINE + timedelta(minutes=10), "started", 2)]


@pytest.mark.django_db(transaction=True)
def test_allow_overlap_starts_while_the_previous_run_is_going(scripted_agent):
    schedule = make_schedule(scripted_agent(ANSWER), cron="*/5 * * * *", overlap="allow")
    schedules_fire_due(now=NINE)
    schedules_fire_due(now=NINE + timedelta(minutes=5))
    runs = Run.objects.filter(schedule_fire__schedule=schedule)
    assert runs.count() == 2 and runs.filter(status="queued").count() == 2


@pytest.mark.django_db
def test_after_downtime_the_missed_fires_run_once_or_are_skipped(scripted_agent):
    agent = scripted_agent(ANSWER)
    once = make_schedule(agent, name="once", cron="0 * * * *", missed="once")
    skip = make_schedule(agent, name="skip", cron="0 * * * *", missed="skip")
    back = NINE + timedelta(hours=3, seconds=10)  # beat was down from 09:00 to 12:00:10
    assert schedules_fire_due(now=back) == {"started": 2, "skipped_missed": 1}
    hours = [NINE + timedelta(hours=h) for h in range(4)]
    assert outcomes(once) == [(hours[3], "started", 4)]
    assert outcomes(skip) == [(hours[2], "skipped_missed", 3), (hours[3], "started", 1)]
    for schedule in (once, skip):
        schedule.refresh_from_db()
        assert schedule.next_fire_at == NINE + timedelta(hours=4)


@pytest.mark.django_db
def test_the_ticks_statements_do_not_grow_with_schedules_not_due(scripted_agent):
    agent = scripted_agent(ANSWER)
    for n in range(3):
        make_schedule(agent, name=f"later {n}", next_fire_at=NINE + timedelta(hours=1))
    with CaptureQueriesContext(connection) as few:
        schedules_fire_due(now=NINE)
    for n in range(30):
        make_schedule(agent, name=f"much later {n}", next_fire_at=NINE + timedelta(hours=2))
    make_schedule(agent, name="paused", enabled=False)
    with CaptureQueriesContext(connection) as many:
        schedules_fire_due(now=NINE)
    assert len(few) == len(many) == 1


@pytest.mark.django_db(transaction=True)
def test_two_ticks_at_once_fire_a_schedule_once(scripted_agent):
    schedule = make_schedule(scripted_agent(ANSWER))
    start = threading.Barrier(2)
    results = []

    def tick():
        try:
            start.wait()
            results.append(schedules_fire_due(now=NINE))
        finally:
            connection.close()

    threads = [threading.Thread(target=tick) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(result.get("started", 0) for result in results) == 1
    assert outcomes(schedule) == [(NINE, "started", 1)]


# --- The admin ------------------------------------------------------------------------------


def _staff(client, *codenames: str):
    user = get_user_model().objects.create_user("scheduler", password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client.force_login(user)
    return user


def _form(agent, **fields) -> dict:
    values = {
        "name": "Morning report",
        "agent": agent.pk,
        "enabled": "on",
        "kind": "cron",
        "cron": "0 9 * * *",
        "interval_seconds": "",
        "time_zone": "Asia/Shanghai",
        "message": "Report for {{ date }} in {{ vars.city }}",
        "variables": '{"city": "Hangzhou"}',
        "end_user": "ops",
        "conversation_policy": "new",
        "overlap": "skip",
        "missed": "once",
    }
    return {**values, **fields}


@pytest.mark.django_db
def test_the_admin_saves_a_schedule_with_its_next_fire_time_and_owner(admin_client, admin_user, scripted_agent):
    agent = scripted_agent(ANSWER)
    response = admin_client.post(reverse("admin:triggers_schedule_add"), _form(agent))
    assert response.status_code == 302
    schedule = Schedule.objects.get()
    assert schedule.owner == admin_user
    assert timezone.now() < schedule.next_fire_at <= timezone.now() + timedelta(days=1)
    assert schedule.next_fire_at.astimezone(UTC).hour == 1  # 09:00 in Shanghai


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"cron": "0 9 * *"}, "cron"),
        ({"time_zone": "Asia/Nowhere"}, "time_zone"),
        ({"message": "{% if %}"}, "message"),
        ({"kind": "interval", "cron": "", "interval_seconds": "30"}, "interval_seconds"),
        ({"end_user": "a\nb"}, "end_user"),
        ({"variables": "[" * 5000}, "variables"),
    ],
)
def test_a_schedule_that_cannot_fire_is_a_form_error(admin_client, scripted_agent, fields, field):
    response = admin_client.post(reverse("admin:triggers_schedule_add"), _form(scripted_agent(ANSWER), **fields))
    assert response.status_code == 200
    assert field in response.context["adminform"].form.errors
    assert not Schedule.objects.exists()


@pytest.mark.django_db
def test_only_agents_the_user_may_use_can_be_scheduled(client, scripted_agent):
    agent = scripted_agent(ANSWER)
    agent.allowed_groups.add(Group.objects.create(name="finance"))
    _staff(client, "add_schedule", "view_schedule")
    response = client.post(reverse("admin:triggers_schedule_add"), _form(agent))
    assert "agent" in response.context["adminform"].form.errors
    assert not Schedule.objects.exists()


@pytest.mark.django_db
def test_pause_and_resume_are_one_action_each_and_logged(admin_client, scripted_agent):
    schedule = make_schedule(scripted_agent(ANSWER))
    changelist = reverse("admin:triggers_schedule_changelist")
    admin_client.post(changelist, {"action": "pause", "_selected_action": [schedule.pk]})
    schedule.refresh_from_db()
    assert (schedule.enabled, schedule.next_fire_at) == (False, None)
    assert schedules_fire_due(now=NINE + timedelta(days=30)) == {}
    admin_client.post(changelist, {"action": "resume", "_selected_action": [schedule.pk]})
    schedule.refresh_from_db()
    assert schedule.enabled and schedule.next_fire_at > timezone.now()
    assert LogEntry.objects.filter(object_id=str(schedule.pk)).count() == 2


@pytest.mark.django_db
def test_pausing_takes_the_change_permission(client, scripted_agent):
    schedule = make_schedule(scripted_agent(ANSWER))
    changelist = reverse("admin:triggers_schedule_changelist")
    assert client.get(changelist).status_code == 302  # not logged in
    _staff(client)
    assert client.get(changelist).status_code == 403
    client.logout()
    client.force_login(get_user_model().objects.create_user("viewer", is_staff=True))
    viewer = get_user_model().objects.get(username="viewer")
    viewer.user_permissions.add(Permission.objects.get(codename="view_schedule"))
    page = client.get(changelist)
    assert page.status_code == 200 and b'value="pause"' not in page.content
    client.post(changelist, {"action": "pause", "_selected_action": [schedule.pk]})
    schedule.refresh_from_db()
    assert schedule.enabled
    assert client.post(reverse("admin:triggers_schedule_change", args=[schedule.pk]), {}).status_code == 403


@pytest.mark.django_db
def test_the_change_page_lists_the_latest_fires_with_links_to_their_runs(admin_client, scripted_agent):
    schedule = make_schedule(scripted_agent(ANSWER), missed="skip")
    schedules_fire_due(now=NINE + timedelta(days=2, seconds=5))
    run = schedule.fires.get(outcome="started").run
    page = admin_client.get(reverse("admin:triggers_schedule_change", args=[schedule.pk])).content.decode()
    assert reverse("monitoring:run", args=[run.pk]) in page
    assert "Skipped: missed while the scheduler was down" in page
    assert "Started a run" in page
