"""Through the real worker: a recorded, correctly signed Slack event and Telegram update start a
run on the shipped fake LLM's echo model, and the answer reaches the service's API (a local
server checking each request as the service documents it) in the message's thread. A run that
waits for an approval posts a card; a press from a chat user without an approver's account or
role decides nothing, one from an approver decides it and the run goes on to its answer."""

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from chatbots.models import ChatEvent
from conversations.models import Approval, Run, RunStatus
from engine.approvals import approval_decide
from tests.approvals.conftest import Scenario, counter_steps
from tests.chatbots.support import (
    ChatAPI,
    channel_make,
    recorded,
    slack_post,
    slack_press,
    telegram_post,
    user_map,
)
from tests.support.factories import ModelConfigFactory, make_agent
from tests.support.waits import wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture
def owner(transactional_db):
    return User.objects.create_user("bot-owner", password="owner-pass-1")


@pytest.fixture(params=["slack", "telegram"])
def chat_api(request):
    api = ChatAPI(request.param)
    yield api
    api.stop()


def _posts(api: ChatAPI, count: int, what: str) -> list[dict]:
    return wait_for(lambda: len(api.posts) >= count and list(api.posts), timeout=60, message=what)


def _message(service: str, **changes) -> dict:
    if service == "slack":
        event = recorded("slack_app_mention")
        event.update(changes)
        return event
    update = recorded("telegram_message")
    update.update(changes)
    return update


def _send(service: str, channel, payload: dict):
    return (slack_post if service == "slack" else telegram_post)(Client(), channel, payload)


def test_a_signed_message_is_answered_in_its_thread(worker, fake_llm, owner, chat_api):
    service = chat_api.service
    agent = make_agent(model_config=ModelConfigFactory(base_url=fake_llm.api_base, model="echo", max_retries=0))
    channel = channel_make(agent=agent, owner=owner, service=service, api_base=chat_api.url)
    user_map(channel, "U061F7AUR" if service == "slack" else "1111111", "ana")

    response = _send(service, channel, _message(service))
    assert response.status_code == 200

    [post] = _posts(chat_api, 1, "the answer posted to the chat")
    assert post["problems"] == []
    run = Run.objects.get()
    assert run.status == RunStatus.COMPLETED
    if service == "slack":
        assert post["body"]["channel"] == "C0LAE2ZGG" and post["body"]["thread_ts"] == "1515449522.000016"
        assert post["body"]["text"] == "What is the status of deploy 42?"
    else:
        assert post["body"]["chat_id"] == "1111111" and post["body"]["reply_to_message_id"] == 1365
        assert post["body"]["text"] == "What is the status of deploy 42?"
    assert wait_for(lambda: ChatEvent.objects.filter(run=run, replied_at__isnull=False).exists(), timeout=10)


def _press(service: str, channel, approval: Approval, user_id: str, event_id: str, decision: str = "approve"):
    if service == "slack":
        payload = recorded("slack_block_actions")
        payload["trigger_id"], payload["user"]["id"] = event_id, user_id
        payload["actions"][0]["action_id"] = decision
        payload["actions"][0]["value"] = f"{approval.pk}:{approval.arguments_hash}"
        return slack_press(Client(), channel, payload)
    update = recorded("telegram_callback_query")
    update["update_id"], update["callback_query"]["from"]["id"] = int(event_id), int(user_id)
    update["callback_query"]["data"] = f"{decision[0]}:{approval.pk}:{approval.arguments_hash[:48]}"
    return telegram_post(Client(), channel, update)


