"""WeCom (企业微信): a self-built app's "receive messages" callback (接收消息服务器).

The channel's secrets: `corp_id` (企业ID), `corp_secret` (the app's Secret), `agent_id` (its
AgentId), and the callback's `token` and `encoding_aes_key` (set in the app's "API 接收消息").

- Every request carries `msg_signature`, `timestamp` and `nonce` in the query. The signature is
  the SHA-1 of token, timestamp, nonce and the ciphertext, sorted and joined (wecom_crypto).
- The URL is verified by a GET with an encrypted `echostr`: answered with its plaintext.
- A message is a POST whose XML body's `Encrypt` holds the message's XML, encrypted for the
  corp id (wecom_crypto). WeCom states no window for the timestamp; we refuse one over MAX_AGE
  apart. It retries an unanswered callback (5 seconds) three times: answered "success" at once.
- Text messages: `MsgId` is the event id, `FromUserName` the member's UserID, `ChatId` the group
  when there is one. A card button press is the `template_card_event` event, its `EventKey` the
  button's key ("approve:<id>:<hash>"), `TaskId` the card's task id.
- Replies: `POST /cgi-bin/message/send?access_token=…` to the member (`appchat/send` to a group
  chat the app created), with a token from `GET /cgi-bin/gettoken?corpid=…&corpsecret=…`: the app
  sends `token_request(...)`, reads `token_from_answer(...)` and passes the token as
  `secrets["access_token"]`. A template card is sent to the member (a group chat takes none).

In the WeCom admin console the app needs the members who may talk to it in its visible range,
"API 接收消息" set to our URL with its Token and EncodingAESKey, and our server's egress IPs in
"企业可信IP" (sending messages is refused from other addresses).
"""

import time
import xml.etree.ElementTree as ElementTree
from secrets import token_hex
from urllib.parse import urlencode

from django.utils.translation import gettext as _

from chatbots.services import wecom_crypto
from chatbots.services.base import Answer, ButtonPress, ChatMessage, Inbound, Refused

API_BASE = "https://qyapi.weixin.qq.com"
MAX_AGE = 3600
CARD_EVENT = "template_card_event"
APPROVE, REJECT = "approve", "reject"


def _refused(status: int, reason: str) -> Refused:
    return Refused(Answer(status=status, body=reason.encode(), content_type="text/plain; charset=utf-8"), reason)


def _xml(data: bytes) -> dict[str, str]:
    """A flat WeCom XML document as {tag: text}. A document type (entities) is refused before parsing."""
    if b"<!" in data.replace(b"<![CDATA[", b""):
        raise ValueError("document types are not accepted")
    root = ElementTree.fromstring(data)
    return {child.tag: (child.text or "") for child in root}


