"""Inbound hooks through the API on the real database: signing, refusals, one run per delivery id,
throttling, and the hook's admin (secret shown once, rotation gated by the change permission)."""

import json
import time
import uuid

import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.db import transaction
from django.test import Client, override_settings

from conversations.models import Conversation, Run, RunRequest
from tests.support.factories import make_agent
from triggers.hooks import HookDeliveryReplayed, hook_deliver, hook_signature
from triggers.models import Hook, HookDelivery

pytestmark = pytest.mark.django_db

SECRET = "whsec_test-secret"


@pytest.fixture
def owner():
    return User.objects.create_user("hook-owner", password="owner-pass-1")


@pytest.fixture
def hook(owner):
    return Hook.objects.create(
        agent=make_agent(),
        name="orders",
        secret=SECRET,
        message="Order {{ payload.order.id }} from {{ payload.customer }}: {{ payload.note }}",
        end_user="{{ payload.customer }}",
        owner=owner,
    )


def _signed(body: bytes, *, secret: str = SECRET, timestamp: int | None = None, delivery="d-1") -> dict:
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    headers = {
        "HTTP_X_AGENTRY_TIMESTAMP": stamp,
        "HTTP_X_AGENTRY_SIGNATURE": hook_signature(secret=secret, timestamp=stamp, body=body),
    }
    if delivery is not None:
        headers["HTTP_X_AGENTRY_DELIVERY"] = delivery
    return headers


def _post(hook_id, body: bytes, **headers):
    return Client().post(f"/api/v1/hooks/{hook_id}/", body, content_type="application/json", **headers)


ORDER = json.dumps({"order": {"id": 42}, "customer": "c-7", "note": "<b>fast</b>"}).encode()


