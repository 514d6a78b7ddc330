"""An answer the model streams, in the chat: Slack and Telegram get it posted early and edited as
text arrives (chat.update, editMessageText on the message the post's answer named), then edited
into the whole answer; a model that does not stream still posts once
(test_e2e.test_a_signed_message_is_answered_in_its_thread)."""

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from chatbots.models import ChatEvent
from chatbots.replies import chat_stream
from chatbots.services import SERVICES
from chatbots.services.base import ChatMessage
from conversations.batch import run_event_append
from conversations.events import EventType
from conversations.models import Run, RunStatus
from engine.tasks import run_advance_task
from tests.chatbots.support import ChatAPI, channel_make, recorded, slack_post, telegram_post, user_map
from tests.support.factories import ModelConfigFactory, make_agent
from tests.support.waits import wait_for

ANSWER = (
    "Deploy 42 went out at noon. The canary held for twenty minutes, error rates stayed flat, "
    "and the rollout finished across all three regions. Nothing is waiting on you; the next "
    "deploy is scheduled for Thursday morning after the freeze lifts."
)
EDITS = {"slack": "/api/chat.update", "telegram": "editMessageText"}


@pytest.fixture
def owner_user(transactional_db):
    return User.objects.create_user("stream-owner", password="owner-pass-1")


@pytest.fixture(params=["slack", "telegram"])
def chat_api(request):
    api = ChatAPI(request.param)
    yield api
    api.stop()


@pytest.mark.e2e
def test_a_streamed_answer_is_posted_then_edited_as_it_grows(worker, fake_llm, owner_user, chat_api):
    service = chat_api.service
    # About 50 deltas of 4 characters, 60 ms apart: three seconds of streaming, a few edit windows.
    name = fake_llm.script("chat-stream", {"defaults": {"stream_chunk_delay_ms": 60}, "fallback": {"content": ANSWER}})
    agent = make_agent(
        model_config=ModelConfigFactory(base_url=fake_llm.api_base, model=name, stream=True, max_retries=0)
    )
    channel = channel_make(agent=agent, owner=owner_user, service=service, api_base=chat_api.url)
    user_map(channel, "U061F7AUR" if service == "slack" else "1111111", "ana")
    payload = recorded("slack_app_mention" if service == "slack" else "telegram_message")
    response = (slack_post if service == "slack" else telegram_post)(Client(), channel, payload)
    assert response.status_code == 200

    run = wait_for(lambda: Run.objects.filter(status=RunStatus.COMPLETED).first(), timeout=60, message="the run's end")
    assert wait_for(lambda: ChatEvent.objects.filter(run=run, replied_at__isnull=False).exists(), timeout=30)
    posts = list(chat_api.posts)
    assert all(post["problems"] == [] for post in posts), posts
    first, *edits = posts
    assert not first["path"].endswith(EDITS[service]), "the first text is posted"
    assert ANSWER.startswith(first["body"]["text"]) and first["body"]["text"] != ANSWER
    assert edits and all(post["path"].endswith(EDITS[service]) for post in edits), "then only edited"
    assert edits[-1]["body"]["text"] == ANSWER, "the final edit holds the whole answer"
    assert len(edits) >= 2, "at least one edit before the final one"
    assert all(ANSWER.startswith(post["body"]["text"]) for post in edits)
    if service == "slack":
        assert {post["body"]["ts"] for post in edits} == {"1515449599.000300"}
        assert first["body"]["thread_ts"] == "1515449522.000016"
    else:
        assert {(post["body"]["chat_id"], post["body"]["message_id"]) for post in edits} == {("1111111", 1400)}
    event = ChatEvent.objects.get(run=run)
    assert event.posted["message"] and event.reply_error == ""


def _message(service: str) -> ChatMessage:
    reply_to = {"channel": "C1", "thread_ts": "1.1"} if service == "slack" else {"chat_id": "7", "message_id": 3}
    return ChatMessage(event_id="e", user_id="u", thread_id="t", text="", reply_to=reply_to)


def test_the_posted_message_is_read_from_the_post_s_answer_and_edited_by_it():
    slack, telegram = SERVICES["slack"], SERVICES["telegram"]
    posted = slack.posted_from_answer({"ok": True, "channel": "C1", "ts": "9.9"}, _message("slack"))
    assert posted == {"channel": "C1", "ts": "9.9"}
    request = slack.update_request(posted, "more", {"bot_token": "xoxb"}, "http://api.test")
    assert request["url"] == "http://api.test/api/chat.update"
    assert request["json"] == {"channel": "C1", "ts": "9.9", "text": "more"}
    assert request["headers"] == {"Authorization": "Bearer xoxb"}
    assert slack.posted_from_answer({"ok": True}, _message("slack")) is None

    answer = {"ok": True, "result": {"message_id": 12, "chat": {"id": -100}}}
    posted = telegram.posted_from_answer(answer, _message("telegram"))
    assert posted == {"chat_id": "-100", "message_id": 12}
    request = telegram.update_request(posted, "more", {"bot_token": "123:abc"}, "")
    assert request["url"] == "https://api.telegram.org/bot123:abc/editMessageText"
    assert request["json"] == {"chat_id": "-100", "message_id": 12, "text": "more"}
    assert telegram.posted_from_answer({"ok": True, "result": True}, _message("telegram")) is None
    # Services that post once have no edit.
    assert not any(hasattr(SERVICES[name], "update_request") for name in ("feishu", "dingtalk", "wecom"))


@pytest.mark.django_db
def test_edits_follow_the_stream_and_stop_once_the_answer_is_posted(monkeypatch):
    monkeypatch.setattr(run_advance_task, "delay", lambda run_id: None)
    api = ChatAPI("telegram")
    try:
        owner = User.objects.create_user("stream-owner-2", password="owner-pass-1")
        channel = channel_make(agent=make_agent(), owner=owner, service="telegram", api_base=api.url)
        user_map(channel, "1111111", "ana")
        assert telegram_post(Client(), channel, recorded("telegram_message")).status_code == 200
        run = Run.objects.get()

        def delta(text: str, call: int = 1):
            run_event_append(run_id=run.pk, type=EventType.MESSAGE_DELTA, payload={"llm_call_id": call, "text": text})

        chat_stream(run_id=run.pk)
        assert api.posts == [], "nothing streamed yet: nothing posted"
        delta("Deploy ")
        chat_stream(run_id=run.pk)
        delta("42 is ")
        chat_stream(run_id=run.pk)
        chat_stream(run_id=run.pk)  # nothing new: no edit (Telegram refuses an unchanged text)
        assert [post["path"].rsplit("/", 1)[1] for post in api.posts] == ["sendMessage", "editMessageText"]
        assert [post["body"]["text"] for post in api.posts] == ["Deploy", "Deploy 42 is"]
        # A later model call's text replaces the earlier step's.
        delta("Done.", call=2)
        chat_stream(run_id=run.pk)
        assert api.posts[-1]["body"]["text"] == "Done." and len(api.posts) == 3

        ChatEvent.objects.filter(run=run).update(replied_at=timezone.now())
        delta(" More.", call=2)
        chat_stream(run_id=run.pk)
        assert len(api.posts) == 3, "once the answer is posted whole, no edit follows"
        assert all(post["problems"] == [] for post in api.posts)
    finally:
        api.stop()
