"""Feishu/Lark, DingTalk and WeCom callbacks through the view, in process (runs and replies kept
off the queue): a wrong signature, a stale timestamp, a replayed event and an unknown chat user
each get the service's answer and start nothing; WeCom's GET URL verification; and the replies'
access token, fetched from the service's API, cached per channel and renewed once when the
service says it expired."""

import json
import time

import pytest
from django.contrib.auth.models import User
from django.test import Client

from chatbots.models import ChatEvent
from chatbots.replies import CHAT_NOTICE_TASK, PostFailed, chat_notice
from conversations.models import Run, RunTrigger
from engine.tasks import run_advance_task
from platform_site.celery import app
from tests.chatbots.support import (
    ASKERS,
    SECRETS,
    ChatAPI,
    channel_make,
    token_service_message,
    token_service_post,
    user_map,
    wecom_encrypt,
    wecom_query,
)
from tests.support.factories import make_agent

pytestmark = pytest.mark.django_db

SERVICES = ["feishu", "dingtalk", "wecom"]
# What each service is answered when its callback is taken (or a retry acknowledged).
ACK = {"feishu": b"{}", "dingtalk": b"", "wecom": b"success"}


@pytest.fixture
def enqueued(monkeypatch):
    runs, notices = [], []
    monkeypatch.setattr(run_advance_task, "delay", lambda run_id: runs.append(str(run_id)))
    monkeypatch.setattr(app.tasks[CHAT_NOTICE_TASK], "delay", lambda event_id: notices.append(event_id))
    return {"runs": runs, "notices": notices}


@pytest.fixture
def owner():
    return User.objects.create_user("bot-owner", password="owner-pass-1")


@pytest.fixture(params=SERVICES)
def channel(request, owner):
    channel = channel_make(agent=make_agent(), owner=owner, service=request.param)
    user_map(channel, ASKERS[request.param], "ana")
    return channel


def _post(channel, payload, **sign):
    return token_service_post(channel.service, Client(), channel, payload, **sign)


def test_a_signed_message_starts_one_run_and_its_retry_nothing_more(
    channel, enqueued, django_capture_on_commit_callbacks
):
    message = token_service_message(channel.service, event_id="1700000000000001")
    with django_capture_on_commit_callbacks(execute=True):
        response = _post(channel, message)
    assert (response.status_code, response.content) == (200, ACK[channel.service])
    run = Run.objects.get()
    assert run.trigger == RunTrigger.CHAT_APP and enqueued["runs"] == [str(run.pk)]
    assert run.request.content == "hello" and run.conversation.end_user == "ana"

    # The service retries with the same event id (signed afresh): acknowledged, nothing more.
    with django_capture_on_commit_callbacks(execute=True):
        again = _post(channel, message, at=time.time() + 1)
    assert (again.status_code, again.content) == (200, ACK[channel.service])
    assert Run.objects.count() == 1 and ChatEvent.objects.count() == 1 and len(enqueued["runs"]) == 1


def test_a_wrong_signature_or_a_stale_timestamp_is_refused_and_starts_nothing(channel, enqueued):
    message = token_service_message(channel.service)
    wrong = _post(channel, message, secret="not-the-apps-secret")
    stale = _post(channel, message, at=time.time() - 2 * 3600)
    assert (wrong.status_code, stale.status_code) == (401, 401)
    assert not Run.objects.exists() and not ChatEvent.objects.exists() and enqueued["runs"] == []


