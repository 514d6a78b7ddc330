"""One rule of admission for every way in: the agent's limits per end user refuse the same second
message whichever way it comes (the REST API, /v1, the widget, a hook, a schedule, the CLI, the
try page), each answering in its own way, while the engine's own runs stay exempt."""

import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import Permission
from django.core.management import CommandError, call_command
from django.test import AsyncClient, Client
from django.urls import reverse

from conversations.models import Conversation, Run, RunTrigger
from conversations.services import conversation_create
from engine.admission import message_post, message_submit
from engine.admission_limits import AdmissionRefused
from tests.support.api import client_for
from tests.support.factories import make_agent, make_user, token_for
from triggers.hooks import hook_signature
from triggers.models import Hook, Schedule
from triggers.schedules import schedules_fire_due
from widgets.models import Widget
from widgets.tokens import end_user_token_sign

LIMITED = "1 messages in the last minute"


@dataclass
class Refusal:
    status: int | str  # an HTTP status, a schedule fire's outcome, or the CLI's exit status
    message: str
    retry_after: int | None


def _someone() -> str:
    # Unique per test: the minute windows live in Redis, across test sessions.
    return f"eu-{uuid.uuid4().hex[:10]}"


def _http(response) -> Refusal:
    body = response.json()
    message = body["error"]["message"] if isinstance(body.get("error"), dict) else body.get("message", "")
    retry = response.headers.get("Retry-After")
    return Refusal(response.status_code, message, int(retry) if retry else None)


def via_rest(agent, end_user) -> list[Refusal]:
    owner = make_user()
    api = client_for(owner)
    conversation = api.post("/api/v1/conversations/", {"agent": agent.slug, "end_user": end_user}, format="json")
    url = f"/api/v1/conversations/{conversation.json()['id']}/messages/"
    return [_http(api.post(url, {"content": "hi"}, format="json")) for _ in range(2)]


def via_openai(agent, end_user, settings) -> list[Refusal]:
    settings.AGENTRY_COMPLETION_TIMEOUT_SECONDS = 0.1  # the run stays queued: the wait's 504
    headers = {"Authorization": f"Bearer {token_for(make_user())}"}
    body = {"model": agent.slug, "messages": [{"role": "user", "content": "hi"}], "user": end_user}
    post = async_to_sync(AsyncClient().post)
    return [
        _http(post("/v1/chat/completions", body, content_type="application/json", headers=headers)) for _ in range(2)
    ]


def via_widget(agent, end_user) -> list[Refusal]:
    widget = Widget.objects.create(
        agent=agent, name="shop", secret="wsec_test-secret-of-the-widget-0123456789", owner=make_user()
    )
    client = Client(HTTP_AUTHORIZATION=f"Bearer {end_user_token_sign(widget=widget, end_user=end_user)}")
    opened = client.post(f"/api/v1/widget/{widget.pk}/conversations/", {}, content_type="application/json")
    url = f"/api/v1/widget/{widget.pk}/conversations/{opened.json()['id']}/messages/"
    return [_http(client.post(url, {"content": "hi"}, content_type="application/json")) for _ in range(2)]


def via_hook(agent, end_user) -> list[Refusal]:
    secret = "whsec_test-secret"
    hook = Hook.objects.create(
        agent=agent, name="orders", secret=secret, message="{{ payload.note }}", end_user="{{ payload.customer }}"
    )
    answers = []
    for n in range(2):
        body = json.dumps({"customer": end_user, "note": f"note {n}"}).encode()
        stamp = str(int(datetime.now(UTC).timestamp()))
        headers = {
            "HTTP_X_AGENTRY_TIMESTAMP": stamp,
            "HTTP_X_AGENTRY_SIGNATURE": hook_signature(secret=secret, timestamp=stamp, body=body),
            "HTTP_X_AGENTRY_DELIVERY": f"d-{n}",
        }
        answers.append(
            _http(Client().post(f"/api/v1/hooks/{hook.pk}/", body, content_type="application/json", **headers))
        )
    return answers


def via_schedule(agent, end_user) -> list[Refusal]:
    nine = datetime(2026, 3, 2, 1, tzinfo=UTC)
    schedule = Schedule.objects.create(
        agent=agent,
        name="report",
        cron="0 9 * * *",
        message="Report",
        end_user=end_user,
        overlap=Schedule.Overlap.ALLOW,
        next_fire_at=nine,
    )
    answers = []
    for day in range(2):
        (outcome,) = schedules_fire_due(now=nine + timedelta(days=day))
        fire = schedule.fires.order_by("-fire_at").first()
        answers.append(Refusal(outcome, fire.detail, None))
    return answers


def via_cli(agent, end_user) -> list[Refusal]:
    # The first through the service the command calls (the command would wait for a worker).
    first = message_post(
        conversation=conversation_create(agent=agent, end_user=end_user), content="hi", trigger=RunTrigger.CLI
    )
    try:
        call_command("agentry_chat", "hi", agent=agent.slug, end_user=end_user)
    except CommandError as exc:
        return [Refusal("started", str(first.pk), None), Refusal(exc.returncode, str(exc), None)]
    raise AssertionError("the command was not refused")


def via_try_page(agent, end_user) -> list[Refusal]:
    staff = make_user(staff=True)
    staff.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="conversations", codename__in=["view_run", "add_run"])
    )
    client = Client()
    client.force_login(staff)
    form = {"agent": agent.pk, "content": "hi", "end_user": end_user}
    return [_http(client.post(reverse("monitoring:try-send"), form)) for _ in range(2)]


SURFACES = {
    "rest": (via_rest, 202, 429),
    "openai": (via_openai, 504, 429),
    "widget": (via_widget, 202, 429),
    "hook": (via_hook, 202, 429),
    "schedule": (via_schedule, "started", "skipped_limited"),
    "cli": (via_cli, "started", 1),
    "try-page": (via_try_page, 201, 429),
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("surface", list(SURFACES))
def test_every_way_in_refuses_the_second_message_of_a_minute(surface, no_enqueue, settings):
    agent = make_agent(slug=f"one-rule-{uuid.uuid4().hex[:6]}", end_user_messages_per_minute=1)
    send, accepted, refused = SURFACES[surface]
    end_user = _someone()
    first, second = send(agent, end_user, settings) if surface == "openai" else send(agent, end_user)
    assert first.status == accepted, first
    assert second.status == refused and LIMITED in second.message, second
    if isinstance(refused, int) and refused == 429:
        assert 1 <= second.retry_after <= 60
    # The refused message started nothing and left no conversation behind it.
    assert Run.objects.filter(agent=agent).count() == 1
    assert Conversation.objects.filter(agent=agent, end_user=end_user, runs__isnull=True).count() == 0


@pytest.mark.django_db
def test_the_engines_own_runs_are_exempt(no_enqueue):
    agent = make_agent(
        slug=f"one-rule-{uuid.uuid4().hex[:6]}", end_user_messages_per_minute=1, concurrent_messages="enqueue"
    )
    conversation = conversation_create(agent=agent, end_user=_someone())
    message_post(conversation=conversation, content="hi", trigger=RunTrigger.API)
    with pytest.raises(AdmissionRefused) as refused:
        message_post(conversation=conversation, content="again", trigger=RunTrigger.API)
    assert refused.value.retry_after >= 1 and LIMITED in refused.value.message
    # An evaluation's case (or a replay) in the same conversation is the engine's, not the end user's.
    message_submit(conversation=conversation, content="case", trigger=RunTrigger.EVAL)
    assert Run.objects.filter(conversation=conversation).count() == 2
