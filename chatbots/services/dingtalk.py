"""DingTalk: an enterprise internal app's robot receiving messages over HTTP (the robot's
message receiving URL), the messages people send it in a direct chat or @ it with in a group.

The channel's secrets: `app_key` and `app_secret` (the app's credentials; the app key is also
the robot code).

- Signature: the `timestamp` header (milliseconds) and the `sign` header, the base64 of the
  HMAC-SHA256, keyed with the app secret, of "timestamp\\nappSecret". A timestamp more than an
  hour from now is refused, as DingTalk's documentation says the receiver must. The signature
  covers the timestamp, not the body: the body's integrity is TLS's, and a replayed message is
  caught by its msgId.
- Events: the JSON body's `msgId` (the event id), `conversationId` and `conversationType` ("1"
  a direct chat, "2" a group), `senderStaffId`, `text.content`, and a `sessionWebhook` with its
  expiry (`sessionWebhookExpiredTime`, milliseconds) to answer in the same conversation.
- Replies: to the session webhook while it is valid (no token), afterwards through the robot
  send API (`/v1.0/robot/groupMessages/send` or `/v1.0/robot/oToMessages/batchSend`) with an
  access token: the app sends `token_request(...)`, reads `token_from_answer(...)` and passes the
  token as `secrets["access_token"]`.
- Approval cards: an ActionCard whose buttons are `dtmd://dingtalkclient/sendMessage` links. A
  press sends the button's command ("/approve <id> <hash>") as the presser into the conversation,
  so it reaches us as a robot message signed like any other, from the presser's own staff id.
  A group delivers the robot only the messages that @ it, so a group's card has no such buttons:
  it says to decide in a direct chat with the bot or on the approval's page (approval["link"]).

The app's permissions: the robot capability with its message receiving mode set to HTTP, and
"企业内机器人发送消息权限" (qyapi_robot_sendmsg) for the send API after the session webhook expires.
"""

import base64
import hashlib
import hmac
import json
import re
import time
from urllib.parse import quote, urlsplit

from django.utils.translation import gettext as _

from chatbots.services.base import Answer, ButtonPress, ChatMessage, Inbound, Refused

API_BASE = "https://api.dingtalk.com"
SESSION_WEBHOOK_HOST = "oapi.dingtalk.com"
MAX_AGE_MS = 3600 * 1000
GROUP = "2"
APPROVE, REJECT = "approve", "reject"
COMMAND = re.compile(r"^\s*/(approve|reject)\s+(\S+)\s+([0-9a-f]{64})\s*$")


def _refused(status: int, reason: str) -> Refused:
    return Refused(Answer(status=status, body=json.dumps({"message": reason}).encode()), reason)


