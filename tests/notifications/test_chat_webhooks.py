"""Webhooks in chat-app formats, against local receivers that check each service's documented
body and signature (and answer as the service does): an approval request on a real run, its
decision as a follow-up, a refusal in a 200 body recorded as a failed attempt, and the admin's
host check."""

import base64
import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth.models import Group, User

from conversations.models import Approval
from engine.approvals import approval_decide
from notifications.models import Webhook, WebhookDelivery
from notifications.sending import webhook_attempt
from tests.support.api_server import WebhookReceiver
from tests.support.factories import make_agent
from tests.support.runs import advance, start_run

PUBLIC_URL = "https://agentry.example.com"
BOT_SECRET = "SEC-bot-secret"
SIGNED = ("feishu", "dingtalk")

# What each service answers: success, and a refusal that comes with HTTP 200.
ANSWERS = {
    "feishu": ({"code": 0, "msg": "success"}, {"code": 19021, "msg": "sign match fail"}),
    "dingtalk": ({"errcode": 0, "errmsg": "ok"}, {"errcode": 310000, "errmsg": "sign not match"}),
    "wecom": ({"errcode": 0, "errmsg": "ok"}, {"errcode": 93000, "errmsg": "invalid webhook url"}),
}


def _problems(fmt: str, query: dict, body: dict) -> list[str]:
    """What the service would refuse in this POST, checked by its documented rules."""
    problems = []
    if fmt == "feishu":
        if body.get("msg_type") != "interactive" or not body["card"]["header"]["title"]["content"]:
            problems.append("not an interactive card")
        timestamp = body.get("timestamp", "")
        key = f"{timestamp}\n{BOT_SECRET}".encode()
        if body.get("sign") != base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode():
            problems.append("feishu signature")
        if abs(time.time() - int(timestamp or 0)) > 3600:
            problems.append("feishu timestamp")
    elif fmt == "dingtalk":
        if body.get("msgtype") not in ("actionCard", "markdown") or not body[body["msgtype"]]["text"]:
            problems.append("not an action card or markdown")
        [timestamp], [sign] = query.get("timestamp", [""]), query.get("sign", [""])
        mac = hmac.new(BOT_SECRET.encode(), f"{timestamp}\n{BOT_SECRET}".encode(), hashlib.sha256)
        if sign != base64.b64encode(mac.digest()).decode():
            problems.append("dingtalk signature")
        if abs(time.time() * 1000 - int(timestamp or 0)) > 3600 * 1000:
            problems.append("dingtalk timestamp")
    elif fmt == "wecom":
        if body.get("msgtype") != "markdown" or not isinstance(body["markdown"].get("content"), str):
            problems.append("not markdown")
    elif fmt == "slack":
        if not body.get("text") or body["blocks"][0]["text"]["type"] != "mrkdwn":
            problems.append("no text or mrkdwn section")
    return problems


class ChatReceiver:
    def __init__(self, fmt: str, refuse: bool = False):
        self.posts: list[dict] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                body, query = json.loads(raw), parse_qs(urlsplit(self.path).query)
                problems = _problems(fmt, query, body)
                with receiver.lock:
                    receiver.posts.append({"query": query, "body": body, "problems": problems})
                if fmt == "slack":
                    status, answer, kind = (
                        (400, b"invalid_payload", "text/plain")
                        if refuse or problems
                        else (
                            200,
                            b"ok",
                            "text/plain",
                        )
                    )
                else:
                    ok, refused = ANSWERS[fmt]
                    status, answer, kind = 200, json.dumps(refused if refuse or problems else ok).encode(), "json"
                self.send_response(status)
                self.send_header("Content-Type", "application/json" if kind == "json" else kind)
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/robot/send?access_token=tok"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def chat_settings(settings):
    settings.AGENTRY_WEBHOOK_ALLOWLIST = ["127.0.0.1"]
    settings.AGENTRY_PUBLIC_URL = PUBLIC_URL
    return settings


@pytest.fixture
def receivers():
    started = []

    def start(fmt, refuse=False):
        started.append(ChatReceiver(fmt, refuse))
        return started[-1]

    yield start
    for receiver in started:
        receiver.stop()


@pytest.fixture
def parked(scripted_agent):
    """A run of a real agent waiting for approval of test-counter, with a chat webhook."""

    def make(fmt: str, url: str):
        agent = scripted_agent(
            {
                "scenarios": [
                    {
                        "match": ".",
                        "steps": [
                            {"tool_calls": [{"name": "test-counter", "arguments": {"label": "@all"}}]},
                            {"content": "done"},
                        ],
                    }
                ]
            },
            tools=["test-counter"],
            approval={"test-counter": "always"},
        )
        Webhook.objects.create(
            agent=agent, url=url, format=fmt, secret="whsec_x", bot_secret=BOT_SECRET if fmt in SIGNED else ""
        )
        run = advance(start_run(agent, "record"))
        assert run.status == "awaiting_approval", run.error
        return run

    return make


def _deliver(run, event_type: str) -> WebhookDelivery:
    [delivery] = WebhookDelivery.objects.filter(run_event__run=run, event_type=event_type)
    assert webhook_attempt(delivery_id=delivery.pk) is None
    delivery.refresh_from_db()
    return delivery


@pytest.fixture
def approver(db):
    user = User.objects.create_user("approver", password="approver-pass-1")
    user.groups.add(Group.objects.get(name="Approvers"))
    return user


