"""Telegram (Bot API webhooks, core.telegram.org/bots/api#setwebhook).

The webhook is set with a `secret_token`, which Telegram sends in every request's
`X-Telegram-Bot-Api-Secret-Token` header; a request without it, or with another, is refused. An
update's `update_id` is its event id (Telegram repeats an update until it is answered with 200).
A chat (a group, or the direct chat with the user) is one conversation. The answer is sendMessage
replying to the user's message (edited with editMessageText as the model streams it); an
approval card is an inline keyboard whose `callback_data`
(at most 64 bytes) carries the approval id and the first 48 hex digits of its request hash, and a
press arrives as a `callback_query`."""

import hmac
import json
from urllib.parse import quote

from chatbots.services.base import Answer, ButtonPress, ChatMessage, Inbound, Refused
from platform_site.json_input import json_loads_checked

API_BASE = "https://api.telegram.org"
SECRET_HEADER = "x-telegram-bot-api-secret-token"
# callback_data holds at most 64 bytes: "a:<id>:<hash prefix>" with a hash prefix this long.
HASH_PREFIX = 48


def _update(inbound: Inbound) -> dict:
    value = json_loads_checked(inbound.body or b"{}")
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value


def _files(message: dict) -> list[dict]:
    """A photo (its largest size; named by its sniffed type) and a document the message carries, by file_id."""
    files = []
    photo = message.get("photo")
    if isinstance(photo, list) and photo and isinstance(photo[-1], dict) and photo[-1].get("file_id"):
        files.append({"name": "photo", "key": str(photo[-1]["file_id"]), "type": "image"})
    document = message.get("document")
    if isinstance(document, dict) and document.get("file_id"):
        name = str(document.get("file_name") or "document")
        files.append({"name": name, "key": str(document["file_id"]), "type": "file"})
    return files


