"""The chat widget's API on the real database: end-user tokens (valid, forged, expired, too
long-lived, for another widget), CORS for allowed and refused origins and the preflight, each end
user kept to their own conversations, the agent's limits per end user, the script and the hosted
page, and the admin (secret shown once, rotation)."""

import logging
import time
import uuid

import jwt
import pytest
from django.contrib.auth.models import User
from django.contrib.messages import get_messages
from django.db import connection
from django.test import Client

from conversations.models import Conversation, Message, Run
from engine.answer_schema import REPAIR_NAME
from tests.security.bad_input import BAD_BODIES
from tests.support.factories import make_agent
from widgets.models import Widget
from widgets.tokens import MAX_LIFETIME_SECONDS, TokenRefused, end_user_token_sign, end_user_token_verify

pytestmark = pytest.mark.django_db

SITE = "https://shop.example.com"
# Secrets as long as generated ones: PyJWT warns about short HMAC keys.
FORGED = "wsec_forged-secret-of-nobody-0123456789abc"
OTHER = "wsec_other-secret-of-the-widget-0123456789"


@pytest.fixture
def owner():
    return User.objects.create_user("widget-owner", password="owner-pass-1")


@pytest.fixture
def widget(owner):
    return Widget.objects.create(
        agent=make_agent(),
        name="shop",
        secret="wsec_test-secret-of-the-widget-0123456789",
        owner=owner,
        allowed_origins=f"{SITE}\nhttp://127.0.0.1:8123",
    )


def _someone() -> str:
    # Unique per test: the minute windows of the limits live in Redis, across test runs.
    return f"eu-{uuid.uuid4().hex[:10]}"