def test_approval_buttons_decide_only_as_a_mapped_approver(worker, fake_llm, owner, chat_api, executions):
    service = chat_api.service
    scenario = Scenario(fake_llm, steps=counter_steps("chat-approval", reply="Counted: {last_tool_result}"))
    channel = channel_make(agent=scenario.agent, owner=owner, service=service, api_base=chat_api.url)
    asker, stranger, viewer, approver_id = (
        ("U061F7AUR", "U0NOACCOUNT", "U0VIEWER", "U0APPROVER")
        if service == "slack"
        else ("1111111", "2222222", "3333333", "4444444")
    )
    approver = User.objects.create_user("chat-approver", password="approver-pass-1")
    approver.groups.add(Group.objects.get(name="Approvers"))
    user_map(channel, asker, "ana")
    user_map(channel, stranger, "bob")  # an end user with no platform account
    user_map(channel, viewer, "cy", account=User.objects.create_user("chat-viewer", password="viewer-pass-1"))
    user_map(channel, approver_id, "dee", account=approver)

    assert _send(service, channel, _message(service)).status_code == 200
    [card] = _posts(chat_api, 1, "the approval card")
    assert card["problems"] == []
    approval = Approval.objects.get()
    run = Run.objects.get()
    assert run.status == RunStatus.AWAITING_APPROVAL
    if service == "slack":
        buttons = card["body"]["blocks"][1]["elements"]
        assert [b["action_id"] for b in buttons] == ["approve", "reject"]
        assert buttons[0]["value"] == f"{approval.pk}:{approval.arguments_hash}"
        assert card["body"]["thread_ts"] == "1515449522.000016"
    else:
        buttons = card["body"]["reply_markup"]["inline_keyboard"][0]
        assert buttons[0]["callback_data"] == f"a:{approval.pk}:{approval.arguments_hash[:48]}"

    # Without an account, and with an account that may not decide: nothing is decided.
    assert _press(service, channel, approval, stranger, "101").status_code == 200
    assert _press(service, channel, approval, viewer, "102").status_code == 200
    notices = _posts(chat_api, 3, "the two refusals told in the chat")
    assert all(post["problems"] == [] for post in notices)
    approval.refresh_from_db()
    assert approval.status == Approval.Status.PENDING and executions("chat-approval") == 0

    # A card whose hash is not the approval's decides nothing either.
    forged = Approval(pk=approval.pk, arguments_hash="0" * 64)
    assert _press(service, channel, forged, approver_id, "103").status_code == 200
    _posts(chat_api, 4, "the hash refusal told in the chat")
    approval.refresh_from_db()
    assert approval.status == Approval.Status.PENDING

    # The approver's press decides it; the run continues to its answer, posted in the thread.
    assert _press(service, channel, approval, approver_id, "104").status_code == 200
    approval.refresh_from_db()
    assert approval.status == Approval.Status.APPROVED and approval.decided_by == approver
    assert approval.channel == Approval.Channel.CHAT_APP
    posts = _posts(chat_api, 6, "the decision and the run's answer")
    assert all(post["problems"] == [] for post in posts)
    assert wait_for(lambda: Run.objects.filter(pk=run.pk, status=RunStatus.COMPLETED).exists(), timeout=30)
    assert executions("chat-approval") == 1
    assert any(post["body"]["text"].startswith("Counted:") for post in posts)


def test_a_decision_in_the_queue_is_told_in_the_thread_before_the_answer(worker, fake_llm, owner, chat_api):
    service = chat_api.service
    scenario = Scenario(fake_llm, steps=counter_steps("chat-queue", reply="Counted: {last_tool_result}"))
    channel = channel_make(agent=scenario.agent, owner=owner, service=service, api_base=chat_api.url)
    user_map(channel, "U061F7AUR" if service == "slack" else "1111111", "ana")
    approver = User.objects.create_user("queue-approver", password="approver-pass-1")
    approver.groups.add(Group.objects.get(name="Approvers"))

    assert _send(service, channel, _message(service)).status_code == 200
    _posts(chat_api, 1, "the approval card")
    approval_decide(
        approval_id=Approval.objects.get().pk, user=approver, decision="approve", channel=Approval.Channel.PAGE
    )
    card, told, answer = _posts(chat_api, 3, "the decision told, then the answer")
    assert all(post["problems"] == [] for post in (card, told, answer))
    assert told["body"]["text"] == "queue-approver approved the call of test-counter."
    assert answer["body"]["text"].startswith("Counted:")
