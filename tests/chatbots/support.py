"""Recorded callbacks of Slack, Telegram, Feishu/Lark, DingTalk and WeCom, signed (and encrypted)
as each service does it, and a local server standing in for each service's API that checks every
request as the service documents it (its auth, its JSON shape, the thread it answers in; for the
services that want one, the access token fetched first) and answers as the service does. The
Feishu, DingTalk and WeCom requests are built with their module tests' helpers."""

import copy
import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

from chatbots.models import ChatChannel, ChatUser
from chatbots.services import wecom_crypto
from tests.chatbots import test_dingtalk, test_feishu, test_wecom

RECORDED = Path(__file__).parent / "recorded"
SLACK_SECRETS = {"signing_secret": "8f742231b10e8888abcd99yyyzzz85a5", "bot_token": "xoxb-17653672481-19874698323"}
TELEGRAM_SECRETS = {"bot_token": "110201543:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw", "secret_token": "tg-secret_token-1"}


def _without_token(secrets: dict) -> dict:
    return {name: value for name, value in secrets.items() if name != "access_token"}


FEISHU_SECRETS = _without_token(test_feishu.SECRETS)
DINGTALK_SECRETS = _without_token(test_dingtalk.SECRETS)
WECOM_SECRETS = _without_token(test_wecom.SECRETS)
SECRETS = {
    "slack": SLACK_SECRETS,
    "telegram": TELEGRAM_SECRETS,
    "feishu": FEISHU_SECRETS,
    "dingtalk": DINGTALK_SECRETS,
    "wecom": WECOM_SECRETS,
}
# The access tokens the local API hands out.
TOKENS = {"feishu": "t-g1044ghJRUIJJ5ELM3", "dingtalk": "ding-token-5e1b", "wecom": "wecom-token-accesstoken01"}


def recorded(name: str) -> dict:
    return copy.deepcopy(json.loads((RECORDED / f"{name}.json").read_text()))


def channel_make(*, agent, owner, service: str, api_base: str = "", **fields) -> ChatChannel:
    secrets = SECRETS[service]
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


def feishu_post(client, channel, payload: dict, *, at: float | None = None, secret: str | None = None):
    """An event as Feishu sends it: encrypted with the app's Encrypt Key, signed over the body
    (with `secret` in the key's place when given)."""
    key = FEISHU_SECRETS["encrypt_key"]
    body = json.dumps({"encrypt": test_feishu.encrypt(json.dumps(payload).encode(), key)}).encode()
    stamp, nonce = str(int(time.time() if at is None else at)), "13624"
    signature = hashlib.sha256(f"{stamp}{nonce}{secret or key}".encode() + body).hexdigest()
    headers = {
        "HTTP_X_LARK_REQUEST_TIMESTAMP": stamp,
        "HTTP_X_LARK_REQUEST_NONCE": nonce,
        "HTTP_X_LARK_SIGNATURE": signature,
    }
    return client.post(f"/chatbots/{channel.pk}/", body, content_type="application/json", **headers)


def dingtalk_post(client, channel, body: dict, *, at: float | None = None, secret: str | None = None):
    """A robot message as DingTalk sends it: the timestamp (ms) and its signature in headers."""
    stamp = str(int((time.time() if at is None else at) * 1000))
    sign = test_dingtalk.signature(stamp, secret or DINGTALK_SECRETS["app_secret"])
    raw = json.dumps(body, ensure_ascii=False).encode()
    return client.post(
        f"/chatbots/{channel.pk}/", raw, content_type="application/json", HTTP_TIMESTAMP=stamp, HTTP_SIGN=sign
    )


def wecom_query(encrypted: str, *, at: float | None = None, token: str | None = None, **extra) -> str:
    stamp, nonce = str(int(time.time() if at is None else at)), "1372623149"
    signature = wecom_crypto.signature(token or WECOM_SECRETS["token"], stamp, nonce, encrypted)
    return urlencode({"msg_signature": signature, "timestamp": stamp, "nonce": nonce, **extra})


def wecom_encrypt(plain: str) -> str:
    return wecom_crypto.encrypt(
        plain.encode(), encoding_aes_key=WECOM_SECRETS["encoding_aes_key"], receive_id=WECOM_SECRETS["corp_id"]
    )


