"""DingTalk (chatbots.services.dingtalk): robot messages recorded as DingTalk posts them to the
robot's receiving URL, signed here with its documented algorithm."""

import base64
import hashlib
import hmac
import json
from urllib.parse import unquote

import pytest

from chatbots.services.base import Answer, ButtonPress, ChatMessage, Inbound, Refused
from chatbots.services.dingtalk import DingTalk

NOW = 1_765_000_000
NOW_MS = NOW * 1000
SECRETS = {"app_key": "dingabc123", "app_secret": "app-secret-xyz", "access_token": "token-456"}
HASH = "b" * 64
API = "http://127.0.0.1:9"
WEBHOOK = "https://oapi.dingtalk.com/robot/sendBySession?session=c2cf4b4f1a5b"


def signature(timestamp, secret=SECRETS["app_secret"]) -> str:
    digest = hmac.new(secret.encode(), f"{timestamp}\n{secret}".encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def callback(*, conversation_type="2", text=" hello", msgtype="text", **extra) -> dict:
    body = {
        "conversationId": "cidDKVAOW98jWVf/4jGj2tD3w==",
        "atUsers": [{"dingtalkId": "$:LWCP_v1:$abc"}],
        "chatbotCorpId": "dinge8a565a8cd3f8f1f",
        "chatbotUserId": "$:LWCP_v1:$bot",
        "msgId": "msgAo9Fe0JpmRHBI+Hy4ejTTA==",
        "senderNick": "张三",
        "isAdmin": False,
        "senderStaffId": "manager4321",
        "sessionWebhookExpiredTime": NOW_MS + 5_400_000,
        "createAt": NOW_MS - 1000,
        "senderCorpId": "dinge8a565a8cd3f8f1f",
        "conversationType": conversation_type,
        "senderId": "$:LWCP_v1:$sender",
        "conversationTitle": "项目群",
        "isInAtList": True,
        "sessionWebhook": WEBHOOK,
        "robotCode": "dingabc123",
        "msgtype": msgtype,
        **extra,
    }
    if msgtype == "text":
        body["text"] = {"content": text}
    return body


def request(body: dict | bytes, *, timestamp=NOW_MS, sign=None) -> Inbound:
    raw = body if isinstance(body, bytes) else json.dumps(body, ensure_ascii=False).encode()
    headers = {"content-type": "application/json", "timestamp": str(timestamp), "sign": sign or signature(timestamp)}
    return Inbound(method="POST", path="/chat/dingtalk/1/", query={}, headers=headers, body=raw)


@pytest.fixture
def dingtalk():
    return DingTalk(clock=lambda: NOW)


def test_a_signed_message_verifies_and_parses(dingtalk):
    inbound = request(callback())
    dingtalk.verify(inbound, SECRETS)
    assert dingtalk.handshake(inbound, SECRETS) is None
    event = dingtalk.parse(inbound, SECRETS)
    assert event == ChatMessage(
        event_id="msgAo9Fe0JpmRHBI+Hy4ejTTA==",
        user_id="manager4321",
        thread_id="cidDKVAOW98jWVf/4jGj2tD3w==",
        text="hello",
        reply_to={
            "conversation_id": "cidDKVAOW98jWVf/4jGj2tD3w==",
            "conversation_type": "2",
            "robot_code": "dingabc123",
            "session_webhook": WEBHOOK,
            "session_webhook_expires": NOW_MS + 5_400_000,
        },
    )
    assert dingtalk.ack(event) == Answer(body=b"")


@pytest.mark.parametrize(
    "inbound",
    [
        pytest.param(request(callback(), sign=signature(NOW_MS, "another secret")), id="wrong signature"),
        pytest.param(request(callback(), sign=" "), id="no signature"),
        pytest.param(request(callback(), timestamp=NOW_MS - 3_600_001), id="stale timestamp"),
        pytest.param(request(callback(), timestamp=NOW_MS + 3_600_001), id="future timestamp"),
        pytest.param(request(callback(), timestamp="not a number"), id="timestamp not a number"),
    ],
)
def test_a_bad_signature_or_stale_timestamp_is_refused(dingtalk, inbound):
    with pytest.raises(Refused) as refused:
        dingtalk.verify(inbound, SECRETS)
    assert refused.value.answer.status == 401


def test_a_timestamp_within_the_hour_is_accepted(dingtalk):
    dingtalk.verify(request(callback(), timestamp=NOW_MS - 3_599_000), SECRETS)


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b'{"msgtype": "text"}',
        b'{"msgtype": "text", "text": 3}',
        b'{"msgtype": "text", "text": {"content": "hi"}}',
    ],
)
def test_a_malformed_body_is_refused_not_an_error(dingtalk, body):
    inbound = request(body)
    dingtalk.verify(inbound, SECRETS)  # the signature covers the timestamp, not the body
    with pytest.raises(Refused) as refused:
        dingtalk.parse(inbound, SECRETS)
    assert refused.value.answer.status == 400


