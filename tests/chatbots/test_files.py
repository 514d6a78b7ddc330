"""What each module reads of a message's files and how it asks for them, over recorded events."""

import json

import pytest

from chatbots.services.base import Inbound
from chatbots.services.dingtalk import DINGTALK
from chatbots.services.slack import SLACK
from chatbots.services.telegram import TELEGRAM
from tests.chatbots.support import SLACK_SECRETS, TELEGRAM_SECRETS, recorded


def _inbound(payload: dict) -> Inbound:
    return Inbound("POST", "/", {}, {"content-type": "application/json"}, json.dumps(payload).encode())


def _slack_file(url="https://files.slack.com/files-pri/T061EG9R6-F0IMG01/photo.png", **extra) -> dict:
    return {"id": "F0IMG01", "name": "photo.png", "mimetype": "image/png", "url_private_download": url, **extra}


def test_slack_reads_a_mention_s_files_and_a_direct_file_share():
    event = recorded("slack_app_mention")
    event["event"]["files"] = [_slack_file(), {"id": "F2", "name": "no-url"}, "junk"]
    message = SLACK.parse(_inbound(event), SLACK_SECRETS)
    assert message.files == [
        {"name": "photo.png", "key": "https://files.slack.com/files-pri/T061EG9R6-F0IMG01/photo.png", "type": "image"}
    ]
    event["event"].update(type="message", channel_type="im", subtype="file_share", text="")
    event["event"]["files"] = [_slack_file(name="report.pdf", mimetype="application/pdf")]
    message = SLACK.parse(_inbound(event), SLACK_SECRETS)
    assert message.text == "" and message.files[0]["type"] == "file"
    event["event"]["subtype"] = "message_changed"
    assert SLACK.parse(_inbound(event), SLACK_SECRETS) is None


def test_slack_sends_its_bot_token_only_to_its_file_host():
    message = SLACK.parse(_inbound(recorded("slack_app_mention")), SLACK_SECRETS)
    good = {"key": "https://files.slack.com/files-pri/T061EG9R6-F0IMG01/photo.png"}
    request = SLACK.file_request(message, good, SLACK_SECRETS, "")
    assert request["url"] == good["key"]
    assert request["headers"] == {"Authorization": f"Bearer {SLACK_SECRETS['bot_token']}"}
    for url in ("https://evil.example/files-pri/x", "http://files.slack.com/x", "file:///etc/passwd", ""):
        with pytest.raises(ValueError):
            SLACK.file_request(message, {"key": url}, SLACK_SECRETS, "")
    local = SLACK.file_request(
        message, {"key": "http://127.0.0.1:8099/files-pri/x"}, SLACK_SECRETS, "http://127.0.0.1:8099"
    )
    assert local["url"] == "http://127.0.0.1:8099/files-pri/x"


def test_telegram_reads_the_largest_photo_a_document_and_the_caption():
    update = recorded("telegram_message")
    del update["message"]["text"]
    update["message"]["caption"] = "look"
    update["message"]["photo"] = [{"file_id": "small"}, {"file_id": "large"}]
    update["message"]["document"] = {"file_id": "doc1", "file_name": "notes.txt"}
    message = TELEGRAM.parse(_inbound(update), TELEGRAM_SECRETS)
    assert message.text == "look"
    assert [f["key"] for f in message.files] == ["large", "doc1"]
    assert message.files[1]["name"] == "notes.txt"
    del update["message"]["photo"], update["message"]["document"], update["message"]["caption"]
    update["message"]["sticker"] = {"file_id": "st"}
    assert TELEGRAM.parse(_inbound(update), TELEGRAM_SECRETS) is None


def test_telegram_gets_the_file_s_path_then_the_file():
    message = TELEGRAM.parse(_inbound(recorded("telegram_message")), TELEGRAM_SECRETS)
    token = TELEGRAM_SECRETS["bot_token"]
    first = TELEGRAM.file_request(message, {"key": "large"}, TELEGRAM_SECRETS, "")
    assert first["url"] == f"https://api.telegram.org/bot{token}/getFile" and first["params"] == {"file_id": "large"}
    answer = {"ok": True, "result": {"file_id": "large", "file_path": "photos/file_7.jpg"}}
    second = TELEGRAM.file_download_request(answer, {"key": "large"}, TELEGRAM_SECRETS, "")
    assert second["url"] == f"https://api.telegram.org/file/bot{token}/photos/file_7.jpg"
    for path in ("", "/etc/passwd", "photos/../../x"):
        with pytest.raises(ValueError):
            TELEGRAM.file_download_request({"ok": True, "result": {"file_path": path}}, {}, TELEGRAM_SECRETS, "")


def test_dingtalk_downloads_from_the_url_it_answered():
    request = DINGTALK.file_download_request({"downloadUrl": "https://down.dingtalk.com/x?sig=1"}, {}, {}, "")
    assert request == {"method": "GET", "url": "https://down.dingtalk.com/x?sig=1"}
    with pytest.raises(ValueError):
        DINGTALK.file_download_request({}, {}, {}, "")