def wecom_post(client, channel, inner_xml: str, *, at: float | None = None, secret: str | None = None):
    """A message or event as WeCom posts it: its XML encrypted for the corp, signed in the query."""
    encrypted = wecom_encrypt(inner_xml)
    body = (
        f"<xml><ToUserName><![CDATA[{WECOM_SECRETS['corp_id']}]]></ToUserName>"
        f"<AgentID><![CDATA[{WECOM_SECRETS['agent_id']}]]></AgentID><Encrypt><![CDATA[{encrypted}]]></Encrypt></xml>"
    )
    url = f"/chatbots/{channel.pk}/?{wecom_query(encrypted, at=at, token=secret)}"
    return client.post(url, body.encode(), content_type="text/xml")


def _feishu_problems(method: str, path: str, headers: dict, body: dict, token: str) -> list[str]:
    """Reply to a message (open.feishu.cn/document/server-docs/im-v1/message/reply): the tenant
    token as Bearer, JSON with msg_type and content a JSON string of that type."""
    problems = []
    if method != "POST" or not path.startswith("/open-apis/im/v1/messages/om_") or not path.endswith("/reply"):
        problems.append(f"path {path}")
    if headers.get("authorization") != f"Bearer {token}":
        problems.append("token")
    if not headers.get("content-type", "").startswith("application/json"):
        problems.append("content type")
    if body.get("msg_type") not in ("text", "interactive") or not isinstance(body.get("content"), str):
        problems.append("msg_type or content")
    else:
        content = json.loads(body["content"])
        if body["msg_type"] == "text" and not content.get("text"):
            problems.append("no text")
        if body["msg_type"] == "interactive" and not content.get("elements"):
            problems.append("no card elements")
    return problems


def _dingtalk_problems(method: str, path: str, headers: dict, body: dict, token: str) -> list[str]:
    """The robot send API (open.dingtalk.com: robot batchSend / groupMessages send): the token in
    x-acs-dingtalk-access-token, the robot code, a msgKey and its msgParam as a JSON string."""
    problems = []
    if method != "POST" or path not in ("/v1.0/robot/oToMessages/batchSend", "/v1.0/robot/groupMessages/send"):
        problems.append(f"path {path}")
    if headers.get("x-acs-dingtalk-access-token") != token:
        problems.append("token")
    if body.get("robotCode") != DINGTALK_SECRETS["app_key"] or not body.get("msgKey"):
        problems.append("robotCode or msgKey")
    if not isinstance(body.get("msgParam"), str) or not json.loads(body["msgParam"]):
        problems.append("msgParam")
    if path.endswith("batchSend") and not body.get("userIds"):
        problems.append("userIds")
    if path.endswith("groupMessages/send") and not body.get("openConversationId"):
        problems.append("openConversationId")
    return problems


def _wecom_problems(method: str, path: str, headers: dict, body: dict, token: str) -> list[str]:
    """message/send (developer.work.weixin.qq.com/document/path/90236): the token in the query,
    JSON with touser, msgtype, agentid (a number) and the message of that type."""
    problems = []
    url = urlsplit(path)
    if method != "POST" or url.path != "/cgi-bin/message/send":
        problems.append(f"path {url.path}")
    if parse_qs(url.query).get("access_token") != [token]:
        problems.append("token")
    if not body.get("touser") or body.get("agentid") != int(WECOM_SECRETS["agent_id"]):
        problems.append("touser or agentid")
    if body.get("msgtype") not in ("text", "template_card") or not body.get(body.get("msgtype", "")):
        problems.append("msgtype")
    return problems