def sign(timestamp: str, app_secret: str) -> str:
    digest = hmac.new(app_secret.encode(), f"{timestamp}\n{app_secret}".encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


class DingTalk:
    name = "dingtalk"
    secret_names = ("app_key", "app_secret")

    def __init__(self, clock=time.time):
        self.clock = clock

    def verify(self, inbound: Inbound, secrets: dict[str, str]) -> None:
        timestamp = inbound.headers.get("timestamp", "")
        signature = inbound.headers.get("sign", "")
        expected = sign(timestamp, secrets["app_secret"])
        if not signature or not hmac.compare_digest(signature.encode(), expected.encode()):
            raise _refused(401, _("The signature does not match."))
        try:
            age = abs(self.clock() * 1000 - int(timestamp))
        except ValueError:
            age = MAX_AGE_MS + 1
        if age > MAX_AGE_MS:
            raise _refused(401, _("The request's timestamp is too old."))

    def handshake(self, inbound: Inbound, secrets: dict[str, str]) -> Answer | None:
        return None  # The robot's receiving URL is not verified by a challenge.

    def parse(self, inbound: Inbound, secrets: dict[str, str]) -> ChatMessage | ButtonPress | None:
        try:
            body = json.loads(inbound.body)
            return _event(body) if isinstance(body, dict) else None
        except (ValueError, KeyError, TypeError, AttributeError):
            raise _refused(400, _("The message is not the documented shape.")) from None

    def ack(self, event: ChatMessage | ButtonPress | None) -> Answer:
        # An empty answer: no synchronous reply, the run's answer goes to the session webhook.
        return Answer(body=b"")

    def token_request(self, secrets: dict[str, str], api_base: str) -> dict:
        return {
            "method": "POST",
            "url": f"{_base(api_base)}/v1.0/oauth2/accessToken",
            "headers": {"Content-Type": "application/json"},
            "json": {"appKey": secrets["app_key"], "appSecret": secrets["app_secret"]},
        }

    def token_from_answer(self, answer: dict) -> tuple[str, int]:
        if not answer.get("accessToken"):
            raise ValueError(f"dingtalk token: {answer.get('code', '')}: {answer.get('message', '')}")
        return answer["accessToken"], int(answer.get("expireIn", 0))

    def _send(self, message: ChatMessage, msg: dict, template: tuple[str, dict], secrets, api_base: str) -> dict:
        """To the session webhook while valid; else the robot send API with the template's msgKey."""
        webhook = message.reply_to.get("session_webhook", "")
        expires_ms = int(message.reply_to.get("session_webhook_expires", 0) or 0)
        host = urlsplit(webhook).hostname
        if (
            webhook
            and expires_ms > self.clock() * 1000
            and host in (SESSION_WEBHOOK_HOST, urlsplit(_base(api_base)).hostname)
        ):
            return {"method": "POST", "url": webhook, "headers": {"Content-Type": "application/json"}, "json": msg}
        key, params = template
        body = {
            "robotCode": message.reply_to.get("robot_code") or secrets["app_key"],
            "msgKey": key,
            "msgParam": json.dumps(params, ensure_ascii=False),
        }
        if message.reply_to.get("conversation_type") == GROUP:
            url = f"{_base(api_base)}/v1.0/robot/groupMessages/send"
            body["openConversationId"] = message.reply_to["conversation_id"]
        else:
            url = f"{_base(api_base)}/v1.0/robot/oToMessages/batchSend"
            body["userIds"] = [message.user_id]
        headers = {"x-acs-dingtalk-access-token": secrets["access_token"], "Content-Type": "application/json"}
        return {"method": "POST", "url": url, "headers": headers, "json": body}

    def reply_request(self, message: ChatMessage, text: str, secrets: dict[str, str], api_base: str) -> dict:
        msg = {"msgtype": "text", "text": {"content": text}}
        return self._send(message, msg, ("sampleText", {"content": text}), secrets, api_base)

    def approval_card_request(
        self, message: ChatMessage, approval: dict, secrets: dict[str, str], api_base: str
    ) -> dict:
        """`approval`: "id", "request_hash", "tool", "text" (shown as markdown, so its markup
        characters are neutralised), "approve_label" and "reject_label"."""
        title = _("Approval needed: %(tool)s") % {"tool": approval.get("tool", "")}
        text = f"#### {_markdown_safe(title)}\n\n{_markdown_safe(approval['text'])}"
        if message.reply_to.get("conversation_type") == GROUP:
            # A group delivers the robot only messages that @ it: a pressed command would not arrive.
            text += "\n\n" + _("Decide in a direct chat with the bot, or on the approval's page.")
            markdown = {"title": title, "text": text}
            msg = {"msgtype": "markdown", "markdown": markdown}
            return self._send(message, msg, ("sampleMarkdown", markdown), secrets, api_base)
        buttons = [
            (approval["approve_label"], _command_link(APPROVE, approval)),
            (approval["reject_label"], _command_link(REJECT, approval)),
        ]
        card = {
            "title": title,
            "text": text,
            "btnOrientation": "1",
            "btns": [{"title": label, "actionURL": url} for label, url in buttons],
        }
        params = {"title": title, "text": text}
        for number, (label, url) in enumerate(buttons, start=1):
            params[f"actionTitle{number}"], params[f"actionURL{number}"] = label, url
        msg = {"msgtype": "actionCard", "actionCard": card}
        return self._send(message, msg, ("sampleActionCard2", params), secrets, api_base)

    def file_request(self, message: ChatMessage, file: dict, secrets: dict[str, str], api_base: str) -> dict:
        """The request for a file's download URL (answered {"downloadUrl": …}, fetched next)."""
        return {
            "method": "POST",
            "url": f"{_base(api_base)}/v1.0/robot/messageFiles/download",
            "headers": {"x-acs-dingtalk-access-token": secrets["access_token"], "Content-Type": "application/json"},
            "json": {
                "downloadCode": file["key"],
                "robotCode": message.reply_to.get("robot_code") or secrets["app_key"],
            },
        }

    def file_download_request(self, answer: dict, file: dict, secrets: dict[str, str], api_base: str) -> dict:
        """The download URL the first request answered (a short-lived signed URL: no token)."""
        url = str(answer.get("downloadUrl") or "")
        if not url.startswith(("https://", "http://")):
            raise ValueError("DingTalk gave no download URL")
        return {"method": "GET", "url": url}


DINGTALK = DingTalk()

# Characters that start a link, an image, a tag, a code span or a heading in DingTalk's markdown,
# replaced by look-alikes it does not parse (it documents no escapes): a tool's arguments cannot
# become a link (a dtmd:// one that would send a command) or markup. "://" is kept, so the
# approval page's address stays one.
_MARKUP = str.maketrans({"[": "［", "]": "］", "<": "＜", ">": "＞", "`": "ˋ", "#": "＃", "!": "！"})


def _markdown_safe(text: str) -> str:
    return str(text).translate(_MARKUP)


def _base(api_base: str) -> str:
    return (api_base or API_BASE).rstrip("/")


def _command_link(decision: str, approval: dict) -> str:
    command = f"/{decision} {approval['id']} {approval['request_hash']}"
    return "dtmd://dingtalkclient/sendMessage?content=" + quote(command, safe="")


def _event(body: dict) -> ChatMessage | ButtonPress | None:
    kind = body.get("msgtype")
    text, files = "", []
    if kind == "text":
        text = body["text"]["content"].strip()
    elif kind == "picture":
        files.append({"name": "picture", "key": body["content"]["downloadCode"], "type": "image"})
    elif kind == "file":
        files.append(
            {"name": body["content"].get("fileName", "file"), "key": body["content"]["downloadCode"], "type": "file"}
        )
    else:
        return None
    user = body.get("senderStaffId") or body["senderId"]
    reply_to = {
        "conversation_id": body["conversationId"],
        "conversation_type": str(body.get("conversationType", "")),
        "robot_code": body.get("robotCode", ""),
        "session_webhook": body.get("sessionWebhook", ""),
        "session_webhook_expires": int(body.get("sessionWebhookExpiredTime", 0) or 0),
    }
    command = COMMAND.match(text)
    if command:
        decision, approval_id, request_hash = command.groups()
        return ButtonPress(
            event_id=body["msgId"],
            user_id=user,
            approval_id=approval_id,
            decision=decision,
            request_hash=request_hash,
            reply_to=reply_to,
        )
    return ChatMessage(
        event_id=body["msgId"],
        user_id=user,
        thread_id=body["conversationId"],
        text=text,
        files=files,
        reply_to=reply_to,
    )
