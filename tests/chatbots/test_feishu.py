"""Feishu / Lark (chatbots.services.feishu): requests recorded as the open platform sends them,
encrypted and signed here with its documented algorithms, and its published decryption example."""

import base64
import hashlib
import json
import os

import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from chatbots.services.base import Answer, ButtonPress, ChatMessage, Inbound, Refused
from chatbots.services.feishu import Feishu, decrypt

NOW = 1_765_000_000
SECRETS = {
    "app_id": "cli_a1b2c3",
    "app_secret": "app-secret",
    "verification_token": "v-token-123",
    "encrypt_key": "encrypt-key-456",
    "access_token": "t-tenant-789",
}
HASH = "a" * 64
API = "http://127.0.0.1:9"


def encrypt(plain: bytes, encrypt_key: str = SECRETS["encrypt_key"]) -> str:
    key = hashlib.sha256(encrypt_key.encode()).digest()
    iv = os.urandom(16)
    pad = 16 - len(plain) % 16
    encryptor = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
    return base64.b64encode(iv + encryptor.update(plain + bytes([pad]) * pad) + encryptor.finalize()).decode()


def request(payload: dict, *, timestamp=NOW, signed=True, encrypt_key=SECRETS["encrypt_key"], body=None) -> Inbound:
    body = body if body is not None else json.dumps({"encrypt": encrypt(json.dumps(payload).encode())}).encode()
    headers = {"content-type": "application/json"}
    if signed:
        nonce = "nonce-1"
        signature = hashlib.sha256(f"{timestamp}{nonce}{encrypt_key}".encode() + body).hexdigest()
        headers.update(
            {"x-lark-request-timestamp": str(timestamp), "x-lark-request-nonce": nonce, "x-lark-signature": signature}
        )
    return Inbound(method="POST", path="/chat/feishu/1/", query={}, headers=headers, body=body)


def message_event(**message) -> dict:
    return {
        "schema": "2.0",
        "header": {
            "event_id": "5e3702a84e847582be8db7fb73283c02",
            "event_type": "im.message.receive_v1",
            "create_time": "1608725989000",
            "token": SECRETS["verification_token"],
            "app_id": SECRETS["app_id"],
            "tenant_key": "2ca1d211f64f6438",
        },
        "event": {
            "sender": {
                "sender_id": {"union_id": "on_1", "user_id": "u1", "open_id": "ou_84aad35d084aa403a838cf73ee18467"},
                "sender_type": "user",
                "tenant_key": "2ca1d211f64f6438",
            },
            "message": {
                "message_id": "om_5ce6d572455d361153b7cb51da133945",
                "root_id": "",
                "parent_id": "",
                "create_time": "1609073151345",
                "chat_id": "oc_5ce6d572455d361153b7xx51da133945",
                "chat_type": "group",
                "message_type": "text",
                "content": json.dumps({"text": "@_user_1 hello"}),
                "mentions": [{"key": "@_user_1", "id": {"open_id": "ou_bot"}, "name": "Agent", "tenant_key": "t"}],
                **message,
            },
        },
    }


def card_event(value) -> dict:
    return {
        "schema": "2.0",
        "header": {
            "event_id": "f7984f25108f8137722bb63cee927e66",
            "token": SECRETS["verification_token"],
            "create_time": "1603977298000000",
            "event_type": "card.action.trigger",
            "tenant_key": "2ca1d211f64f6438",
            "app_id": SECRETS["app_id"],
        },
        "event": {
            "operator": {"tenant_key": "2ca1d211f64f6438", "user_id": "u2", "open_id": "ou_approver"},
            "token": "c-295ee57216a5dc9de90fefd0aadb4b1d7d337fc7",
            "action": {"value": value, "tag": "button"},
            "host": "im_message",
            "context": {"open_message_id": "om_card", "open_chat_id": "oc_chat"},
        },
    }


@pytest.fixture
def feishu():
    return Feishu(clock=lambda: NOW)


def test_the_documented_decryption_example():
    assert decrypt("P37w+VZImNgPEO1RBhJ6RtKl7n6zymIbEG1pReEzghk=", "test key") == b"hello world"