def test_other_message_kinds_are_ignored(dingtalk):
    assert dingtalk.parse(request(callback(msgtype="audio", content={"recognition": "hi"})), SECRETS) is None


def test_a_picture_carries_its_download_code(dingtalk):
    event = dingtalk.parse(request(callback(msgtype="picture", content={"downloadCode": "dc-1"})), SECRETS)
    assert event.files == [{"name": "picture", "key": "dc-1", "type": "image"}]
    assert dingtalk.file_request(event, event.files[0], SECRETS, API) == {
        "method": "POST",
        "url": f"{API}/v1.0/robot/messageFiles/download",
        "headers": {"x-acs-dingtalk-access-token": "token-456", "Content-Type": "application/json"},
        "json": {"downloadCode": "dc-1", "robotCode": "dingabc123"},
    }


def test_the_reply_goes_to_the_session_webhook_while_it_is_valid(dingtalk):
    message = dingtalk.parse(request(callback()), SECRETS)
    assert dingtalk.reply_request(message, "答案", SECRETS, API) == {
        "method": "POST",
        "url": WEBHOOK,
        "headers": {"Content-Type": "application/json"},
        "json": {"msgtype": "text", "text": {"content": "答案"}},
    }


def test_after_the_session_webhook_expires_the_reply_goes_through_the_robot_api(dingtalk):
    group = dingtalk.parse(request(callback(sessionWebhookExpiredTime=NOW_MS - 1)), SECRETS)
    assert dingtalk.reply_request(group, "答案", SECRETS, API) == {
        "method": "POST",
        "url": f"{API}/v1.0/robot/groupMessages/send",
        "headers": {"x-acs-dingtalk-access-token": "token-456", "Content-Type": "application/json"},
        "json": {
            "robotCode": "dingabc123",
            "msgKey": "sampleText",
            "msgParam": json.dumps({"content": "答案"}, ensure_ascii=False),
            "openConversationId": "cidDKVAOW98jWVf/4jGj2tD3w==",
        },
    }
    direct = dingtalk.parse(request(callback(conversation_type="1", sessionWebhookExpiredTime=NOW_MS - 1)), SECRETS)
    sent = dingtalk.reply_request(direct, "答案", SECRETS, API)
    assert sent["url"] == f"{API}/v1.0/robot/oToMessages/batchSend"
    assert sent["json"]["userIds"] == ["manager4321"]


def test_a_session_webhook_on_another_host_is_not_used(dingtalk):
    message = dingtalk.parse(request(callback(sessionWebhook="https://evil.example/steal")), SECRETS)
    assert dingtalk.reply_request(message, "答案", SECRETS, API)["url"] == f"{API}/v1.0/robot/groupMessages/send"


def test_the_token_request_and_its_answer(dingtalk):
    assert dingtalk.token_request(SECRETS, API) == {
        "method": "POST",
        "url": f"{API}/v1.0/oauth2/accessToken",
        "headers": {"Content-Type": "application/json"},
        "json": {"appKey": "dingabc123", "appSecret": "app-secret-xyz"},
    }
    assert dingtalk.token_from_answer({"accessToken": "fw8ef8we8f76e6f7s8df8s", "expireIn": 7200}) == (
        "fw8ef8we8f76e6f7s8df8s",
        7200,
    )
    with pytest.raises(ValueError):
        dingtalk.token_from_answer({"code": "InvalidAuthentication", "message": "bad"})