def _client(token: str | None, origin: str | None = SITE) -> Client:
    headers = {}
    if token is not None:
        headers["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    if origin is not None:
        headers["HTTP_ORIGIN"] = origin
    return Client(**headers)


def _open(widget, client, **body):
    return client.post(f"/api/v1/widget/{widget.pk}/conversations/", body, content_type="application/json")


def _send(widget, client, conversation_id, content="hello"):
    url = f"/api/v1/widget/{widget.pk}/conversations/{conversation_id}/messages/"
    return client.post(url, {"content": content}, content_type="application/json")


def _claims(widget, **changes) -> dict:
    return {"w": str(widget.pk), "u": "alice", "exp": int(time.time()) + 300, **changes}


def test_a_valid_token_names_its_end_user(widget):
    token = end_user_token_sign(widget=widget, end_user="  alice ")
    assert end_user_token_verify(widget=widget, token=token) == "alice"


@pytest.mark.parametrize(
    ("make", "status", "message"),
    [
        (
            lambda w: jwt.encode(_claims(w), FORGED, algorithm="HS256"),
            401,
            "not signed with this widget",
        ),
        (lambda w: jwt.encode(_claims(w, exp=int(time.time()) - 120), w.secret, algorithm="HS256"), 401, "expired"),
        (
            lambda w: jwt.encode(_claims(w, exp=int(time.time()) + 2 * MAX_LIFETIME_SECONDS), w.secret, "HS256"),
            401,
            "must expire within 3600",
        ),
        (lambda w: jwt.encode(_claims(w, w=str(uuid.uuid4())), w.secret, algorithm="HS256"), 403, "another widget"),
        (lambda w: jwt.encode({"w": str(w.pk), "exp": int(time.time()) + 60}, w.secret, "HS256"), 401, "lacks"),
        (lambda w: jwt.encode(_claims(w, u="a\nb"), w.secret, algorithm="HS256"), 401, "printable"),
        (lambda w: jwt.encode(_claims(w), w.secret * 2, algorithm="HS512"), 401, "HS256"),
        (lambda w: "not.a.token", 401, "HS256"),
        (lambda w: "", 401, "required"),
    ],
    ids=["forged", "expired", "too-long-lived", "wrong-widget", "no-end-user", "control-char", "hs512", "junk", "none"],
)
def test_bad_tokens_are_refused_with_the_reason(widget, make, status, message):
    token = make(widget)
    with pytest.raises(TokenRefused) as refused:
        end_user_token_verify(widget=widget, token=token)
    assert refused.value.status == status and message in refused.value.message
    response = _open(widget, _client(token))
    assert response.status_code == status and message in response.json()["message"]
    # The page's script can read why: the refusal carries the CORS header of the allowed origin.
    assert response["Access-Control-Allow-Origin"] == SITE
    assert not Conversation.objects.exists()


def test_a_rotated_secret_refuses_old_tokens(widget):
    token = end_user_token_sign(widget=widget, end_user="alice")
    assert _open(widget, _client(token)).status_code == 201
    widget.secret = "wsec_rotated-secret-of-the-widget-012345678"
    widget.save()
    assert _open(widget, _client(token)).status_code == 401


def test_a_secret_the_keys_cannot_read_is_a_503_saying_to_rotate_it_and_a_logged_error(widget, caplog):
    token = end_user_token_sign(widget=widget, end_user="alice")
    # As after AGENTRY_ENCRYPTION_KEYS changed: ciphertext no configured key decrypts.
    with connection.cursor() as cursor:
        cursor.execute("UPDATE widgets_widget SET secret = %s WHERE id = %s", ["gAAAAABnot-a-fernet-token", widget.pk])
    with caplog.at_level(logging.ERROR, logger="platform_site.api_errors"):
        response = _open(widget, _client(token))
    assert response.status_code == 503
    assert "rotate the secret" in response.json()["message"]
    assert any("rotate it in the admin" in record.getMessage() for record in caplog.records)
    assert not Conversation.objects.exists()


def test_origins_allowed_refused_and_the_preflight(widget):
    token = end_user_token_sign(widget=widget, end_user=_someone())
    allowed = _open(widget, _client(token))
    assert allowed.status_code == 201 and allowed["Access-Control-Allow-Origin"] == SITE
    assert "Origin" in allowed["Vary"]
    refused = _open(widget, _client(token, origin="https://evil.example.net"))
    assert refused.status_code == 403 and "Access-Control-Allow-Origin" not in refused
    assert "embedded" in refused.json()["message"]
    # Another scheme or port is another origin.
    assert _open(widget, _client(token, origin="http://shop.example.com")).status_code == 403
    # No Origin: not a browser's cross-site call; the token decides.
    assert _open(widget, _client(token, origin=None)).status_code == 201

    url = f"/api/v1/widget/{widget.pk}/conversations/"
    preflight = Client().options(url, HTTP_ORIGIN=SITE, HTTP_ACCESS_CONTROL_REQUEST_METHOD="POST")
    assert preflight.status_code == 204 and preflight["Access-Control-Allow-Origin"] == SITE
    assert "POST" in preflight["Access-Control-Allow-Methods"]
    assert "Authorization" in preflight["Access-Control-Allow-Headers"]
    assert Client().options(url, HTTP_ORIGIN="https://evil.example.net").status_code == 403


def test_unknown_or_disabled_widgets_are_404(widget):
    token = end_user_token_sign(widget=widget, end_user="alice")
    widget.enabled = False
    widget.save()
    assert _open(widget, _client(token)).status_code == 404
    assert Client().get(f"/chat/{widget.pk}/").status_code == 404
    assert Client().post(f"/api/v1/widget/{uuid.uuid4()}/conversations/").status_code == 404


def test_a_conversation_is_kept_and_only_its_end_user_sees_it(widget, owner, no_enqueue):
    alice = _client(end_user_token_sign(widget=widget, end_user="alice"))
    opened = _open(widget, alice)
    assert opened.status_code == 201
    conversation_id = opened.json()["id"]
    conversation = Conversation.objects.get(pk=conversation_id)
    assert (conversation.end_user, conversation.owner, conversation.agent_id) == ("alice", owner, widget.agent_id)
    assert _send(widget, alice, conversation_id, "where is my order?").status_code == 202
    again = _open(widget, alice, conversation=conversation_id)
    assert again.status_code == 200 and again.json()["id"] == conversation_id
    assert [m["content"] for m in again.json()["messages"]] == ["where is my order?"]
    assert again.json()["active_run"] == str(Run.objects.get(conversation=conversation).pk)
    read = alice.get(f"/api/v1/widget/{widget.pk}/conversations/{conversation_id}/")
    assert read.status_code == 200 and read.json()["messages"][0]["role"] == "user"

    bob = _client(end_user_token_sign(widget=widget, end_user="bob"))
    assert _open(widget, bob, conversation=conversation_id).status_code == 404
    assert bob.get(f"/api/v1/widget/{widget.pk}/conversations/{conversation_id}/").status_code == 404
    assert _send(widget, bob, conversation_id).status_code == 404
    # Another widget of the same agent and owner does not reach it either.
    other = Widget.objects.create(agent=widget.agent, name="other", secret=OTHER, owner=owner)
    alice_there = _client(end_user_token_sign(widget=other, end_user="alice"), origin=None)
    assert _open(other, alice_there, conversation=conversation_id).status_code == 404
    assert Message.objects.filter(conversation=conversation).count() == 1


def test_bad_messages_are_4xx(widget, no_enqueue):
    client = _client(end_user_token_sign(widget=widget, end_user=_someone()))
    conversation_id = _open(widget, client).json()["id"]
    assert _send(widget, client, conversation_id, "   ").status_code == 400
    url = f"/api/v1/widget/{widget.pk}/conversations/{conversation_id}/messages/"
    assert client.post(url, "[1", content_type="application/json").status_code == 400
    assert _open(widget, client, conversation="not-a-uuid").status_code == 400
    assert client.put(url, {}, content_type="application/json").status_code == 405
    for name, body in BAD_BODIES.items():
        for target in (url, f"/api/v1/widget/{widget.pk}/conversations/"):
            response = client.post(target, body, content_type="application/json")
            assert response.status_code == 400, (name, target, response.content[:200])
            assert response.json()["message"]
    assert _send(widget, client, conversation_id).status_code == 202
    busy = _send(widget, client, conversation_id)
    assert busy.status_code == 409 and "still answering" in busy.json()["message"]


def test_the_agents_limit_per_end_user_answers_429(widget, no_enqueue):
    widget.agent.end_user_messages_per_minute = 1
    widget.agent.concurrent_messages = "enqueue"
    widget.agent.save()
    client = _client(end_user_token_sign(widget=widget, end_user=_someone()))
    conversation_id = _open(widget, client).json()["id"]
    assert _send(widget, client, conversation_id).status_code == 202
    refused = _send(widget, client, conversation_id)
    assert refused.status_code == 429 and 1 <= int(refused["Retry-After"]) <= 60
    assert "1 messages in the last minute" in refused.json()["message"]
    assert refused["Access-Control-Allow-Origin"] == SITE and "Retry-After" in refused["Access-Control-Expose-Headers"]


# Committed: the stream's view reads in another thread, on another connection.
@pytest.mark.django_db(transaction=True)
def test_event_stream_needs_the_token_in_the_query(widget, no_enqueue):
    token = end_user_token_sign(widget=widget, end_user="alice")
    client = _client(token)
    conversation_id = _open(widget, client).json()["id"]
    run_id = _send(widget, client, conversation_id).json()["run"]
    url = f"/api/v1/widget/{widget.pk}/runs/{run_id}/events/"
    assert Client(HTTP_ORIGIN=SITE).get(url).status_code == 401
    forged = jwt.encode(_claims(widget), FORGED, algorithm="HS256")
    assert Client(HTTP_ORIGIN=SITE).get(url, {"token": forged}).status_code == 401
    assert Client(HTTP_ORIGIN="https://evil.example.net").get(url, {"token": token}).status_code == 403
    bob = end_user_token_sign(widget=widget, end_user="bob")
    assert Client(HTTP_ORIGIN=SITE).get(url, {"token": bob}).status_code == 404
    assert Client().get(url, {"token": token, "last_event_id": "x"}).status_code == 400


def test_the_script_and_the_hosted_page(widget):
    script = Client().get("/widget.js")
    assert script.status_code == 200 and script["Content-Type"].startswith("text/javascript")
    assert b"attachShadow" in script.content
    page = Client().get(f"/chat/{widget.pk}/", {"token": '"><script>alert(1)</script>'})
    assert page.status_code == 200
    html = page.content.decode()
    assert f'data-widget="{widget.pk}"' in html and 'src="/widget.js"' in html
    assert "<script>alert(1)" not in html and "&quot;&gt;&lt;script&gt;" in html


def test_admin_shows_the_secret_once_and_rotates_it(admin_client, admin_user):
    agent = make_agent()
    response = admin_client.post(
        "/admin/widgets/widget/add/",
        {"agent": agent.pk, "name": "site", "enabled": "on", "allowed_origins": SITE, "language": "en"},
        follow=True,
    )
    widget = Widget.objects.get(name="site")
    assert widget.secret.startswith("wsec_") and widget.owner == admin_user
    shown = [str(m) for m in get_messages(response.wsgi_request)]
    assert any(widget.secret in m for m in shown)
    page = admin_client.get(f"/admin/widgets/widget/{widget.pk}/change/").content.decode()
    assert widget.secret not in page and str(widget.pk) in page and "data-widget" in page
    bad = admin_client.post(
        "/admin/widgets/widget/add/",
        {"agent": agent.pk, "name": "bad", "allowed_origins": "https://x.example.com/path", "language": "en"},
    )
    assert bad.status_code == 200 and "Not an origin" in bad.content.decode()
    old = widget.secret
    admin_client.post(
        "/admin/widgets/widget/", {"action": "rotate_secret", "_selected_action": [widget.pk]}, follow=True
    )
    widget.refresh_from_db()
    assert widget.secret != old and widget.secret.startswith("wsec_")


def test_a_reload_shows_neither_a_repair_turn_nor_the_answer_it_corrected(widget, no_enqueue):
    alice = _client(end_user_token_sign(widget=widget, end_user="alice"))
    conversation_id = _open(widget, alice).json()["id"]
    assert _send(widget, alice, conversation_id, "my order as JSON").status_code == 202
    conversation = Conversation.objects.get(pk=conversation_id)
    run = Run.objects.get(conversation=conversation)
    # What engine.answer_schema writes for an answer that missed the schema, then the good one.
    for order, (role, content, name) in enumerate(
        [
            ("assistant", "order 7, shipped", ""),
            ("user", "[Platform check, not the user] …", REPAIR_NAME),
            ("assistant", '{"order": 7, "status": "shipped"}', ""),
        ],
        start=conversation.messages.count() + 1,
    ):
        Message.objects.create(conversation=conversation, run=run, order=order, role=role, content=content, name=name)
    shown = alice.get(f"/api/v1/widget/{widget.pk}/conversations/{conversation_id}/").json()["messages"]
    assert [(m["role"], m["content"]) for m in shown] == [
        ("user", "my order as JSON"),
        ("assistant", '{"order": 7, "status": "shipped"}'),
    ]