def test_a_signed_encrypted_message_verifies_and_parses(feishu):
    inbound = request(message_event())
    feishu.verify(inbound, SECRETS)
    assert feishu.handshake(inbound, SECRETS) is None
    event = feishu.parse(inbound, SECRETS)
    assert event == ChatMessage(
        event_id="5e3702a84e847582be8db7fb73283c02",
        user_id="ou_84aad35d084aa403a838cf73ee18467",
        thread_id="oc_5ce6d572455d361153b7xx51da133945",
        text="hello",
        reply_to={
            "message_id": "om_5ce6d572455d361153b7cb51da133945",
            "chat_id": "oc_5ce6d572455d361153b7xx51da133945",
            "chat_type": "group",
            "in_thread": False,
        },
    )
    assert feishu.ack(event) == Answer(body=b"{}")


def test_a_reply_in_a_group_thread_is_that_threads_conversation(feishu):
    event = feishu.parse(request(message_event(root_id="om_root")), SECRETS)
    assert event.thread_id == "oc_5ce6d572455d361153b7xx51da133945:om_root"
    assert event.reply_to["in_thread"] is True
    assert feishu.reply_request(event, "hi", SECRETS, API)["json"]["reply_in_thread"] is True


def test_an_image_message_carries_its_file(feishu):
    event = feishu.parse(
        request(message_event(message_type="image", content=json.dumps({"image_key": "img_v2_1"}))), SECRETS
    )
    assert event.text == ""
    assert event.files == [{"name": "img_v2_1", "key": "img_v2_1", "type": "image"}]
    download = feishu.file_request(event, event.files[0], SECRETS, API)
    assert (
        download["url"]
        == f"{API}/open-apis/im/v1/messages/om_5ce6d572455d361153b7cb51da133945/resources/img_v2_1?type=image"
    )
    assert download["headers"] == {"Authorization": "Bearer t-tenant-789"}


@pytest.mark.parametrize(
    "inbound",
    [
        pytest.param(request(message_event(), encrypt_key="another key"), id="wrong signature"),
        pytest.param(request(message_event(), signed=False), id="unsigned"),
        pytest.param(request(message_event(), timestamp=NOW - 3601), id="stale timestamp"),
        pytest.param(request(message_event(), timestamp=NOW + 3601), id="future timestamp"),
    ],
)
def test_a_bad_signature_or_stale_timestamp_is_refused(feishu, inbound):
    with pytest.raises(Refused) as refused:
        feishu.verify(inbound, SECRETS)
    assert refused.value.answer.status == 401


def test_a_tampered_ciphertext_is_refused(feishu):
    body = json.loads(request(message_event()).body)
    raw = bytearray(base64.b64decode(body["encrypt"]))
    raw[-1] ^= 1
    tampered = json.dumps({"encrypt": base64.b64encode(bytes(raw)).decode()}).encode()
    with pytest.raises(Refused) as refused:
        feishu.verify(request({}, body=tampered), SECRETS)
    assert refused.value.answer.status in (400, 401)
    with pytest.raises(Refused) as refused:
        feishu.parse(request({}, body=tampered), SECRETS)
    assert refused.value.answer.status == 400


def test_a_wrong_verification_token_is_refused(feishu):
    payload = message_event()
    payload["header"]["token"] = "someone else's"
    with pytest.raises(Refused) as refused:
        feishu.verify(request(payload), SECRETS)
    assert refused.value.answer.status == 401


@pytest.mark.parametrize("body", [b"", b"not json", b"[]", b'{"encrypt": "!!"}', b'{"schema": "2.0"}'])
def test_a_body_that_is_not_an_encrypted_event_is_refused(feishu, body):
    with pytest.raises(Refused) as refused:
        feishu.verify(request({}, body=body), SECRETS)
    assert refused.value.answer.status == 400


def test_the_url_verification_is_answered_with_its_challenge(feishu):
    # Sent unsigned (the one request that is): its token is its proof.
    challenge = {"challenge": "ajls384kdjx98XX", "token": SECRETS["verification_token"], "type": "url_verification"}
    inbound = request(challenge, signed=False)
    feishu.verify(inbound, SECRETS)
    assert feishu.handshake(inbound, SECRETS) == Answer(body=b'{"challenge": "ajls384kdjx98XX"}')
    assert feishu.parse(inbound, SECRETS) is None
    # The app asks for the handshake first: a challenge with another app's token is not answered.
    for ask in (feishu.handshake, feishu.verify):
        with pytest.raises(Refused) as refused:
            ask(request({**challenge, "token": "wrong"}, signed=False), SECRETS)
        assert refused.value.answer.status == 401


def test_an_event_of_another_type_is_ignored(feishu):
    payload = message_event()
    payload["header"]["event_type"] = "im.chat.member.bot.added_v1"
    assert feishu.parse(request(payload), SECRETS) is None


