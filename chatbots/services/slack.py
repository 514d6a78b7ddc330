"""Slack (Events API and interactivity, api.slack.com/authentication/verifying-requests-from-slack).

Every request is signed: `X-Slack-Signature: v0=<hex>`, an HMAC-SHA256 with the app's signing
secret over `v0:<X-Slack-Request-Timestamp>:<raw body>`, refused when the timestamp is more than
five minutes from now. The Events API's first request is a `url_verification` whose challenge is
echoed. A message is an `event_callback` (its `event_id` is what a retry repeats): an
`app_mention` in a channel, or a `message` in a direct chat; a bot's own messages are ignored.
The answer is chat.postMessage in the message's thread (edited with chat.update as the model
streams it); an approval card has Block Kit buttons
whose `value` carries the approval id and its request hash, and a press arrives as a
form-encoded `payload` of type `block_actions`."""

import hashlib
import hmac
import json
import re
import time
from urllib.parse import parse_qs, urlsplit

from chatbots.services.base import Answer, ButtonPress, ChatMessage, Inbound, Refused
from platform_site.json_input import json_loads_checked

API_BASE = "https://slack.com"
FILES_HOST = "files.slack.com"
TOLERANCE_SECONDS = 5 * 60
_MENTION = re.compile(r"<@[A-Z0-9]+>\s*")


def _refused(reason: str) -> Refused:
    return Refused(Answer(status=401, body=reason.encode(), content_type="text/plain"), reason)


def _signature(secret: str, timestamp: str, body: bytes) -> str:
    base = b"v0:" + timestamp.encode() + b":" + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def _payload(inbound: Inbound) -> dict:
    """The JSON of an event, or of an interaction's form-encoded `payload`."""
    if inbound.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        form = parse_qs(inbound.body.decode("utf-8"), strict_parsing=False)
        value = json_loads_checked(form.get("payload", ["{}"])[0])
    else:
        value = json_loads_checked(inbound.body or b"{}")
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value


def _files(event: dict) -> list[dict]:
    """The files shared with the message (a `file_share`, or a mention carrying files)."""
    files = []
    for file in event.get("files") or []:
        if isinstance(file, dict) and (file.get("url_private_download") or file.get("url_private")):
            kind = "image" if str(file.get("mimetype", "")).startswith("image/") else "file"
            url = str(file.get("url_private_download") or file.get("url_private"))
            files.append({"name": str(file.get("name") or file.get("id") or "file"), "key": url, "type": kind})
    return files