@pytest.mark.parametrize("fmt", ["feishu", "dingtalk", "wecom", "slack"])
def test_an_approval_request_and_its_decision_reach_the_chat_app(
    fmt, chat_settings, receivers, parked, approver, monkeypatch
):
    receiver = receivers(fmt)
    run = parked(fmt, receiver.url)
    approval = Approval.objects.get(run=run)

    request = _deliver(run, "approval.requested")
    assert request.status == "delivered", list(request.attempt_rows.values_list("error", flat=True))
    [post] = receiver.posts
    assert post["problems"] == []
    text = json.dumps(post["body"], ensure_ascii=False)
    assert "test-counter" in text and run.agent.slug in text and str(run.pk) in text
    assert f"{PUBLIC_URL}/approvals/{approval.pk}/" in text
    assert "@all" not in text  # the arguments' mention is neutralised

    approval_decide(approval_id=approval.pk, user=approver, decision="reject", channel="page", reason="no")
    follow_up = _deliver(run, "approval.decided")
    assert follow_up.status == "delivered"
    assert receiver.posts[1]["problems"] == []
    assert "approver" in json.dumps(receiver.posts[1]["body"], ensure_ascii=False)


def test_an_agentry_webhook_does_not_hear_decisions(chat_settings, receivers, parked, approver, monkeypatch):
    run = parked("wecom", receivers("wecom").url)
    hook = Webhook.objects.get(agent=run.agent)
    Webhook.objects.create(agent=run.agent, url=hook.url, secret="whsec_y")
    approval_decide(approval_id=Approval.objects.get(run=run).pk, user=approver, decision="approve", channel="page")
    decided = WebhookDelivery.objects.filter(run_event__run=run, event_type="approval.decided")
    assert list(decided.values_list("webhook__format", flat=True)) == ["wecom"]


@pytest.mark.parametrize("fmt", ["feishu", "dingtalk", "wecom"])
def test_a_refusal_in_a_200_body_is_a_failed_attempt_with_the_service_message(fmt, chat_settings, receivers, parked):
    receiver = receivers(fmt, refuse=True)
    delivery = _deliver(parked(fmt, receiver.url), "approval.requested")
    assert delivery.status == "failed" and delivery.attempts == 1
    [attempt] = delivery.attempt_rows.all()
    refused = ANSWERS[fmt][1]
    assert attempt.http_status == 200 and not attempt.will_retry
    assert str(refused.get("code", refused.get("errcode"))) in attempt.error
    assert (refused.get("msg") or refused.get("errmsg")) in attempt.error


def test_a_slack_refusal_is_a_failed_attempt(chat_settings, receivers, parked):
    delivery = _deliver(parked("slack", receivers("slack", refuse=True).url), "approval.requested")
    [attempt] = delivery.attempt_rows.all()
    assert delivery.status == "failed" and attempt.http_status == 400 and attempt.error == "HTTP 400"


def test_a_chat_url_off_its_host_is_refused_at_send_time(chat_settings, parked):
    run = parked("slack", "https://hooks.example.com/services/x")
    delivery = _deliver(run, "approval.requested")
    [attempt] = delivery.attempt_rows.all()
    assert delivery.status == "failed" and attempt.http_status is None and "host" in attempt.error


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fmt", "url", "bot_secret", "refused"),
    [
        ("slack", "https://hooks.example.com/services/x", "", "url"),
        ("feishu", "https://open.feishu.cn.evil.com/open-apis/bot/v2/hook/x", "", "url"),
        ("dingtalk", "http://oapi.dingtalk.com/robot/send?access_token=t", "", "url"),
        ("wecom", "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=k", "SEC", "new_bot_secret"),
        ("dingtalk", "https://oapi.dingtalk.com/robot/send?access_token=t", "SEC", None),
        ("wecom", "http://127.0.0.1:9/hook", "", None),
    ],
)
def test_the_admin_form_checks_the_service_host(admin_client, chat_settings, fmt, url, bot_secret, refused):
    agent = make_agent()
    form = {"agent": agent.pk, "url": url, "format": fmt, "is_active": "on", "new_bot_secret": bot_secret}
    response = admin_client.post("/admin/notifications/webhook/add/", form)
    if refused:
        assert response.status_code == 200 and refused in response.context["adminform"].form.errors
        assert not Webhook.objects.exists()
    else:
        assert response.status_code == 302
        assert Webhook.objects.get().bot_secret == bot_secret


def test_agentry_format_is_unchanged_signed_json(chat_settings, parked):
    receiver = WebhookReceiver()
    try:
        run = parked("wecom", "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=k")
        Webhook.objects.filter(agent=run.agent).update(url=receiver.url, format="agentry", secret="whsec_z")
        delivery = _deliver(run, "approval.requested")
    finally:
        receiver.stop()
    assert delivery.status == "delivered"
    [request] = receiver.requests
    headers, body = request["headers"], request["body"]
    mac = hmac.new(b"whsec_z", headers["x-agentry-timestamp"].encode() + b"." + body, hashlib.sha256)
    assert headers["x-agentry-signature"] == "sha256=" + mac.hexdigest()
    assert json.loads(body)["id"] == str(delivery.pk) and json.loads(body)["type"] == "approval.requested"


@pytest.mark.django_db
def test_a_form_without_a_format_keeps_agentry_s(admin_client):
    agent = make_agent()
    form = {"agent": agent.pk, "url": "https://hooks.example.com/agentry", "is_active": "on"}
    assert admin_client.post("/admin/notifications/webhook/add/", form).status_code == 302
    assert Webhook.objects.get().format == "agentry"
