"""What a hook does with requests nobody signed, and with a secret it cannot read: unsigned
requests count against their sender's address, never against the hook's budget of signed
deliveries; a secret the keys cannot decrypt is a 503 saying to rotate it, a logged error, and a
warning on the hook's admin page, where rotating it brings the hook back."""

import json
import logging
import uuid

import pytest
from django.conf import settings
from django.contrib.messages import get_messages
from django.db import connection
from django.test import Client, override_settings

from conversations.models import Run
from tests.support.factories import make_agent
from tests.triggers.test_hooks import ORDER, SECRET, _signed
from triggers.models import Hook

pytestmark = pytest.mark.django_db


@pytest.fixture
def hook():
    return Hook.objects.create(agent=make_agent(), name="orders", secret=SECRET, message="{{ payload.note }}")


def _post(hook_id, body: bytes, *, address: str, **headers):
    return Client(REMOTE_ADDR=address).post(
        f"/api/v1/hooks/{hook_id}/", body, content_type="application/json", **headers
    )


def _address() -> str:
    # Counters outlive a test in Redis: each test's senders are addresses of its own.
    return f"2001:db8::{uuid.uuid4().hex[:4]}"


def _body(n: int) -> bytes:
    return json.dumps({"note": f"n-{n}"}).encode()


def test_unsigned_requests_do_not_spend_the_hooks_budget_of_signed_deliveries(hook, no_enqueue):
    with override_settings(AGENTRY_HOOK_RATE="2/min", AGENTRY_HOOK_FAILURE_RATE="1000/min"):
        attacker, owner = _address(), _address()
        unsigned = {_post(hook.pk, _body(n), address=attacker).status_code for n in range(5)}
        signed = [
            _post(hook.pk, _body(n), address=owner, **_signed(_body(n), delivery=f"d-{n}")).status_code
            for n in range(3)
        ]
    assert unsigned == {401}
    assert signed == [202, 202, 429]  # the hook's own budget still holds for signed deliveries
    assert Run.objects.count() == 2


def test_an_address_over_its_budget_of_refusals_gets_429_and_the_owner_still_gets_through(hook, no_enqueue):
    attacker = _address()
    with override_settings(AGENTRY_HOOK_FAILURE_RATE="3/min"):
        refused = [_post(hook.pk, _body(n), address=attacker).status_code for n in range(5)]
        # Claiming other addresses in X-Forwarded-For changes nothing with no proxy configured.
        spoofed = _post(hook.pk, _body(9), address=attacker, HTTP_X_FORWARDED_FOR=_address()).status_code
        elsewhere = _post(hook.pk, _body(6), address=_address()).status_code
        owner = _post(hook.pk, _body(7), address=_address(), **_signed(_body(7), delivery="ok")).status_code
    assert refused == [401, 401, 401, 429, 429] and spoofed == 429
    assert elsewhere == 401 and owner == 202


def test_behind_a_proxy_refusals_count_per_forwarded_address(hook):
    proxy, client, other_client = _address(), _address(), _address()
    with override_settings(
        AGENTRY_HOOK_FAILURE_RATE="1/min", REST_FRAMEWORK={**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}
    ):
        first = _post(hook.pk, _body(1), address=proxy, HTTP_X_FORWARDED_FOR=client).status_code
        again = _post(hook.pk, _body(2), address=proxy, HTTP_X_FORWARDED_FOR=client).status_code
        other = _post(hook.pk, _body(3), address=proxy, HTTP_X_FORWARDED_FOR=other_client).status_code
    assert (first, again, other) == (401, 429, 401)


def _break_secret(hook) -> None:
    # As after AGENTRY_ENCRYPTION_KEYS changed: ciphertext no configured key decrypts.
    with connection.cursor() as cursor:
        cursor.execute("UPDATE triggers_hook SET secret = %s WHERE id = %s", ["gAAAAABnot-a-fernet-token", hook.pk])


def test_an_unreadable_secret_is_a_503_saying_to_rotate_it_and_a_logged_error(hook, caplog):
    _break_secret(hook)
    with caplog.at_level(logging.ERROR, logger="triggers.hooks"):
        response = _post(hook.pk, ORDER, address=_address(), **_signed(ORDER))
    assert response.status_code == 503
    assert "rotate the secret" in response.json()["message"]
    assert any(str(hook.pk) in r.getMessage() and "Rotate its secret" in r.getMessage() for r in caplog.records)
    assert not Run.objects.exists()


def test_the_admin_shows_an_unreadable_secret_and_rotating_it_brings_the_hook_back(hook, admin_client, no_enqueue):
    _break_secret(hook)
    assert admin_client.get("/admin/triggers/hook/").status_code == 200
    page = admin_client.get(f"/admin/triggers/hook/{hook.pk}/change/")
    assert page.status_code == 200 and "Unreadable" in page.content.decode()
    response = admin_client.post(
        "/admin/triggers/hook/", {"action": "rotate_secret", "_selected_action": [str(hook.pk)]}, follow=True
    )
    new = Hook.objects.get(pk=hook.pk).secret
    assert any(new in str(m) for m in get_messages(response.wsgi_request))
    body = _body(1)
    delivered = _post(hook.pk, body, address=_address(), **_signed(body, secret=new))
    assert delivered.status_code == 202