def test_a_malformed_message_event_is_refused_not_an_error(feishu):
    payload = message_event()
    del payload["event"]["sender"]
    with pytest.raises(Refused) as refused:
        feishu.parse(request(payload), SECRETS)
    assert refused.value.answer.status == 400


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_a_card_button_press_parses_to_the_decision(feishu, decision):
    value = {"approval_id": "42", "decision": decision, "request_hash": HASH}
    inbound = request(card_event(value))
    feishu.verify(inbound, SECRETS)
    press = feishu.parse(inbound, SECRETS)
    assert press == ButtonPress(
        event_id="f7984f25108f8137722bb63cee927e66",
        user_id="ou_approver",
        approval_id="42",
        decision=decision,
        request_hash=HASH,
        reply_to={"message_id": "om_card", "chat_id": "oc_chat"},
    )
    assert "toast" in json.loads(feishu.ack(press).body)


@pytest.mark.parametrize("value", [None, "approve", {"decision": "maybe", "approval_id": "1", "request_hash": HASH}])
def test_a_press_of_another_button_is_ignored(feishu, value):
    assert feishu.parse(request(card_event(value)), SECRETS) is None


def test_an_empty_api_base_is_the_public_host(feishu):
    message = feishu.parse(request(message_event()), SECRETS)
    assert feishu.reply_request(message, "hi", SECRETS, "")["url"].startswith("https://open.feishu.cn/open-apis/")
    lark = feishu.token_request(SECRETS, "https://open.larksuite.com/")["url"]
    assert lark == "https://open.larksuite.com/open-apis/auth/v3/tenant_access_token/internal"


def test_the_token_request_and_its_answer(feishu):
    assert feishu.token_request(SECRETS, API) == {
        "method": "POST",
        "url": f"{API}/open-apis/auth/v3/tenant_access_token/internal",
        "headers": {"Content-Type": "application/json; charset=utf-8"},
        "json": {"app_id": "cli_a1b2c3", "app_secret": "app-secret"},
    }
    answer = {
        "code": 0,
        "msg": "ok",
        "tenant_access_token": "t-caecc734c2e3328a62489fe0648c4b98779515d3",
        "expire": 7200,
    }
    assert feishu.token_from_answer(answer) == ("t-caecc734c2e3328a62489fe0648c4b98779515d3", 7200)
    with pytest.raises(ValueError):
        feishu.token_from_answer({"code": 10003, "msg": "invalid param"})


def test_the_reply_request(feishu):
    message = feishu.parse(request(message_event()), SECRETS)
    assert feishu.reply_request(message, "你好 <b>", SECRETS, API) == {
        "method": "POST",
        "url": f"{API}/open-apis/im/v1/messages/om_5ce6d572455d361153b7cb51da133945/reply",
        "headers": {"Authorization": "Bearer t-tenant-789", "Content-Type": "application/json; charset=utf-8"},
        "json": {"msg_type": "text", "content": json.dumps({"text": "你好 <b>"}, ensure_ascii=False)},
    }


def test_the_approval_card_request_carries_the_approval_in_its_buttons(feishu):
    message = feishu.parse(request(message_event()), SECRETS)
    approval = {
        "id": 42,
        "request_hash": HASH,
        "tool": "send_email",
        "arguments": {"to": "a@example.com"},
        "text": "to: a@example.com",
        "approve_label": "批准",
        "reject_label": "拒绝",
    }
    sent = feishu.approval_card_request(message, approval, SECRETS, API)
    assert sent["url"] == f"{API}/open-apis/im/v1/messages/om_5ce6d572455d361153b7cb51da133945/reply"
    assert sent["headers"]["Authorization"] == "Bearer t-tenant-789"
    assert sent["json"]["msg_type"] == "interactive"
    card = json.loads(sent["json"]["content"])
    assert card["header"]["title"] == {"tag": "plain_text", "content": "Approval needed: send_email"}
    assert card["elements"][0]["text"] == {"tag": "plain_text", "content": "to: a@example.com"}
    buttons = card["elements"][1]["actions"]
    assert [(b["text"]["content"], b["type"]) for b in buttons] == [("批准", "primary"), ("拒绝", "danger")]
    values = [button["value"] for button in buttons]
    assert values == [
        {"approval_id": "42", "decision": "approve", "request_hash": HASH},
        {"approval_id": "42", "decision": "reject", "request_hash": HASH},
    ]
    # The value a press sends back is exactly what the card carried.
    press = feishu.parse(request(card_event(values[1])), SECRETS)
    assert (press.approval_id, press.decision, press.request_hash) == ("42", "reject", HASH)
