"""The Slack and Telegram modules over recorded requests, with no server or database: what each
verifies, what it reads from an event and a button press, and the requests it builds."""

import json
import time
from dataclasses import replace
from urllib.parse import urlencode

import pytest

from chatbots.services import SERVICES
from chatbots.services.base import ButtonPress, ChatMessage, Inbound, Refused
from tests.chatbots.support import SLACK_SECRETS, TELEGRAM_SECRETS, recorded, slack_headers

SLACK, TELEGRAM = SERVICES["slack"], SERVICES["telegram"]


def _slack(body: bytes, content_type: str = "application/json", **sign) -> Inbound:
    headers = {
        name.removeprefix("HTTP_").replace("_", "-").lower(): value
        for name, value in slack_headers(body, **sign).items()
    }
    return Inbound("POST", "/chatbots/x/", {}, {"content-type": content_type, **headers}, body)


def _telegram(update: dict, token: str = TELEGRAM_SECRETS["secret_token"]) -> Inbound:
    headers = {"content-type": "application/json", "x-telegram-bot-api-secret-token": token}
    return Inbound("POST", "/chatbots/x/", {}, headers, json.dumps(update).encode())


def test_slack_verifies_the_v0_signature_within_five_minutes():
    body = json.dumps(recorded("slack_app_mention")).encode()
    SLACK.verify(_slack(body), SLACK_SECRETS)
    for inbound in (
        _slack(body, secret="other"),
        _slack(body, at=time.time() - 301),
        _slack(body, at=time.time() + 301),
        replace(_slack(body), body=body + b" "),  # signed, then changed
    ):
        with pytest.raises(Refused) as refused:
            SLACK.verify(inbound, SLACK_SECRETS)
        assert refused.value.answer.status == 401


def test_slack_reads_a_mention_and_builds_its_threaded_reply():
    message = SLACK.parse(_slack(json.dumps(recorded("slack_app_mention")).encode()), SLACK_SECRETS)
    assert isinstance(message, ChatMessage)
    assert (message.event_id, message.user_id, message.text) == (
        "Ev0LAN670R",
        "U061F7AUR",
        "What is the status of deploy 42?",
    )
    request = SLACK.reply_request(message, "Deployed.", SLACK_SECRETS, "")
    assert request["url"] == "https://slack.com/api/chat.postMessage"
    assert request["headers"] == {"Authorization": f"Bearer {SLACK_SECRETS['bot_token']}"}
    assert request["json"] == {"channel": "C0LAE2ZGG", "text": "Deployed.", "thread_ts": "1515449522.000016"}


def test_slack_reads_a_button_press_from_its_form_encoded_payload():
    payload = recorded("slack_block_actions")
    payload["actions"][0]["value"] = "7:" + "a" * 64
    body = urlencode({"payload": json.dumps(payload)}).encode()
    press = SLACK.parse(_slack(body, "application/x-www-form-urlencoded"), SLACK_SECRETS)
    assert isinstance(press, ButtonPress)
    assert (press.approval_id, press.decision, press.request_hash, press.user_id) == (
        "7",
        "approve",
        "a" * 64,
        "U061F7AUR",
    )
    assert press.reply_to == {"channel": "C0LAE2ZGG", "thread_ts": "1515449522.000016"}


def test_telegram_checks_the_secret_token_and_reads_updates():
    update = recorded("telegram_message")
    TELEGRAM.verify(_telegram(update), TELEGRAM_SECRETS)
    with pytest.raises(Refused):
        TELEGRAM.verify(_telegram(update, token="wrong"), TELEGRAM_SECRETS)
    with pytest.raises(Refused):
        TELEGRAM.verify(_telegram(update, token="anything"), {"bot_token": "t", "secret_token": ""})
    message = TELEGRAM.parse(_telegram(update), TELEGRAM_SECRETS)
    assert (message.event_id, message.user_id, message.thread_id) == ("10000", "1111111", "1111111")
    request = TELEGRAM.reply_request(message, "Deployed.", TELEGRAM_SECRETS, "http://127.0.0.1:9")
    assert request["url"] == f"http://127.0.0.1:9/bot{TELEGRAM_SECRETS['bot_token']}/sendMessage"
    assert request["json"] == {"chat_id": "1111111", "text": "Deployed.", "reply_to_message_id": 1365}


def test_telegram_cards_fit_callback_data_and_presses_read_back():
    message = TELEGRAM.parse(_telegram(recorded("telegram_message")), TELEGRAM_SECRETS)
    card = {"id": 123456789, "request_hash": "f" * 64, "text": "t", "approve_label": "A", "reject_label": "R"}
    request = TELEGRAM.approval_card_request(message, card, TELEGRAM_SECRETS, "")
    buttons = request["json"]["reply_markup"]["inline_keyboard"][0]
    assert all(len(b["callback_data"].encode()) <= 64 for b in buttons)
    update = recorded("telegram_callback_query")
    update["callback_query"]["data"] = buttons[1]["callback_data"]
    press = TELEGRAM.parse(_telegram(update), TELEGRAM_SECRETS)
    assert (press.approval_id, press.decision, press.request_hash) == ("123456789", "reject", "f" * 48)


def test_telegram_acknowledges_a_press_by_answering_its_callback_query():
    press = TELEGRAM.parse(_telegram(recorded("telegram_callback_query")), TELEGRAM_SECRETS)
    answer = TELEGRAM.ack(press)
    assert json.loads(answer.body) == {"method": "answerCallbackQuery", "callback_query_id": "4382bfdwdsb323b2d9"}
    assert TELEGRAM.ack(None).body == b""