APPROVAL = {
    "id": 42,
    "request_hash": HASH,
    "tool": "send_email",
    "arguments": {"to": "x"},
    "text": 'The agent asks to call send_email with {"to": "[click](dtmd://dingtalkclient/sendMessage?content=x)"}.',
    "approve_label": "批准",
    "reject_label": "拒绝",
}


def test_the_approval_card_in_a_direct_chat_has_buttons_whose_press_comes_back_signed(dingtalk):
    message = dingtalk.parse(request(callback(conversation_type="1")), SECRETS)
    sent = dingtalk.approval_card_request(message, APPROVAL, SECRETS, API)
    assert sent["url"] == WEBHOOK
    card = sent["json"]["actionCard"]
    assert sent["json"]["msgtype"] == "actionCard"
    assert [button["title"] for button in card["btns"]] == ["批准", "拒绝"]
    links = [button["actionURL"] for button in card["btns"]]
    assert all(link.startswith("dtmd://dingtalkclient/sendMessage?content=") for link in links)
    commands = [unquote(link.partition("content=")[2]) for link in links]
    assert commands == [f"/approve 42 {HASH}", f"/reject 42 {HASH}"]
    # The arguments are shown, but cannot become a link of their own.
    assert "send_email" in card["text"] and "[click]" not in card["text"] and "［click］" in card["text"]
    # Pressing sends the command as the presser: a robot message, signed like any other.
    pressed = callback(conversation_type="1", text=commands[1], senderStaffId="approver7", msgId="msgPress==")
    inbound = request(pressed)
    dingtalk.verify(inbound, SECRETS)
    press = dingtalk.parse(inbound, SECRETS)
    assert isinstance(press, ButtonPress)
    assert (press.event_id, press.user_id, press.approval_id, press.decision, press.request_hash) == (
        "msgPress==",
        "approver7",
        "42",
        "reject",
        HASH,
    )


def test_the_approval_card_through_the_robot_api_uses_the_action_card_template(dingtalk):
    message = dingtalk.parse(request(callback(conversation_type="1", sessionWebhookExpiredTime=0)), SECRETS)
    sent = dingtalk.approval_card_request(message, APPROVAL, SECRETS, API)
    assert sent["url"] == f"{API}/v1.0/robot/oToMessages/batchSend"
    assert sent["headers"]["x-acs-dingtalk-access-token"] == "token-456"
    assert sent["json"]["msgKey"] == "sampleActionCard2"
    params = json.loads(sent["json"]["msgParam"])
    assert (params["actionTitle1"], params["actionTitle2"]) == ("批准", "拒绝")
    assert unquote(params["actionURL1"]).endswith(f"/approve 42 {HASH}")
    assert unquote(params["actionURL2"]).endswith(f"/reject 42 {HASH}")


def test_a_groups_approval_card_has_no_buttons_that_cannot_arrive(dingtalk):
    message = dingtalk.parse(request(callback(conversation_type="2")), SECRETS)
    sent = dingtalk.approval_card_request(message, APPROVAL, SECRETS, API)
    assert sent["json"]["msgtype"] == "markdown"
    assert "direct chat" in sent["json"]["markdown"]["text"]
    assert "dtmd://dingtalkclient/sendMessage?content=/" not in json.dumps(sent)


@pytest.mark.parametrize("text", [f"/approve 42 {HASH[:-1]}", "/approve 42", f"/maybe 42 {HASH}", f"approve 42 {HASH}"])
def test_text_that_is_not_exactly_a_command_is_a_message(dingtalk, text):
    assert isinstance(dingtalk.parse(request(callback(text=text)), SECRETS), ChatMessage)


def test_an_empty_api_base_is_the_public_host(dingtalk):
    assert dingtalk.token_request(SECRETS, "")["url"] == "https://api.dingtalk.com/v1.0/oauth2/accessToken"
