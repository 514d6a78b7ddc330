"""Feishu / Lark: a self-built app's bot, its events sent to the developer's server (event
subscription, schema 2.0) and its card callbacks (card.action.trigger) to the same URL.

The channel's secrets: `app_id` and `app_secret` (the app's credentials, for the tenant access
token), `verification_token` and `encrypt_key` (its "encryption strategy"). An Encrypt Key is
required here: with it every body is `{"encrypt": …}` and every event is signed, without it the
only proof is the token carried in the clear in the body.

- Signature: `X-Lark-Signature` is the hex SHA-256 of `X-Lark-Request-Timestamp` +
  `X-Lark-Request-Nonce` + encrypt key + the raw body. The request URL's verification
  (`url_verification`) is the one request sent without it; it is proved by its token alone.
- Encryption: AES-256-CBC, key = SHA-256 of the encrypt key, the base64 `encrypt` value is the IV
  (16 bytes) then the ciphertext, PKCS#7 padded.
- Token: the decrypted body's `header.token` (or `token` on the URL verification) is the app's
  Verification Token.
- Freshness: the timestamp is seconds; Feishu states no window, we refuse one over MAX_AGE apart.

Replies need a tenant access token (valid two hours). The app sends `token_request(...)`, reads
the answer with `token_from_answer(...)`, keeps the token until it expires and passes it to
`reply_request` / `approval_card_request` as `secrets["access_token"]`.

The app's permissions (scopes): im:message (read the messages sent to the bot; in groups
im:message.group_at_msg for messages that @ the bot), im:message:send_as_bot (reply), and
im:resource to download a message's images and files.
"""

import base64
import binascii
import hashlib
import hmac
import json
import time
from urllib.parse import urlencode

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from django.utils.translation import gettext as _

from chatbots.services.base import Answer, ButtonPress, ChatMessage, Inbound, Refused

API_BASE = "https://open.feishu.cn"  # Lark: https://open.larksuite.com
MAX_AGE = 3600
MESSAGE_EVENT = "im.message.receive_v1"
CARD_EVENT = "card.action.trigger"
APPROVE, REJECT = "approve", "reject"


def _refused(status: int, reason: str) -> Refused:
    body = json.dumps({"message": reason}).encode()
    return Refused(Answer(status=status, body=body), reason)


def decrypt(encrypted: str, encrypt_key: str) -> bytes:
    """The plaintext of an `encrypt` value (ValueError when it is not one)."""
    try:
        data = base64.b64decode(encrypted, validate=True)
    except binascii.Error as error:
        raise ValueError("not base64") from error
    if len(data) < 32 or len(data) % 16:
        raise ValueError("not an IV and whole AES blocks")
    key = hashlib.sha256(encrypt_key.encode()).digest()
    decryptor = Cipher(algorithms.AES(key), modes.CBC(data[:16])).decryptor()
    padded = decryptor.update(data[16:]) + decryptor.finalize()
    pad = padded[-1]
    if not 1 <= pad <= 16 or padded[-pad:] != bytes([pad]) * pad:
        raise ValueError("bad padding")
    return padded[:-pad]


def sign(*, timestamp: str, nonce: str, encrypt_key: str, body: bytes) -> str:
    return hashlib.sha256((timestamp + nonce + encrypt_key).encode() + body).hexdigest()


