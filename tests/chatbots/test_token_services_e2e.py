"""Through the real worker, for Feishu/Lark, DingTalk and WeCom: a recorded, correctly signed
(and encrypted) message starts a run on the shipped fake LLM's echo model, and the answer reaches
the service's API (a local server checking each request as the service documents it): the access
token is asked for first, then the reply made with it. A run that waits for an approval posts a
card; a press (Feishu's card callback, WeCom's template_card_event, DingTalk's command message)
from a chat user without an approver's account or role decides nothing, one from a mapped
approver decides it and the run goes on to its answer."""

import json

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from chatbots.models import ChatEvent
from conversations.models import Approval, Run, RunStatus
from tests.approvals.conftest import Scenario, counter_steps
from tests.chatbots.support import (
    ASKERS,
    TOKENS,
    ChatAPI,
    channel_make,
    token_service_message,
    token_service_post,
    token_service_press,
    user_map,
)
from tests.support.factories import ModelConfigFactory, make_agent
from tests.support.waits import wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture
def owner(transactional_db):
    return User.objects.create_user("bot-owner", password="owner-pass-1")


@pytest.fixture(params=["feishu", "dingtalk", "wecom"])
def chat_api(request):
    api = ChatAPI(request.param)
    yield api
    api.stop()


def _posts(api: ChatAPI, count: int, what: str) -> list[dict]:
    return wait_for(lambda: len(api.posts) >= count and list(api.posts), timeout=60, message=what)


def _text(service: str, post: dict) -> str:
    body = post["body"]
    if service == "feishu":
        return json.loads(body["content"]).get("text", "")
    if service == "dingtalk":
        return json.loads(body["msgParam"]).get("content", "")
    return body.get("text", {}).get("content", "")


def test_a_signed_message_is_answered_with_a_token_fetched_first(worker, fake_llm, owner, chat_api):
    service = chat_api.service
    agent = make_agent(model_config=ModelConfigFactory(base_url=fake_llm.api_base, model="echo", max_retries=0))
    channel = channel_make(agent=agent, owner=owner, service=service, api_base=chat_api.url)
    user_map(channel, ASKERS[service], "ana")

    response = token_service_post(service, Client(), channel, token_service_message(service))
    assert response.status_code == 200

    [post] = _posts(chat_api, 1, "the answer posted to the chat")
    assert post["problems"] == []
    assert len(chat_api.tokens) == 1
    run = Run.objects.get()
    assert run.status == RunStatus.COMPLETED
    assert _text(service, post) == "hello"
    if service == "feishu":
        assert post["path"] == "/open-apis/im/v1/messages/om_5ce6d572455d361153b7cb51da133945/reply"
        assert post["headers"]["authorization"] == f"Bearer {TOKENS['feishu']}"
    elif service == "dingtalk":
        assert post["path"] == "/v1.0/robot/oToMessages/batchSend" and post["body"]["userIds"] == ["manager4321"]
        assert post["body"]["msgKey"] == "sampleText"
    else:
        assert post["path"].startswith("/cgi-bin/message/send?access_token=")
        assert post["body"]["touser"] == "zhangsan" and post["body"]["msgtype"] == "text"
    assert wait_for(lambda: ChatEvent.objects.filter(run=run, replied_at__isnull=False).exists(), timeout=10)


def _card_buttons(service: str, card: dict) -> list[str]:
    """What each button of the posted card sends back when pressed."""
    body = card["body"]
    if service == "feishu":
        assert body["msg_type"] == "interactive"
        [action] = [e for e in json.loads(body["content"])["elements"] if e["tag"] == "action"]
        return [json.dumps(button["value"], sort_keys=True) for button in action["actions"]]
    if service == "dingtalk":
        assert body["msgKey"] == "sampleActionCard2"
        params = json.loads(body["msgParam"])
        return [params["actionURL1"], params["actionURL2"]]
    assert body["msgtype"] == "template_card"
    return [button["key"] for button in body["template_card"]["button_list"]]


def test_approval_buttons_decide_only_as_a_mapped_approver(worker, fake_llm, owner, chat_api, executions):
    service = chat_api.service
    scenario = Scenario(fake_llm, steps=counter_steps("chat-approval", reply="Counted: {last_tool_result}"))
    channel = channel_make(agent=scenario.agent, owner=owner, service=service, api_base=chat_api.url)
    asker, stranger, viewer, approver_id = ASKERS[service], "nobody-01", "viewer-02", "approver-03"
    approver = User.objects.create_user("chat-approver", password="approver-pass-1")
    approver.groups.add(Group.objects.get(name="Approvers"))
    user_map(channel, asker, "ana")
    user_map(channel, stranger, "bob")  # an end user with no platform account
    user_map(channel, viewer, "cy", account=User.objects.create_user("chat-viewer", password="viewer-pass-1"))
    user_map(channel, approver_id, "dee", account=approver)

    assert token_service_post(service, Client(), channel, token_service_message(service)).status_code == 200
    [card] = _posts(chat_api, 1, "the approval card")
    assert card["problems"] == []
    approval = Approval.objects.get()
    run = Run.objects.get()
    assert run.status == RunStatus.AWAITING_APPROVAL
    buttons = _card_buttons(service, card)
    assert len(buttons) == 2 and all(str(approval.pk) in b and approval.arguments_hash in b for b in buttons)

    def press(user: str, event_id: str, request_hash: str = approval.arguments_hash):
        payload = token_service_press(
            service,
            approval_id=approval.pk,
            request_hash=request_hash,
            user=user,
            event_id=event_id,
            decision="approve",
        )
        return token_service_post(service, Client(), channel, payload)

    # Without an account, and with an account that may not decide: nothing is decided.
    assert press(stranger, "1700000101").status_code == 200
    assert press(viewer, "1700000102").status_code == 200
    notices = _posts(chat_api, 3, "the two refusals told in the chat")
    assert all(post["problems"] == [] for post in notices)
    approval.refresh_from_db()
    assert approval.status == Approval.Status.PENDING and executions("chat-approval") == 0

    # A press whose hash is not the approval's decides nothing either.
    assert press(approver_id, "1700000103", request_hash="0" * 64).status_code == 200
    _posts(chat_api, 4, "the hash refusal told in the chat")
    approval.refresh_from_db()
    assert approval.status == Approval.Status.PENDING

    # The approver's press decides it; the run continues to its answer, posted in the thread.
    assert press(approver_id, "1700000104").status_code == 200
    approval.refresh_from_db()
    assert approval.status == Approval.Status.APPROVED and approval.decided_by == approver
    assert approval.channel == Approval.Channel.CHAT_APP
    posts = _posts(chat_api, 6, "the decision and the run's answer")
    assert all(post["problems"] == [] for post in posts)
    assert wait_for(lambda: Run.objects.filter(pk=run.pk, status=RunStatus.COMPLETED).exists(), timeout=30)
    assert executions("chat-approval") == 1
    assert any(_text(service, post).startswith("Counted:") for post in posts)
    # One token for all of it: cached between the worker's posts.
    assert len(chat_api.tokens) == 1