def _token_answer(service: str, method: str, path: str, body: dict) -> dict | None:
    """The answer to a token request as the service gives it, or None if the request is not one."""
    url = urlsplit(path)
    if service == "feishu" and url.path == "/open-apis/auth/v3/tenant_access_token/internal":
        good = method == "POST" and body == {k: FEISHU_SECRETS[k] for k in ("app_id", "app_secret")}
        if not good:
            return {"code": 10014, "msg": "app secret invalid"}
        return {"code": 0, "msg": "ok", "tenant_access_token": TOKENS["feishu"], "expire": 7200}
    if service == "dingtalk" and url.path == "/v1.0/oauth2/accessToken":
        wanted = {"appKey": DINGTALK_SECRETS["app_key"], "appSecret": DINGTALK_SECRETS["app_secret"]}
        if method != "POST" or body != wanted:
            return {"code": "invalidClientIdOrSecret", "message": "bad appKey or appSecret"}
        return {"accessToken": TOKENS["dingtalk"], "expireIn": 7200}
    if service == "wecom" and url.path == "/cgi-bin/gettoken":
        query = parse_qs(url.query)
        if method != "GET" or query != {
            "corpid": [WECOM_SECRETS["corp_id"]],
            "corpsecret": [WECOM_SECRETS["corp_secret"]],
        }:
            return {"errcode": 40001, "errmsg": "invalid credential"}
        return {"errcode": 0, "errmsg": "ok", "access_token": TOKENS["wecom"], "expires_in": 7200}
    return None


def _slack_problems(path: str, headers: dict, body: dict) -> list[str]:
    """chat.postMessage (api.slack.com/methods/chat.postMessage): a bot token as Bearer, JSON
    with the channel, a text, blocks as a list when there are any."""
    problems = []
    if path not in ("/api/chat.postMessage", "/api/chat.update"):
        problems.append(f"path {path}")
    if path == "/api/chat.update" and (not body.get("ts") or set(body) - {"channel", "ts", "text", "blocks"}):
        problems.append("chat.update names the message by channel and ts")
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
    bot = f"/bot{TELEGRAM_SECRETS['bot_token']}"
    if path not in (f"{bot}/sendMessage", f"{bot}/editMessageText"):
        problems.append("Unauthorized")
    if path == f"{bot}/editMessageText" and (
        not isinstance(body.get("message_id"), int) or "reply_to_message_id" in body
    ):
        problems.append("editMessageText names the message by chat_id and message_id")
    if not headers.get("content-type", "").startswith("application/json"):
        problems.append("content type")
    if not body.get("chat_id") or not body.get("text"):
        problems.append("no chat_id or text")
    for row in (body.get("reply_markup") or {}).get("inline_keyboard", []):
        for button in row:
            if not button.get("text") or len(button.get("callback_data", "").encode()) > 64:
                problems.append("button")
    return problems


# How each service answers a request made with an expired or revoked token.
_EXPIRED = {
    "feishu": (400, {"code": 99991663, "msg": "Invalid access token for authorization."}),
    "dingtalk": (401, {"code": "InvalidAuthentication", "message": "access token expired"}),
    "wecom": (200, {"errcode": 42001, "errmsg": "access_token expired"}),
}
_TOKEN_CHECKS = {"feishu": _feishu_problems, "dingtalk": _dingtalk_problems, "wecom": _wecom_problems}