class Feishu:
    name = "feishu"
    secret_names = ("app_id", "app_secret", "verification_token", "encrypt_key")

    def __init__(self, clock=time.time):
        self.clock = clock

    def _payload(self, inbound: Inbound, secrets: dict[str, str]) -> dict:
        try:
            outer = json.loads(inbound.body)
            encrypted = outer["encrypt"]
            payload = json.loads(decrypt(encrypted, secrets["encrypt_key"]))
        except (ValueError, KeyError, TypeError):
            raise _refused(400, _("The body is not an event encrypted with this app's Encrypt Key.")) from None
        if not isinstance(payload, dict):
            raise _refused(400, _("The body is not an event encrypted with this app's Encrypt Key."))
        return payload

    def verify(self, inbound: Inbound, secrets: dict[str, str]) -> None:
        payload = self._payload(inbound, secrets)
        if payload.get("type") != "url_verification":
            self._check_signature(inbound, secrets)
        header = payload.get("header") if isinstance(payload.get("header"), dict) else {}
        token = str(header.get("token") or payload.get("token") or "")
        if not hmac.compare_digest(token.encode(), secrets["verification_token"].encode()):
            raise _refused(401, _("The verification token is not this app's."))

    def _check_signature(self, inbound: Inbound, secrets: dict[str, str]) -> None:
        timestamp = inbound.headers.get("x-lark-request-timestamp", "")
        nonce = inbound.headers.get("x-lark-request-nonce", "")
        signature = inbound.headers.get("x-lark-signature", "")
        expected = sign(timestamp=timestamp, nonce=nonce, encrypt_key=secrets["encrypt_key"], body=inbound.body)
        if not signature or not hmac.compare_digest(signature.encode(), expected.encode()):
            raise _refused(401, _("The signature does not match."))
        try:
            age = abs(self.clock() - int(timestamp))
        except ValueError:
            age = MAX_AGE + 1
        if age > MAX_AGE:
            raise _refused(401, _("The request's timestamp is too old."))

    def handshake(self, inbound: Inbound, secrets: dict[str, str]) -> Answer | None:
        payload = self._payload(inbound, secrets)
        if payload.get("type") != "url_verification":
            return None
        self.verify(inbound, secrets)  # asked before verify: the challenge is answered only with the right token
        return Answer(body=json.dumps({"challenge": str(payload.get("challenge", ""))}).encode())

    def parse(self, inbound: Inbound, secrets: dict[str, str]) -> ChatMessage | ButtonPress | None:
        payload = self._payload(inbound, secrets)
        header, event = payload.get("header"), payload.get("event")
        if payload.get("schema") != "2.0" or not isinstance(header, dict) or not isinstance(event, dict):
            return None
        try:
            if header.get("event_type") == MESSAGE_EVENT:
                return _message(header, event)
            if header.get("event_type") == CARD_EVENT:
                return _press(header, event)
        except (KeyError, TypeError, ValueError, AttributeError):
            raise _refused(400, _("The event is not the documented shape.")) from None
        return None

    def ack(self, event: ChatMessage | ButtonPress | None) -> Answer:
        if isinstance(event, ButtonPress):
            # A card callback must be answered within 3 seconds; the toast is what the presser sees.
            toast = {"type": "info", "content": _("Received: the decision is being recorded.")}
            return Answer(body=json.dumps({"toast": toast}).encode())
        return Answer(body=b"{}")

    def token_request(self, secrets: dict[str, str], api_base: str) -> dict:
        """The request for a tenant access token (a self-built app's: `internal`)."""
        return {
            "method": "POST",
            "url": f"{_base(api_base)}/open-apis/auth/v3/tenant_access_token/internal",
            "headers": {"Content-Type": "application/json; charset=utf-8"},
            "json": {"app_id": secrets["app_id"], "app_secret": secrets["app_secret"]},
        }

    def token_from_answer(self, answer: dict) -> tuple[str, int]:
        """(token, seconds it stays valid) from the token request's JSON answer; ValueError on an
        error code (Feishu reports errors in a 200 body)."""
        if answer.get("code") != 0 or not answer.get("tenant_access_token"):
            raise ValueError(f"feishu token: code {answer.get('code')}: {answer.get('msg', '')}")
        return answer["tenant_access_token"], int(answer.get("expire", 0))

    def _send(self, message: ChatMessage, msg_type: str, content: dict, secrets, api_base: str) -> dict:
        body = {"msg_type": msg_type, "content": json.dumps(content, ensure_ascii=False)}
        if message.reply_to.get("in_thread"):
            body["reply_in_thread"] = True
        return {
            "method": "POST",
            "url": f"{_base(api_base)}/open-apis/im/v1/messages/{message.reply_to['message_id']}/reply",
            "headers": {
                "Authorization": f"Bearer {secrets['access_token']}",
                "Content-Type": "application/json; charset=utf-8",
            },
            "json": body,
        }

    def reply_request(self, message: ChatMessage, text: str, secrets: dict[str, str], api_base: str) -> dict:
        return self._send(message, "text", {"text": text}, secrets, api_base)

    def approval_card_request(
        self, message: ChatMessage, approval: dict, secrets: dict[str, str], api_base: str
    ) -> dict:
        """`approval`: "id", "request_hash", "tool", "text" (plain text, shown as is), "approve_label"
        and "reject_label"."""

        def button(label: str, decision: str, kind: str) -> dict:
            value = {"approval_id": str(approval["id"]), "decision": decision, "request_hash": approval["request_hash"]}
            return {"tag": "button", "text": {"tag": "plain_text", "content": label}, "type": kind, "value": value}

        card = {
            "config": {"wide_screen_mode": True, "update_multi": True},
            "header": {"template": "orange", "title": {"tag": "plain_text", "content": _title(approval)}},
            "elements": [
                {"tag": "div", "text": {"tag": "plain_text", "content": approval.get("text", "")}},
                {
                    "tag": "action",
                    "actions": [
                        button(approval["approve_label"], APPROVE, "primary"),
                        button(approval["reject_label"], REJECT, "danger"),
                    ],
                },
            ],
        }
        return self._send(message, "interactive", card, secrets, api_base)

    def file_request(self, message: ChatMessage, file: dict, secrets: dict[str, str], api_base: str) -> dict:
        """The request downloading one of the message's files (an entry of `message.files`)."""
        message_id, query = message.reply_to["message_id"], urlencode({"type": file["type"]})
        return {
            "method": "GET",
            "url": f"{_base(api_base)}/open-apis/im/v1/messages/{message_id}/resources/{file['key']}?{query}",
            "headers": {"Authorization": f"Bearer {secrets['access_token']}"},
        }