class Telegram:
    name = "telegram"
    secret_names = ("bot_token", "secret_token")

    def verify(self, inbound: Inbound, secrets: dict[str, str]) -> None:
        given = inbound.headers.get(SECRET_HEADER, "")
        expected = secrets.get("secret_token", "")
        if not expected or not hmac.compare_digest(expected.encode(), given.encode("utf-8", "replace")):
            raise Refused(Answer(status=401, body=b"wrong secret token", content_type="text/plain"), "bad secret")

    def handshake(self, inbound: Inbound, secrets: dict[str, str]) -> Answer | None:
        return None  # setWebhook is called by the operator; Telegram sends no challenge

    def parse(self, inbound: Inbound, secrets: dict[str, str]) -> ChatMessage | ButtonPress | None:
        update = _update(inbound)
        event_id = str(update.get("update_id", ""))
        query = update.get("callback_query")
        if isinstance(query, dict):
            return self._press(event_id, query)
        message = update.get("message")
        if not isinstance(message, dict):
            return None  # an edit, a member joining
        text = message.get("text") if isinstance(message.get("text"), str) else message.get("caption")
        files = _files(message)
        if not isinstance(text, str) and not files:
            return None  # a sticker, a location
        text = text if isinstance(text, str) else ""
        sender = message.get("from") or {}
        if sender.get("is_bot"):
            return None
        chat_id = str((message.get("chat") or {}).get("id", ""))
        return ChatMessage(
            event_id=event_id,
            user_id=str(sender.get("id", "")),
            thread_id=chat_id,
            text=text,
            files=files,
            reply_to={"chat_id": chat_id, "message_id": message.get("message_id")},
        )

    def file_request(self, message: ChatMessage, file: dict, secrets: dict[str, str], api_base: str) -> dict:
        """getFile (core.telegram.org/bots/api#getfile): where the file is, by its file_id."""
        token = secrets.get("bot_token", "")
        return {
            "method": "GET",
            "url": f"{(api_base or API_BASE).rstrip('/')}/bot{token}/getFile",
            "params": {"file_id": str(file.get("key", ""))},
        }

    def file_download_request(self, answer: dict, file: dict, secrets: dict[str, str], api_base: str) -> dict:
        """The file itself: https://api.telegram.org/file/bot<token>/<file_path>, getFile's answer."""
        path = str((answer.get("result") or {}).get("file_path") or "")
        if not path or ".." in path.split("/") or path.startswith("/"):
            raise ValueError("getFile gave no file path")
        token = secrets.get("bot_token", "")
        return {"method": "GET", "url": f"{(api_base or API_BASE).rstrip('/')}/file/bot{token}/{quote(path)}"}

    def _press(self, event_id: str, query: dict) -> ButtonPress | None:
        kind, _, rest = str(query.get("data", "")).partition(":")
        approval_id, _, request_hash = rest.partition(":")
        decision = {"a": "approve", "r": "reject"}.get(kind)
        if decision is None:
            return None
        message = query.get("message") or {}
        return ButtonPress(
            event_id=event_id,
            user_id=str((query.get("from") or {}).get("id", "")),
            approval_id=approval_id,
            decision=decision,
            request_hash=request_hash,
            reply_to={
                "chat_id": str((message.get("chat") or {}).get("id", "")),
                "message_id": message.get("message_id"),
                "callback_query_id": str(query.get("id", "")),
            },
        )

    def ack(self, event: ChatMessage | ButtonPress | None) -> Answer:
        query_id = event.reply_to.get("callback_query_id") if isinstance(event, ButtonPress) else None
        if query_id:
            # A webhook's answer may be a Bot API call: this one stops the button's spinner.
            return Answer(body=json.dumps({"method": "answerCallbackQuery", "callback_query_id": query_id}).encode())
        return Answer(body=b"", content_type="text/plain")

    def _send(self, message: ChatMessage, body: dict, secrets: dict[str, str], api_base: str) -> dict:
        body = {"chat_id": message.reply_to.get("chat_id", ""), **body}
        if message.reply_to.get("message_id") is not None:
            body["reply_to_message_id"] = message.reply_to["message_id"]
        token = secrets.get("bot_token", "")
        return {
            "method": "POST",
            "url": f"{(api_base or API_BASE).rstrip('/')}/bot{token}/sendMessage",
            "headers": {},
            "json": body,
        }

    def reply_request(self, message: ChatMessage, text: str, secrets: dict[str, str], api_base: str) -> dict:
        return self._send(message, {"text": text}, secrets, api_base)

    def posted_from_answer(self, answer: dict, message: ChatMessage) -> dict | None:
        # sendMessage answers with the Message sent: editMessageText names it by chat and message id.
        result = answer.get("result")
        if not isinstance(result, dict) or result.get("message_id") is None:
            return None
        chat = result.get("chat") if isinstance(result.get("chat"), dict) else {}
        chat_id = chat.get("id", message.reply_to.get("chat_id", ""))
        return {"chat_id": str(chat_id), "message_id": result["message_id"]}

    def update_request(self, posted: dict, text: str, secrets: dict[str, str], api_base: str) -> dict:
        token = secrets.get("bot_token", "")
        return {
            "method": "POST",
            "url": f"{(api_base or API_BASE).rstrip('/')}/bot{token}/editMessageText",
            "headers": {},
            "json": {"chat_id": posted["chat_id"], "message_id": posted["message_id"], "text": text},
        }

    def approval_card_request(
        self, message: ChatMessage, approval: dict, secrets: dict[str, str], api_base: str
    ) -> dict:
        bound = f"{approval['id']}:{approval['request_hash'][:HASH_PREFIX]}"
        keyboard = [
            [
                {"text": approval["approve_label"], "callback_data": f"a:{bound}"},
                {"text": approval["reject_label"], "callback_data": f"r:{bound}"},
            ]
        ]
        return self._send(
            message, {"text": approval["text"], "reply_markup": {"inline_keyboard": keyboard}}, secrets, api_base
        )


TELEGRAM = Telegram()
