"""A chat service's callback, in process (runs and replies kept off the queue): each service's
verification, its URL handshake, deduplication by event id, unknown chat users, and the
workspace a channel acts in."""

import json
import time

import pytest
from django.contrib.auth.models import User
from django.test import Client

from chatbots.models import ChatEvent, ChatThread, ChatUser
from chatbots.replies import CHAT_NOTICE_TASK
from conversations.models import Conversation, Run, RunTrigger
from engine.tasks import run_advance_task
from platform_site.celery import app
from tests.chatbots.support import (
    channel_make,
    recorded,
    slack_headers,
    slack_post,
    telegram_post,
    user_map,
)
from tests.support.factories import make_agent
from workspaces.models import Workspace

pytestmark = pytest.mark.django_db


@pytest.fixture
def enqueued(monkeypatch):
    runs, notices = [], []
    monkeypatch.setattr(run_advance_task, "delay", lambda run_id: runs.append(str(run_id)))
    monkeypatch.setattr(app.tasks[CHAT_NOTICE_TASK], "delay", lambda event_id: notices.append(event_id))
    return {"runs": runs, "notices": notices}


@pytest.fixture
def owner():
    return User.objects.create_user("bot-owner", password="owner-pass-1")


@pytest.fixture
def slack(owner):
    channel = channel_make(agent=make_agent(), owner=owner, service="slack")
    user_map(channel, "U061F7AUR", "ana")
    return channel


@pytest.fixture
def telegram(owner):
    channel = channel_make(agent=make_agent(), owner=owner, service="telegram")
    user_map(channel, "1111111", "tg-user")
    return channel