FEISHU = Feishu()


def _base(api_base: str) -> str:
    return (api_base or API_BASE).rstrip("/")


def _title(approval: dict) -> str:
    return _("Approval needed: %(tool)s") % {"tool": approval.get("tool", "")}


def _message(header: dict, event: dict) -> ChatMessage:
    sender, message = event["sender"], event["message"]
    content = json.loads(message.get("content") or "{}")
    kind = message.get("message_type")
    text, files = "", []
    if kind == "text":
        text = content.get("text", "")
        # A mention is a placeholder ("@_user_1") in the text: the bot's own is not part of the question.
        for mention in message.get("mentions") or []:
            text = text.replace(mention["key"], "")
        text = text.strip()
    elif kind == "image":
        files.append({"name": content["image_key"], "key": content["image_key"], "type": "image"})
    elif kind in ("file", "audio", "media"):
        files.append(
            {"name": content.get("file_name") or content["file_key"], "key": content["file_key"], "type": "file"}
        )
    # A reply inside a group's thread belongs to that thread's conversation; elsewhere the chat is one.
    root = message.get("root_id") or ""
    chat = message["chat_id"]
    thread = f"{chat}:{root}" if root and message.get("chat_type") == "group" else chat
    return ChatMessage(
        event_id=header["event_id"],
        user_id=sender["sender_id"]["open_id"],
        thread_id=thread,
        text=text,
        files=files,
        reply_to={
            "message_id": message["message_id"],
            "chat_id": chat,
            "chat_type": message.get("chat_type", ""),
            "in_thread": bool(root),
        },
    )


def _press(header: dict, event: dict) -> ButtonPress | None:
    value = event["action"].get("value")
    if not isinstance(value, dict) or value.get("decision") not in (APPROVE, REJECT):
        return None
    context = event.get("context") or {}
    return ButtonPress(
        event_id=header["event_id"],
        user_id=event["operator"]["open_id"],
        approval_id=str(value["approval_id"]),
        decision=value["decision"],
        request_hash=str(value["request_hash"]),
        reply_to={"message_id": context.get("open_message_id", ""), "chat_id": context.get("open_chat_id", "")},
    )