def test_a_signed_request_starts_one_run_with_the_rendered_message(
    hook, owner, no_enqueue, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = _post(hook.pk, ORDER, **_signed(ORDER))
    assert response.status_code == 202, response.content
    run = Run.objects.get()
    assert response.json() == {"run": str(run.pk), "delivery": "d-1"}
    # Not autoescaped: the message is prompt text.
    assert RunRequest.objects.get(run=run).content == "Order 42 from c-7: <b>fast</b>"
    assert run.conversation.owner == owner and run.conversation.end_user == "c-7"
    assert run.conversation.agent_id == hook.agent_id
    assert run.hook_delivery.hook == hook and run.hook_delivery.delivery_id == "d-1"
    # Handed to a worker once committed.
    assert no_enqueue == [str(run.pk)]


def test_the_same_delivery_id_again_is_a_409_naming_the_run_and_starts_nothing(hook, no_enqueue):
    first = _post(hook.pk, ORDER, **_signed(ORDER))
    assert first.status_code == 202
    again = _post(hook.pk, ORDER, **_signed(ORDER))
    assert again.status_code == 409
    body = again.json()
    assert body["extra"]["run"] == first.json()["run"] and first.json()["run"] in body["message"]
    assert Run.objects.count() == 1 and Conversation.objects.count() == 1 and HookDelivery.objects.count() == 1


def test_the_same_signed_request_under_another_delivery_id_is_a_409(hook, no_enqueue):
    """The delivery id is not signed: a request captured and sent again within the tolerance
    with a new id is the same signature, and is refused by it."""
    headers = _signed(ORDER)
    assert _post(hook.pk, ORDER, **headers).status_code == 202
    replayed = _post(hook.pk, ORDER, **{**headers, "HTTP_X_AGENTRY_DELIVERY": "d-2"})
    assert replayed.status_code == 409, replayed.content
    assert Run.objects.count() == 1 and HookDelivery.objects.count() == 1


def test_the_agents_limits_per_end_user_hold_for_hook_runs(hook, no_enqueue):
    hook.agent.end_user_messages_per_minute = 1
    hook.agent.save()
    first = json.dumps({"customer": "c-7", "note": "one"}).encode()
    second = json.dumps({"customer": "c-7", "note": "two"}).encode()
    other = json.dumps({"customer": "c-8", "note": "two"}).encode()
    assert _post(hook.pk, first, **_signed(first, delivery="e-1")).status_code == 202
    limited = _post(hook.pk, second, **_signed(second, delivery="e-2"))
    assert limited.status_code == 429 and limited["Retry-After"], limited.content
    assert _post(hook.pk, other, **_signed(other, delivery="e-3")).status_code == 202
    assert Run.objects.count() == 2


def test_a_duplicate_fails_on_the_constraint_in_a_savepoint_leaving_the_callers_work(hook, no_enqueue):
    hook_deliver(hook=hook, delivery_id="once", signature="a" * 64, content="first", end_user="a")
    with transaction.atomic():
        kept = User.objects.create_user("written-before")
        with pytest.raises(HookDeliveryReplayed) as refused:
            hook_deliver(hook=hook, delivery_id="once", signature="b" * 64, content="second", end_user="b")
        assert refused.value.delivery.run_id == Run.objects.get().pk
    assert User.objects.filter(pk=kept.pk).exists()
    assert Run.objects.count() == 1 and Conversation.objects.count() == 1


def test_the_same_delivery_id_at_another_hook_is_another_delivery(hook, no_enqueue):
    other = Hook.objects.create(agent=hook.agent, name="other", secret=SECRET, message="hi {{ payload.note }}")
    assert _post(hook.pk, ORDER, **_signed(ORDER)).status_code == 202
    assert _post(other.pk, ORDER, **_signed(ORDER)).status_code == 202
    assert Run.objects.count() == 2


@pytest.mark.parametrize("offset", [-301, 301])
def test_a_stale_timestamp_is_a_401(hook, offset):
    response = _post(hook.pk, ORDER, **_signed(ORDER, timestamp=int(time.time()) + offset))
    assert response.status_code == 401
    assert response.json()["extra"]["reason"] == "stale" and "X-Agentry-Timestamp" in response.json()["message"]
    assert not Run.objects.exists() and not HookDelivery.objects.exists()


@pytest.mark.parametrize("stamp", ["12.5", "-5", "١٢٣", "now", "9" * 20])
def test_a_timestamp_not_in_whole_seconds_is_a_401(hook, stamp):
    headers = _signed(ORDER)
    headers["HTTP_X_AGENTRY_TIMESTAMP"] = stamp
    response = _post(hook.pk, ORDER, **headers)
    assert response.status_code == 401 and response.json()["extra"]["reason"] == "bad_timestamp"


def test_a_wrong_signature_is_a_401(hook):
    for headers in (
        _signed(ORDER, secret="whsec_another"),
        _signed(ORDER.replace(b"42", b"43")),  # signed another body
        {**_signed(ORDER), "HTTP_X_AGENTRY_SIGNATURE": "sha256=é"},
    ):
        response = _post(hook.pk, ORDER, **headers)
        assert response.status_code == 401, response.content
        assert response.json()["extra"]["reason"] == "bad_signature"
        assert "X-Agentry-Signature" in response.json()["message"]
    assert not Run.objects.exists()


@pytest.mark.parametrize("missing", ["X-Agentry-Timestamp", "X-Agentry-Signature"])
def test_missing_signing_headers_are_a_401_naming_them(hook, missing):
    headers = _signed(ORDER)
    del headers["HTTP_" + missing.upper().replace("-", "_")]
    response = _post(hook.pk, ORDER, **headers)
    assert response.status_code == 401
    assert response.json()["extra"]["reason"] == "missing_headers" and missing in response.json()["message"]


def test_an_unsigned_request_is_a_401(hook):
    assert _post(hook.pk, ORDER).status_code == 401
    assert not Run.objects.exists()


@pytest.mark.parametrize(
    "body",
    [b"[1, 2]", b'"text"', b"{not json", b'{"a": "\\ud800"}', b"[" * 100 + b"]" * 100, b"\xff\xfe"],
)
def test_a_body_that_is_not_a_json_object_is_a_400(hook, body):
    response = _post(hook.pk, body, **_signed(body))
    assert response.status_code == 400, response.content
    assert response.json()["message"] and not Run.objects.exists() and not HookDelivery.objects.exists()


@pytest.mark.parametrize("delivery", [None, "a\nb", "a\x00b", "x" * 201])
def test_a_missing_or_bad_delivery_id_is_a_400(hook, delivery):
    response = _post(hook.pk, ORDER, **_signed(ORDER, delivery=delivery))
    assert response.status_code == 400, response.content
    assert "X-Agentry-Delivery" in response.json()["message"]
    assert not Run.objects.exists()


def test_a_payload_that_makes_an_empty_message_or_a_bad_end_user_is_a_400(hook):
    empty = Hook.objects.create(agent=hook.agent, name="empty", secret=SECRET, message="{{ payload.missing }}")
    response = _post(empty.pk, ORDER, **_signed(ORDER))
    assert response.status_code == 400 and "empty" in response.json()["message"]
    bad_user = json.dumps({"customer": "a\tb", "note": "x"}).encode()
    response = _post(hook.pk, bad_user, **_signed(bad_user))
    assert response.status_code == 400 and "end user" in response.json()["message"]
    assert not Run.objects.exists() and not HookDelivery.objects.exists()


def test_unknown_disabled_and_inactive_agent_hooks_are_the_same_404(hook):
    unknown = _post(uuid.uuid4(), ORDER, **_signed(ORDER))
    Hook.objects.filter(pk=hook.pk).update(enabled=False)
    disabled = _post(hook.pk, ORDER, **_signed(ORDER))
    Hook.objects.filter(pk=hook.pk).update(enabled=True)
    hook.agent.is_active = False
    hook.agent.save(update_fields=["is_active"])
    inactive = _post(hook.pk, ORDER, **_signed(ORDER))
    assert unknown.status_code == disabled.status_code == inactive.status_code == 404
    assert unknown.json() == disabled.json() == inactive.json()
    assert not Run.objects.exists()


def test_requests_over_the_hooks_rate_are_a_429(hook, no_enqueue):
    with override_settings(AGENTRY_HOOK_RATE="2/min"):
        bodies = [json.dumps({"customer": f"c-{n}", "note": "n"}).encode() for n in range(3)]
        statuses = [
            _post(hook.pk, body, **_signed(body, delivery=f"t-{n}")).status_code for n, body in enumerate(bodies)
        ]
        # Another hook has a budget of its own.
        other = Hook.objects.create(agent=hook.agent, name="other", secret=SECRET, message="hi")
        other_status = _post(other.pk, ORDER, **_signed(ORDER)).status_code
    assert statuses == [202, 202, 429] and other_status == 202
    assert Run.objects.filter(hook_delivery__hook=hook).count() == 2


def test_a_get_is_a_405(hook):
    response = Client().get(f"/api/v1/hooks/{hook.pk}/")
    assert response.status_code == 405 and response.json()["message"]


# The admin


@pytest.fixture
def superuser():
    return User.objects.create_superuser("root", password="root-pass-1")


def _admin(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_new_hooks_secret_is_shown_once(superuser, owner):
    agent = make_agent()
    client = _admin(superuser)
    response = client.post(
        "/admin/triggers/hook/add/",
        {"agent": agent.pk, "name": "new", "enabled": "on", "message": "{{ payload.x }}", "end_user": ""},
        follow=True,
    )
    hook = Hook.objects.get(name="new")
    shown = [str(m) for m in get_messages(response.wsgi_request)]
    assert any(hook.secret in m for m in shown), shown
    assert hook.secret.startswith("whsec_") and hook.owner == superuser
    page = client.get(f"/admin/triggers/hook/{hook.pk}/change/")
    assert page.status_code == 200
    assert hook.secret not in page.content.decode() and f"/api/v1/hooks/{hook.pk}/" in page.content.decode()


def test_a_template_with_a_syntax_error_is_refused_on_save(superuser):
    agent = make_agent()
    response = _admin(superuser).post(
        "/admin/triggers/hook/add/",
        {
            "agent": agent.pk,
            "name": "broken",
            "enabled": "on",
            "message": "{% if %}",
            "end_user": "{{ payload.a|nope }}",
        },
    )
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "message" in errors and "end_user" in errors
    assert not Hook.objects.exists()


def test_the_hooks_page_links_its_deliveries_to_the_run_timeline(hook, superuser, no_enqueue):
    run = hook_deliver(hook=hook, delivery_id="seen", signature="c" * 64, content="n", end_user="a")
    page = _admin(superuser).get(f"/admin/triggers/hook/{hook.pk}/change/").content.decode()
    assert "seen" in page and f"/monitor/runs/{run.pk}/" in page


def _staff(*codenames) -> User:
    user = User.objects.create_user(f"staff-{'-'.join(codenames)}", password="staff-pass-1", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="triggers", codename__in=codenames))
    return user


def test_rotating_the_secret_needs_the_change_permission(hook):
    action = {"action": "rotate_secret", "_selected_action": [str(hook.pk)]}
    viewer = _admin(_staff("view_hook"))
    viewer.post("/admin/triggers/hook/", action)
    hook.refresh_from_db()
    assert hook.secret == SECRET
    editor = _admin(_staff("view_hook", "change_hook"))
    response = editor.post("/admin/triggers/hook/", action, follow=True)
    hook.refresh_from_db()
    assert hook.secret != SECRET and hook.secret.startswith("whsec_")
    assert any(hook.secret in str(m) for m in get_messages(response.wsgi_request))
    # The old secret signs nothing any more.
    assert _post(hook.pk, ORDER, **_signed(ORDER)).status_code == 401
