"""Recorded callbacks of Slack and Telegram, signed as each service signs them, and a local
server standing in for each service's API that checks every request as the service documents it
(its auth, its JSON shape, the thread it answers in) and answers as the service does."""

import copy
import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlencode

from chatbots.models import ChatChannel, ChatUser

RECORDED = Path(__file__).parent / "recorded"
SLACK_SECRETS = {"signing_secret": "8f742231b10e8888abcd99yyyzzz85a5", "bot_token": "xoxb-17653672481-19874698323"}
TELEGRAM_SECRETS = {"bot_token": "110201543:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw", "secret_token": "tg-secret_token-1"}


def recorded(name: str) -> dict:
    return copy.deepcopy(json.loads((RECORDED / f"{name}.json").read_text()))


def channel_make(*, agent, owner, service: str, api_base: str = "", **fields) -> ChatChannel:
    secrets = SLACK_SECRETS if service == "slack" else TELEGRAM_SECRETS
    return ChatChannel.objects.create(
        agent=agent,
        owner=owner,
        name=f"{service} bot",
        service=service,
        secrets=json.dumps(secrets),
        api_base=api_base,
        workspace_id=agent.workspace_id,
        **fields,
    )


def user_map(channel: ChatChannel, chat_user_id: str, end_user: str = "", account=None) -> ChatUser:
    return ChatUser.objects.create(
        channel=channel, chat_user_id=chat_user_id, end_user=end_user or f"end-{chat_user_id}", account=account
    )


def slack_headers(body: bytes, *, secret: str = SLACK_SECRETS["signing_secret"], at: float | None = None) -> dict:
    stamp = str(int(time.time() if at is None else at))
    mac = hmac.new(secret.encode(), b"v0:" + stamp.encode() + b":" + body, hashlib.sha256).hexdigest()
    return {"HTTP_X_SLACK_REQUEST_TIMESTAMP": stamp, "HTTP_X_SLACK_SIGNATURE": f"v0={mac}"}


def slack_post(client, channel, payload: dict, **sign):
    body = json.dumps(payload).encode()
    return client.post(f"/chatbots/{channel.pk}/", body, content_type="application/json", **slack_headers(body, **sign))


def slack_press(client, channel, payload: dict, **sign):
    body = urlencode({"payload": json.dumps(payload)}).encode()
    return client.post(
        f"/chatbots/{channel.pk}/",
        body,
        content_type="application/x-www-form-urlencoded",
        **slack_headers(body, **sign),
    )


def telegram_post(client, channel, update: dict, *, token: str = TELEGRAM_SECRETS["secret_token"]):
    headers = {"HTTP_X_TELEGRAM_BOT_API_SECRET_TOKEN": token} if token else {}
    return client.post(f"/chatbots/{channel.pk}/", json.dumps(update), content_type="application/json", **headers)


def _slack_problems(path: str, headers: dict, body: dict) -> list[str]:
    """chat.postMessage (api.slack.com/methods/chat.postMessage): a bot token as Bearer, JSON
    with the channel, a text, blocks as a list when there are any."""
    problems = []
    if path != "/api/chat.postMessage":
        problems.append(f"path {path}")
    if headers.get("authorization") != f"Bearer {SLACK_SECRETS['bot_token']}":
        problems.append("invalid_auth")
    if not headers.get("content-type", "").startswith("application/json"):
        problems.append("content type")
    if not body.get("channel") or not isinstance(body.get("text"), str) or not body["text"]:
        problems.append("no channel or text")
    if "blocks" in body and not isinstance(body["blocks"], list):
        problems.append("blocks")
    return problems


def _telegram_problems(path: str, headers: dict, body: dict) -> list[str]:
    """sendMessage (core.telegram.org/bots/api#sendmessage): the token in the path, JSON with
    chat_id and text, reply_markup an inline keyboard of buttons with callback_data of at most
    64 bytes."""
    problems = []
    if path != f"/bot{TELEGRAM_SECRETS['bot_token']}/sendMessage":
        problems.append("Unauthorized")
    if not headers.get("content-type", "").startswith("application/json"):
        problems.append("content type")
    if not body.get("chat_id") or not body.get("text"):
        problems.append("no chat_id or text")
    for row in (body.get("reply_markup") or {}).get("inline_keyboard", []):
        for button in row:
            if not button.get("text") or len(button.get("callback_data", "").encode()) > 64:
                problems.append("button")
    return problems


class ChatAPI:
    """The service's API on a local port: `posts` holds each request with what it got wrong."""

    def __init__(self, service: str):
        self.service = service
        self.posts: list[dict] = []
        self.lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                headers = {k.lower(): v for k, v in self.headers.items()}
                body = json.loads(raw)
                check = _slack_problems if service == "slack" else _telegram_problems
                problems = check(self.path, headers, body)
                with api.lock:
                    api.posts.append({"path": self.path, "headers": headers, "body": body, "problems": problems})
                if service == "slack":
                    status = 200  # Slack answers its errors with 200 and ok: false
                    answer = (
                        {"ok": False, "error": problems[0]} if problems else {"ok": True, "ts": "1515449599.000300"}
                    )
                else:
                    status = 400 if problems else 200
                    answer = (
                        {"ok": False, "error_code": 400, "description": problems[0]}
                        if problems
                        else {"ok": True, "result": {"message_id": 1400}}
                    )
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