class ChatAPI:
    """The service's API on a local port: `posts` holds each request (but token requests, in
    `tokens`) with what it got wrong. `expire_token()` revokes the token handed out so far: a post
    made with it is answered as the service answers an expired token."""

    def __init__(self, service: str):
        self.service = service
        self.posts: list[dict] = []
        self.tokens: list[dict] = []
        # Files the service holds, by download path, and each download asked (with what it got wrong).
        self.files: dict[str, bytes] = {}
        self.downloads: list[dict] = []
        self.token = TOKENS.get(service, "")
        self.lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                self._download("GET", b"")

            def _download(self, method: str, raw: bytes):
                headers = {k.lower(): v for k, v in self.headers.items()}
                download = api.download(self.path, headers, json.loads(raw) if raw else {})
                if download is None:
                    self._answer(method, raw)
                    return
                status, content_type, data = download
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                self._download("POST", self.rfile.read(int(self.headers.get("Content-Length", 0))))

            def _answer(self, method: str, raw: bytes):
                headers = {k.lower(): v for k, v in self.headers.items()}
                status, answer = api.answer(method, self.path, headers, json.loads(raw) if raw else {})
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

    def file_add(self, path: str, data: bytes) -> str:
        """Hold `data` as a file of the service: Slack's url_private_download (the returned URL),
        or Telegram's file_path (getFile answers it for the file_id `path`)."""
        self.files[path] = data
        return f"{self.url}{path}"

    def download(self, path: str, headers: dict, body: dict) -> tuple[int, str, bytes] | None:
        """A file download as the service documents it: Slack's url_private_download with the
        bot token as Bearer (files.slack.com); Telegram's getFile?file_id=… then
        /file/bot<token>/<file_path>; Feishu's message resource with the tenant token; WeCom's
        media/get with the access token in the query; DingTalk's messageFiles/download, then the
        URL it answers. None when the request is not a download."""
        url = urlsplit(path)
        found = self._token_download(url, headers, body)
        if found is not None:
            return found
        if self.service == "slack" and url.path.startswith("/files-pri/"):
            problems = [] if headers.get("authorization") == f"Bearer {SLACK_SECRETS['bot_token']}" else ["auth"]
            self.downloads.append({"path": url.path, "problems": problems})
            if problems or url.path not in self.files:
                return 404, "text/html", b"<html>not found</html>"
            return 200, "application/octet-stream", self.files[url.path]
        token = TELEGRAM_SECRETS["bot_token"]
        if self.service == "telegram" and url.path == f"/bot{token}/getFile":
            file_id = parse_qs(url.query).get("file_id", [""])[0]
            self.downloads.append({"path": url.path, "file_id": file_id, "problems": []})
            if f"/{file_id}" not in self.files:
                body = {"ok": False, "error_code": 400, "description": "Bad Request: invalid file_id"}
                return 400, "application/json", json.dumps(body).encode()
            result = {"file_id": file_id, "file_unique_id": "u-" + file_id, "file_path": f"photos/{file_id}.jpg"}
            return 200, "application/json", json.dumps({"ok": True, "result": result}).encode()
        if self.service == "telegram" and url.path.startswith("/file/bot"):
            problems = [] if url.path.startswith(f"/file/bot{token}/photos/") else ["token"]
            self.downloads.append({"path": url.path, "problems": problems})
            file_id = url.path.rsplit("/", 1)[-1].removesuffix(".jpg")
            if problems or f"/{file_id}" not in self.files:
                return 404, "application/json", b'{"ok":false,"error_code":404,"description":"Not Found"}'
            return 200, "application/octet-stream", self.files[f"/{file_id}"]
        return None

    def _token_download(self, url, headers: dict, body: dict) -> tuple[int, str, bytes] | None:
        query = parse_qs(url.query)
        if self.service == "feishu" and "/resources/" in url.path:
            key = url.path.rsplit("/", 1)[-1]
            problems = [] if headers.get("authorization") == f"Bearer {self.token}" else ["token"]
            if not url.path.startswith("/open-apis/im/v1/messages/om_") or query.get("type") not in (
                ["image"],
                ["file"],
            ):
                problems.append("path or type")
        elif self.service == "wecom" and url.path == "/cgi-bin/media/get":
            key = query.get("media_id", [""])[0]
            problems = [] if query.get("access_token") == [self.token] else ["token"]
        elif self.service == "dingtalk" and url.path == "/v1.0/robot/messageFiles/download":
            problems = [] if headers.get("x-acs-dingtalk-access-token") == self.token else ["token"]
            if body.get("robotCode") not in (DINGTALK_SECRETS["app_key"], "dingabc123"):
                problems.append("robotCode")
            self.downloads.append({"path": url.path, "body": body, "problems": problems})
            if problems or f"/{body.get('downloadCode')}" not in self.files:
                return 400, "application/json", b'{"code":"InvalidParameter","message":"bad downloadCode"}'
            answer = {"downloadUrl": f"{self.url}/dl/{body['downloadCode']}?sig=1"}
            return 200, "application/json", json.dumps(answer).encode()
        elif self.service == "dingtalk" and url.path.startswith("/dl/"):
            key, problems = url.path.removeprefix("/dl/"), []
        else:
            return None
        self.downloads.append({"path": url.path, "problems": problems})
        if problems or f"/{key}" not in self.files:
            return 400, "application/json", b'{"code": 234001, "errcode": 40007, "msg": "invalid media"}'
        return 200, "application/octet-stream", self.files[f"/{key}"]

    def expire_token(self) -> None:
        with self.lock:
            self.token += "-renewed"

    def answer(self, method: str, path: str, headers: dict, body: dict) -> tuple[int, dict]:
        service = self.service
        if service in _TOKEN_CHECKS:
            with self.lock:
                token = self.token
                issued = _token_answer(service, method, path, body)
                if issued is not None:
                    for name in ("tenant_access_token", "accessToken", "access_token"):
                        if name in issued:
                            issued[name] = token
                    self.tokens.append({"method": method, "path": path, "body": body})
                    return (200 if "code" not in issued or issued["code"] in (0,) else 400), issued
                problems = _TOKEN_CHECKS[service](method, path, headers, body, token)
                self.posts.append({"path": path, "headers": headers, "body": body, "problems": problems})
            if problems == ["token"]:
                return _EXPIRED[service]
            if problems:
                return 400, {"code": 230001, "errcode": 40058, "msg": problems[0], "errmsg": problems[0]}
            return 200, {
                "feishu": {"code": 0, "msg": "success", "data": {"message_id": "om_reply"}},
                "dingtalk": {"processQueryKey": "pqk-1", "invalidStaffIdList": []},
                "wecom": {"errcode": 0, "errmsg": "ok", "msgid": "msgid-1"},
            }[service]
        check = _slack_problems if service == "slack" else _telegram_problems
        problems = check(path, headers, body)
        with self.lock:
            self.posts.append({"path": path, "headers": headers, "body": body, "problems": problems})
        if service == "slack":
            # Slack answers its errors with 200 and ok: false
            if problems:
                return 200, {"ok": False, "error": problems[0]}
            return 200, {"ok": True, "channel": body["channel"], "ts": body.get("ts") or "1515449599.000300"}
        if problems:
            return 400, {"ok": False, "error_code": 400, "description": problems[0]}
        return 200, {"ok": True, "result": {"message_id": 1400, "chat": {"id": int(body["chat_id"])}}}

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# Feishu, DingTalk and WeCom: a chat user's message and an approval button press, as each sends them.
ASKERS = {"feishu": "ou_84aad35d084aa403a838cf73ee18467", "dingtalk": "manager4321", "wecom": "zhangsan"}