class Slack:
    name = "slack"
    secret_names = ("signing_secret", "bot_token")

    def verify(self, inbound: Inbound, secrets: dict[str, str]) -> None:
        timestamp = inbound.headers.get("x-slack-request-timestamp", "")
        signature = inbound.headers.get("x-slack-signature", "")
        if not timestamp.isascii() or not timestamp.isdigit() or not signature:
            raise _refused("unsigned request")
        if abs(time.time() - int(timestamp)) > TOLERANCE_SECONDS:
            raise _refused("stale timestamp")
        expected = _signature(secrets.get("signing_secret", ""), timestamp, inbound.body)
        if not hmac.compare_digest(expected.encode(), signature.encode("utf-8", "replace")):
            raise _refused("bad signature")

    def handshake(self, inbound: Inbound, secrets: dict[str, str]) -> Answer | None:
        if inbound.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
            return None
        payload = _payload(inbound)
        if payload.get("type") != "url_verification":
            return None
        # Signed like every other request: only the app's own challenge is echoed.
        self.verify(inbound, secrets)
        return Answer(body=json.dumps({"challenge": str(payload.get("challenge", ""))}).encode())

    def parse(self, inbound: Inbound, secrets: dict[str, str]) -> ChatMessage | ButtonPress | None:
        payload = _payload(inbound)
        if payload.get("type") == "block_actions":
            return self._press(payload)
        if payload.get("type") != "event_callback":
            return None
        event = payload.get("event") or {}
        if event.get("bot_id") or event.get("subtype") not in (None, "file_share"):
            return None  # a bot's message (ours among them), an edit, a join
        direct = event.get("type") == "message" and event.get("channel_type") == "im"
        if event.get("type") != "app_mention" and not direct:
            return None  # in a channel, the mention is the event that counts (a message event comes too)
        channel, ts = str(event.get("channel", "")), str(event.get("ts", ""))
        thread_ts = str(event.get("thread_ts") or ("" if direct else ts))
        return ChatMessage(
            event_id=str(payload.get("event_id", "")),
            user_id=str(event.get("user", "")),
            # A direct chat is one conversation; in a channel, each thread is one.
            thread_id=f"{channel}:{thread_ts}" if thread_ts else channel,
            text=_MENTION.sub("", str(event.get("text", ""))).strip(),
            files=_files(event),
            reply_to={"channel": channel, "thread_ts": thread_ts},
        )

    def file_request(self, message: ChatMessage, file: dict, secrets: dict[str, str], api_base: str) -> dict:
        """A file's `url_private_download`, fetched with the bot token as Bearer
        (api.slack.com/types/file#auth); only a URL of Slack's file host (or of the channel's API
        base, when set) is sent the token."""
        url = urlsplit(str(file.get("key", "")))
        allowed = urlsplit(api_base).netloc if api_base else FILES_HOST
        if url.netloc != allowed or url.scheme not in ("https", urlsplit(api_base).scheme if api_base else "https"):
            raise ValueError("the file's URL is not Slack's")
        return {
            "method": "GET",
            "url": url.geturl(),
            "headers": {"Authorization": f"Bearer {secrets.get('bot_token', '')}"},
        }

    def _press(self, payload: dict) -> ButtonPress | None:
        actions = payload.get("actions") or []
        if not actions or not isinstance(actions[0], dict):
            return None
        action = actions[0]
        approval_id, _, request_hash = str(action.get("value", "")).partition(":")
        channel = str((payload.get("channel") or {}).get("id", ""))
        message = payload.get("message") or {}
        return ButtonPress(
            # Interactions have no event id; the trigger id is unique per press (empty: refused).
            event_id=f"action:{payload['trigger_id']}" if payload.get("trigger_id") else "",
            user_id=str((payload.get("user") or {}).get("id", "")),
            approval_id=approval_id,
            decision=str(action.get("action_id", "")),
            request_hash=request_hash,
            reply_to={"channel": channel, "thread_ts": str(message.get("thread_ts") or message.get("ts") or "")},
        )

    def ack(self, event: ChatMessage | ButtonPress | None) -> Answer:
        return Answer(body=b"", content_type="text/plain")

    def _post(self, message: ChatMessage, body: dict, secrets: dict[str, str], api_base: str) -> dict:
        body = {"channel": message.reply_to.get("channel", ""), **body}
        if message.reply_to.get("thread_ts"):
            body["thread_ts"] = message.reply_to["thread_ts"]
        return {
            "method": "POST",
            "url": (api_base or API_BASE).rstrip("/") + "/api/chat.postMessage",
            "headers": {"Authorization": f"Bearer {secrets.get('bot_token', '')}"},
            "json": body,
        }

    def reply_request(self, message: ChatMessage, text: str, secrets: dict[str, str], api_base: str) -> dict:
        return self._post(message, {"text": text}, secrets, api_base)

    def posted_from_answer(self, answer: dict, message: ChatMessage) -> dict | None:
        # chat.postMessage answers with the message's channel and ts, what chat.update names it by.
        channel = answer.get("channel") or message.reply_to.get("channel")
        if channel and answer.get("ts"):
            return {"channel": str(channel), "ts": str(answer["ts"])}
        return None

    def update_request(self, posted: dict, text: str, secrets: dict[str, str], api_base: str) -> dict:
        return {
            "method": "POST",
            "url": (api_base or API_BASE).rstrip("/") + "/api/chat.update",
            "headers": {"Authorization": f"Bearer {secrets.get('bot_token', '')}"},
            "json": {"channel": posted["channel"], "ts": posted["ts"], "text": text},
        }

    def approval_card_request(
        self, message: ChatMessage, approval: dict, secrets: dict[str, str], api_base: str
    ) -> dict:
        value = f"{approval['id']}:{approval['request_hash']}"
        blocks = [
            {"type": "section", "text": {"type": "mrkdwn", "text": approval["text"]}},
            {
                "type": "actions",
                "elements": [
                    {
                        "type": "button",
                        "action_id": "approve",
                        "style": "primary",
                        "text": {"type": "plain_text", "text": approval["approve_label"]},
                        "value": value,
                    },
                    {
                        "type": "button",
                        "action_id": "reject",
                        "style": "danger",
                        "text": {"type": "plain_text", "text": approval["reject_label"]},
                        "value": value,
                    },
                ],
            },
        ]
        return self._post(message, {"text": approval["text"], "blocks": blocks}, secrets, api_base)


SLACK = Slack()