class WeCom:
    name = "wecom"
    secret_names = ("corp_id", "corp_secret", "agent_id", "token", "encoding_aes_key")
    handshake_by_get = True  # the callback URL is verified by a GET (its echostr)

    def __init__(self, clock=time.time):
        self.clock = clock

    def _encrypted(self, inbound: Inbound) -> str:
        if inbound.method == "GET":
            return inbound.query.get("echostr", "")
        try:
            return _xml(inbound.body).get("Encrypt", "")
        except (ValueError, ElementTree.ParseError):
            raise _refused(400, _("The body is not WeCom's XML.")) from None

    def _decrypt(self, encrypted: str, secrets: dict[str, str]) -> bytes:
        try:
            return wecom_crypto.decrypt(
                encrypted, encoding_aes_key=secrets["encoding_aes_key"], receive_id=secrets["corp_id"]
            )
        except wecom_crypto.CryptoError:
            raise _refused(400, _("The message is not encrypted for this app.")) from None

    def verify(self, inbound: Inbound, secrets: dict[str, str]) -> None:
        encrypted = self._encrypted(inbound)
        timestamp = inbound.query.get("timestamp", "")
        matches = wecom_crypto.signature_matches(
            inbound.query.get("msg_signature", ""),
            token=secrets["token"],
            timestamp=timestamp,
            nonce=inbound.query.get("nonce", ""),
            encrypted=encrypted,
        )
        if not encrypted or not matches:
            raise _refused(401, _("The signature does not match."))
        try:
            age = abs(self.clock() - int(timestamp))
        except ValueError:
            age = MAX_AGE + 1
        if age > MAX_AGE:
            raise _refused(401, _("The request's timestamp is too old."))
        self._decrypt(encrypted, secrets)

    def handshake(self, inbound: Inbound, secrets: dict[str, str]) -> Answer | None:
        if inbound.method != "GET":
            return None
        self.verify(inbound, secrets)  # asked before verify: only a signed echostr is echoed
        echo = self._decrypt(self._encrypted(inbound), secrets)
        return Answer(body=echo, content_type="text/plain; charset=utf-8")

    def parse(self, inbound: Inbound, secrets: dict[str, str]) -> ChatMessage | ButtonPress | None:
        if inbound.method == "GET":
            return None
        try:
            fields = _xml(self._decrypt(self._encrypted(inbound), secrets))
        except (ValueError, ElementTree.ParseError):
            raise _refused(400, _("The message is not WeCom's XML.")) from None
        if fields.get("MsgType") == "event":
            return _press(fields) if fields.get("Event") == CARD_EVENT else None
        return _message(fields)

    def ack(self, event: ChatMessage | ButtonPress | None) -> Answer:
        return Answer(body=b"success", content_type="text/plain; charset=utf-8")

    def token_request(self, secrets: dict[str, str], api_base: str) -> dict:
        query = urlencode({"corpid": secrets["corp_id"], "corpsecret": secrets["corp_secret"]})
        return {"method": "GET", "url": f"{_base(api_base)}/cgi-bin/gettoken?{query}", "headers": {}}

    def token_from_answer(self, answer: dict) -> tuple[str, int]:
        if answer.get("errcode") != 0 or not answer.get("access_token"):
            raise ValueError(f"wecom token: errcode {answer.get('errcode')}: {answer.get('errmsg', '')}")
        return answer["access_token"], int(answer.get("expires_in", 0))

    def _post(self, path: str, body: dict, secrets: dict[str, str], api_base: str) -> dict:
        query = urlencode({"access_token": secrets["access_token"]})
        return {
            "method": "POST",
            "url": f"{_base(api_base)}/cgi-bin/{path}?{query}",
            "headers": {"Content-Type": "application/json; charset=utf-8"},
            "json": body,
        }

    def reply_request(self, message: ChatMessage, text: str, secrets: dict[str, str], api_base: str) -> dict:
        chat_id = message.reply_to.get("chat_id")
        if chat_id:
            body = {"chatid": chat_id, "msgtype": "text", "text": {"content": text}, "safe": 0}
            return self._post("appchat/send", body, secrets, api_base)
        body = {
            "touser": message.user_id,
            "msgtype": "text",
            "agentid": int(secrets["agent_id"]),
            "text": {"content": text},
            "safe": 0,
        }
        return self._post("message/send", body, secrets, api_base)

    def approval_card_request(
        self, message: ChatMessage, approval: dict, secrets: dict[str, str], api_base: str
    ) -> dict:
        """A button_interaction template card to the member. `approval`: "id", "request_hash",
        "tool", "text", "approve_label" and "reject_label". A new task id per card: WeCom refuses
        one twice in an app."""
        card = {
            "card_type": "button_interaction",
            "main_title": {"title": _("Approval needed: %(tool)s") % {"tool": approval.get("tool", "")}},
            "sub_title_text": approval["text"],
            "task_id": approval.get("task_id") or f"agentry-{approval['id']}-{token_hex(8)}",
            "button_list": [
                {"text": approval["approve_label"], "style": 1, "key": _key(APPROVE, approval)},
                {"text": approval["reject_label"], "style": 2, "key": _key(REJECT, approval)},
            ],
        }
        body = {
            "touser": message.user_id,
            "msgtype": "template_card",
            "agentid": int(secrets["agent_id"]),
            "template_card": card,
        }
        return self._post("message/send", body, secrets, api_base)

    def file_request(self, message: ChatMessage, file: dict, secrets: dict[str, str], api_base: str) -> dict:
        """The request downloading one of the message's files (its media id)."""
        query = urlencode({"access_token": secrets["access_token"], "media_id": file["key"]})
        return {"method": "GET", "url": f"{_base(api_base)}/cgi-bin/media/get?{query}", "headers": {}}


WECOM = WeCom()


def _base(api_base: str) -> str:
    return (api_base or API_BASE).rstrip("/")


def _key(decision: str, approval: dict) -> str:
    return f"{decision}:{approval['id']}:{approval['request_hash']}"


def _message(fields: dict[str, str]) -> ChatMessage | None:
    kind = fields.get("MsgType")
    text, files = "", []
    if kind == "text":
        text = fields.get("Content", "")
    elif kind in ("image", "voice", "video", "file"):
        files.append({"name": f"{kind}-{fields.get('MediaId', '')}", "key": fields.get("MediaId", ""), "type": kind})
    else:
        return None
    if not fields.get("MsgId") or not fields.get("FromUserName"):
        return None
    chat_id = fields.get("ChatId", "")
    return ChatMessage(
        event_id=fields["MsgId"],
        user_id=fields["FromUserName"],
        thread_id=chat_id or fields["FromUserName"],
        text=text,
        files=files,
        reply_to={"chat_id": chat_id, "agent_id": fields.get("AgentID", "")},
    )


def _press(fields: dict[str, str]) -> ButtonPress | None:
    decision, _sep, rest = fields.get("EventKey", "").partition(":")
    approval_id, _sep, request_hash = rest.partition(":")
    if decision not in (APPROVE, REJECT) or not approval_id or not request_hash or not fields.get("FromUserName"):
        return None
    return ButtonPress(
        # Events have no MsgId: WeCom's retries of one press share its member, time and card.
        event_id=f"{fields['FromUserName']}:{fields.get('CreateTime', '')}:{fields.get('TaskId', '')}",
        user_id=fields["FromUserName"],
        approval_id=approval_id,
        decision=decision,
        request_hash=request_hash,
        reply_to={"task_id": fields.get("TaskId", ""), "response_code": fields.get("ResponseCode", "")},
    )