def token_service_message(service: str, *, event_id: str = "", user: str = "") -> dict | str:
    """The recorded message "hello" (its event id and sender changed when given)."""
    if service == "feishu":
        payload = test_feishu.message_event()
        payload["header"]["event_id"] = event_id or payload["header"]["event_id"]
        payload["event"]["sender"]["sender_id"]["open_id"] = user or ASKERS["feishu"]
        return payload
    if service == "dingtalk":
        # A direct chat whose session webhook has expired: the answer goes through the robot API.
        body = test_dingtalk.callback(conversation_type="1", text=" hello", sessionWebhookExpiredTime=1000)
        body["msgId"] = event_id or body["msgId"]
        body["senderStaffId"] = user or ASKERS["dingtalk"]
        return body
    xml = test_wecom.text_message("hello").replace("zhangsan", user or ASKERS["wecom"])
    return xml.replace("1234567890123456", event_id or "1234567890123456")


def token_service_press(service: str, *, approval_id, request_hash: str, user: str, event_id: str, decision: str):
    """An approval card's button pressed by `user`: Feishu's card callback, DingTalk's command
    message (what its ActionCard button sends as the presser), WeCom's template_card_event."""
    if service == "feishu":
        value = {"approval_id": str(approval_id), "decision": decision, "request_hash": request_hash}
        payload = test_feishu.card_event(value)
        payload["header"]["event_id"], payload["event"]["operator"]["open_id"] = event_id, user
        return payload
    if service == "dingtalk":
        body = token_service_message(service, event_id=event_id, user=user)
        body["text"]["content"] = f"/{decision} {approval_id} {request_hash}"
        return body
    xml = test_wecom.card_event(f"{decision}:{approval_id}:{request_hash}").replace("lisi", user)
    return xml.replace("1348831999", event_id)


def token_service_post(service: str, client, channel, payload, **sign):
    send = {"feishu": feishu_post, "dingtalk": dingtalk_post, "wecom": wecom_post}[service]
    return send(client, channel, payload, **sign)