def test_a_signed_slack_mention_starts_one_run_in_its_thread(slack, enqueued, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = slack_post(Client(), slack, recorded("slack_app_mention"))
    assert response.status_code == 200 and response.content == b""
    run = Run.objects.get()
    assert run.trigger == RunTrigger.CHAT_APP and enqueued["runs"] == [str(run.pk)]
    assert run.request.content == "What is the status of deploy 42?"
    conversation = run.conversation
    assert conversation.end_user == "ana" and conversation.owner == slack.owner
    assert conversation.metadata == {"chat_channel": str(slack.pk)}
    event = ChatEvent.objects.get()
    assert event.run == run and event.event_id == "Ev0LAN670R"
    assert event.reply_to == {"channel": "C0LAE2ZGG", "thread_ts": "1515449522.000016"}

    # A later message in the same thread, once the first is answered, continues its conversation.
    Run.objects.filter(pk=run.pk).update(status="completed")
    later = recorded("slack_app_mention")
    later["event_id"], later["event"]["thread_ts"], later["event"]["ts"] = "Ev0LAN671R", "1515449522.000016", "2.0"
    assert slack_post(Client(), slack, later).status_code == 200
    assert Run.objects.count() == 2 and Conversation.objects.count() == 1 and ChatThread.objects.count() == 1


def test_slack_refusals_start_nothing(slack, enqueued):
    event = recorded("slack_app_mention")
    wrong = slack_post(Client(), slack, event, secret="not-the-signing-secret")
    stale = slack_post(Client(), slack, event, at=time.time() - 6 * 60)
    unsigned = Client().post(f"/chatbots/{slack.pk}/", json.dumps(event), content_type="application/json")
    assert (wrong.status_code, stale.status_code, unsigned.status_code) == (401, 401, 401)
    assert stale.content == b"stale timestamp"
    assert not Run.objects.exists() and not ChatEvent.objects.exists()


def test_a_replayed_slack_event_is_acknowledged_and_starts_nothing_more(slack, enqueued):
    event = recorded("slack_app_mention")
    assert slack_post(Client(), slack, event).status_code == 200
    # Slack retries with the same event id (and a new signature, X-Slack-Retry-Num).
    again = slack_post(Client(), slack, event, at=time.time() + 1)
    assert again.status_code == 200 and again.content == b""
    assert Run.objects.count() == 1 and ChatEvent.objects.count() == 1


def test_an_unknown_chat_user_is_acknowledged_and_starts_nothing(slack, enqueued):
    event = recorded("slack_app_mention")
    event["event"]["user"] = "U0STRANGER"
    response = slack_post(Client(), slack, event)
    assert response.status_code == 200
    assert not Run.objects.exists() and enqueued["notices"] == []
    assert ChatEvent.objects.get().outcome == ChatEvent.Outcome.UNKNOWN_USER


def test_auto_mapping_names_the_end_user_after_the_service(slack, enqueued):
    slack.auto_map_users = True
    slack.save()
    event = recorded("slack_app_mention")
    event["event"]["user"] = "U0NEWCOMER"
    assert slack_post(Client(), slack, event).status_code == 200
    assert Run.objects.get().conversation.end_user == "slack:U0NEWCOMER"
    assert ChatUser.objects.get(chat_user_id="U0NEWCOMER").account is None


def test_slack_url_verification_is_answered_only_when_signed(slack, enqueued):
    challenge = {
        "token": "x",
        "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P",
        "type": "url_verification",
    }
    response = slack_post(Client(), slack, challenge)
    assert response.status_code == 200 and response.json() == {"challenge": challenge["challenge"]}
    assert slack_post(Client(), slack, challenge, secret="wrong").status_code == 401


def test_slack_bot_messages_and_channel_chatter_are_ignored(slack, enqueued):
    own = recorded("slack_app_mention")
    own["event"] = {"type": "message", "bot_id": "B1", "text": "our answer", "channel": "C1", "ts": "1.0"}
    chatter = recorded("slack_app_mention")
    chatter["event_id"] = "Ev2"
    chatter["event"] = {"type": "message", "channel_type": "channel", "user": "U061F7AUR", "text": "hi", "ts": "2.0"}
    assert slack_post(Client(), slack, own).status_code == 200
    assert slack_post(Client(), slack, chatter).status_code == 200
    assert not Run.objects.exists() and not ChatEvent.objects.exists()


def test_a_telegram_update_with_the_secret_token_starts_a_run(telegram, enqueued):
    response = telegram_post(Client(), telegram, recorded("telegram_message"))
    assert response.status_code == 200
    run = Run.objects.get()
    assert run.conversation.end_user == "tg-user" and run.trigger == RunTrigger.CHAT_APP
    assert ChatEvent.objects.get().reply_to == {"chat_id": "1111111", "message_id": 1365}


def test_telegram_refusals_replays_and_unknown_users(telegram, enqueued):
    update = recorded("telegram_message")
    assert telegram_post(Client(), telegram, update, token="wrong").status_code == 401
    assert telegram_post(Client(), telegram, update, token="").status_code == 401
    assert not Run.objects.exists()
    assert telegram_post(Client(), telegram, update).status_code == 200
    assert telegram_post(Client(), telegram, update).status_code == 200  # Telegram retried the update
    assert Run.objects.count() == 1
    stranger = recorded("telegram_message")
    stranger["update_id"], stranger["message"]["from"]["id"] = 10002, 999
    assert telegram_post(Client(), telegram, stranger).status_code == 200
    assert Run.objects.count() == 1


def test_bad_bodies_and_unknown_channels_are_4xx(slack, telegram, enqueued):
    for body in (b"[1]", b"{", b'{"a": "\\ud800"}', b"\xff\xfe", b"[" * 10_000 + b"]" * 10_000):
        assert telegram_post_raw(telegram, body).status_code == 400
        headers = slack_headers(body)
        response = Client().post(f"/chatbots/{slack.pk}/", body, content_type="application/json", **headers)
        assert response.status_code == 400, body[:20]
    missing = Client().post("/chatbots/00000000-0000-0000-0000-000000000000/", b"{}", content_type="application/json")
    assert missing.status_code == 404 and missing.json()["message"]
    assert Client().get(f"/chatbots/{slack.pk}/").status_code == 405
    slack.enabled = False
    slack.save()
    assert slack_post(Client(), slack, recorded("slack_app_mention")).status_code == 404
    assert not Run.objects.exists()


def telegram_post_raw(channel, body: bytes):
    return Client().post(
        f"/chatbots/{channel.pk}/",
        body,
        content_type="application/json",
        HTTP_X_TELEGRAM_BOT_API_SECRET_TOKEN="tg-secret_token-1",
    )


def test_a_channel_acts_in_its_workspace_only(owner, enqueued):
    other = Workspace.objects.create(slug="other", name="Other")
    agent = make_agent()
    # A channel of the other workspace pointing at this workspace's agent starts nothing.
    stray = channel_make(agent=agent, owner=owner, service="telegram")
    type(stray).objects.filter(pk=stray.pk).update(workspace=other)
    stray.refresh_from_db()
    user_map(stray, "1111111", "tg-user")
    response = telegram_post(Client(), stray, recorded("telegram_message"))
    assert response.status_code == 200
    assert not Run.objects.exists() and not Conversation.objects.exists()
    assert ChatEvent.objects.get().outcome == ChatEvent.Outcome.REFUSED

    # A channel's end users and conversations are its agent's workspace's.
    there = make_agent(workspace=other)
    channel = channel_make(agent=there, owner=owner, service="telegram")
    user_map(channel, "1111111", "tg-user")
    update = recorded("telegram_message")
    update["update_id"] = 20000
    assert telegram_post(Client(), channel, update).status_code == 200
    run = Run.objects.get()
    assert run.agent.workspace_id == other.pk == channel.workspace_id
    assert run.conversation.agent_id == there.pk


def test_purging_and_forgetting_reach_the_chat_records(telegram, enqueued):
    from datetime import timedelta

    from django.utils import timezone

    from conversations.end_users import EndUser
    from conversations.retention import runs_purge
    from memory.forget import end_user_forget

    assert telegram_post(Client(), telegram, recorded("telegram_message")).status_code == 200
    run = Run.objects.get()
    Run.objects.filter(pk=run.pk).update(status="completed", created_at=timezone.now() - timedelta(days=40))
    Conversation.objects.update(created_at=timezone.now() - timedelta(days=40))
    forgotten = end_user_forget(
        person=EndUser(telegram.owner_id, "tg-user"), requested_by=telegram.owner, channel="api"
    )
    assert forgotten.counts["chat_events_erased"] == 1
    event = ChatEvent.objects.get()
    assert (event.chat_user_id, event.thread_id, event.reply_to) == ("", "", {})

    type(telegram.agent).objects.filter(pk=telegram.agent_id).update(retention_days=30)
    telegram.agent.refresh_from_db()
    assert runs_purge(agent=telegram.agent).counts["runs"] == 1
    assert ChatEvent.objects.get().run is None and not ChatThread.objects.exists()


def test_ids_that_cannot_be_stored_are_a_400_and_start_nothing(telegram, slack, enqueued):
    for changes in ({"update_id": "\u0000"}, {"update_id": "9" * 300}):
        update = {**recorded("telegram_message"), **changes}
        assert telegram_post(Client(), telegram, update).status_code == 400
    update = recorded("telegram_message")
    update["message"]["from"]["id"] = "a\u0000b"
    assert telegram_post(Client(), telegram, update).status_code == 400
    update = recorded("telegram_message")
    update["message"]["chat"]["id"] = "x" * 201
    assert telegram_post(Client(), telegram, update).status_code == 400
    event = recorded("slack_app_mention")
    event["event"]["channel"] = "C\u0000"
    assert slack_post(Client(), slack, event).status_code == 400
    assert not Run.objects.exists() and not ChatEvent.objects.exists()