def test_an_unknown_chat_user_is_acknowledged_and_starts_nothing(channel, enqueued, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = _post(channel, token_service_message(channel.service, user="stranger-0042"))
    assert (response.status_code, response.content) == (200, ACK[channel.service])
    assert not Run.objects.exists() and enqueued == {"runs": [], "notices": []}
    assert ChatEvent.objects.get().outcome == ChatEvent.Outcome.UNKNOWN_USER


def test_the_wecom_url_verification_is_a_signed_get(owner, enqueued):
    wecom = channel_make(agent=make_agent(), owner=owner, service="wecom")
    echo = wecom_encrypt("8371923432")
    response = Client().get(f"/chatbots/{wecom.pk}/?{wecom_query(echo, echostr=echo)}")
    assert (response.status_code, response.content) == (200, b"8371923432")
    # Not signed with the callback's token, stale, or no handshake at all: WeCom's refusal.
    forged = Client().get(f"/chatbots/{wecom.pk}/?{wecom_query(echo, token='wrong', echostr=echo)}")
    stale = Client().get(f"/chatbots/{wecom.pk}/?{wecom_query(echo, at=time.time() - 7200, echostr=echo)}")
    bare = Client().get(f"/chatbots/{wecom.pk}/")
    assert [r.status_code for r in (forged, stale, bare)] == [401, 401, 401]
    assert b"8371923432" not in forged.content + stale.content + bare.content
    # Other services verify their URL by POST: a GET is not a method they take.
    feishu = channel_make(agent=make_agent(), owner=owner, service="feishu")
    assert Client().get(f"/chatbots/{feishu.pk}/?echostr=x").status_code == 405
    assert not Run.objects.exists() and not ChatEvent.objects.exists()


@pytest.fixture(params=SERVICES)
def chat_api(request):
    api = ChatAPI(request.param)
    yield api
    api.stop()


def _notice(channel, number: int) -> ChatEvent:
    return ChatEvent.objects.create(
        channel=channel,
        event_id=f"notice-{number}",
        chat_user_id=ASKERS[channel.service],
        thread_id="thread",
        reply_to=_reply_to(channel.service),
        outcome=ChatEvent.Outcome.REFUSED,
        detail=f"notice {number}",
    )


def _reply_to(service: str) -> dict:
    if service == "feishu":
        return {"message_id": "om_5ce6d572455d361153b7cb51da133945", "chat_id": "oc_1", "in_thread": False}
    if service == "dingtalk":
        return {"conversation_id": "cid1", "conversation_type": "1", "robot_code": "dingabc123"}
    return {"chat_id": "", "agent_id": "1000002"}


def test_the_access_token_is_fetched_once_and_renewed_when_it_expires(owner, chat_api):
    channel = channel_make(agent=make_agent(), owner=owner, service=chat_api.service, api_base=chat_api.url)
    chat_notice(event_id=_notice(channel, 1).pk)
    chat_notice(event_id=_notice(channel, 2).pk)
    assert len(chat_api.tokens) == 1 and len(chat_api.posts) == 2
    assert all(post["problems"] == [] for post in chat_api.posts)

    # The service revokes the token: the post it refuses is made once more with a new one.
    chat_api.expire_token()
    third = _notice(channel, 3)
    chat_notice(event_id=third.pk)
    assert len(chat_api.tokens) == 2 and [p["problems"] for p in chat_api.posts[2:]] == [["token"], []]
    third.refresh_from_db()
    assert third.replied_at is not None and third.reply_error == ""
    renewed = chat_api.posts[3]
    assert chat_api.token.endswith("-renewed") and chat_api.token in str(renewed["headers"]) + renewed["path"]


def test_a_token_the_service_refuses_to_give_is_a_failed_post(owner, chat_api):
    channel = channel_make(agent=make_agent(), owner=owner, service=chat_api.service, api_base=chat_api.url)
    type(channel).objects.filter(pk=channel.pk).update(secrets=_wrong_secret(channel.service))
    channel.refresh_from_db()
    event = _notice(channel, 1)
    with pytest.raises(PostFailed):
        chat_notice(event_id=event.pk)
    event.refresh_from_db()
    assert event.replied_at is None and event.reply_error
    assert len(chat_api.tokens) == 1 and chat_api.posts == []


def _wrong_secret(service: str) -> str:
    name = {"feishu": "app_secret", "dingtalk": "app_secret", "wecom": "corp_secret"}[service]
    return json.dumps({**SECRETS[service], name: "not-the-secret"})
