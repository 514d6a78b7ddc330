"""The webhook admin and deliveries from an operator's side: one message per refused URL, each
secret's fields only for the formats that use it, a name that does not resolve retried like
other network errors, and a failed delivery sent again on request."""

import pytest
from django.contrib.auth.models import Permission

from notifications.models import Webhook, WebhookDelivery
from notifications.sending import webhook_attempt
from tests.support.api_server import WebhookReceiver
from tests.support.factories import make_agent, make_user

pytestmark = pytest.mark.django_db

ADD = "/admin/notifications/webhook/add/"
DELIVERIES = "/admin/notifications/webhookdelivery/"


def _errors(response) -> dict:
    return response.context["adminform"].form.errors


def test_an_http_feishu_url_gets_one_message(admin_client):
    form = {"agent": make_agent().pk, "url": "http://open.feishu.cn/open-apis/bot/v2/hook/x", "format": "feishu"}
    response = admin_client.post(ADD, form)
    assert response.status_code == 200 and not Webhook.objects.exists()
    assert len(_errors(response)["url"]) == 1
    assert "https" in _errors(response)["url"][0]


def test_an_invalid_url_gets_one_message(admin_client):
    response = admin_client.post(ADD, {"agent": make_agent().pk, "url": "not a url", "format": "slack"})
    assert _errors(response)["url"] == ["Enter a valid URL."]


def _fieldsets(page: str) -> dict[str, bool]:
    """Each secret's fieldset on the page: shown (True) or hidden."""
    shown = {}
    for name, marker in (("secret", "formats-agentry"), ("bot_secret", "formats-feishu")):
        start = page.index(marker)
        tag = page[page.rindex("<fieldset", 0, start) : page.index(">", start)]
        shown[name] = "hidden" not in tag.split('class="', 1)[1].split('"', 1)[0].split()
    return shown


@pytest.mark.parametrize(
    ("fmt", "shown"),
    [
        ("agentry", {"secret": True, "bot_secret": False}),
        ("feishu", {"secret": False, "bot_secret": True}),
        ("dingtalk", {"secret": False, "bot_secret": True}),
        ("wecom", {"secret": False, "bot_secret": False}),
        ("slack", {"secret": False, "bot_secret": False}),
        ("email", {"secret": False, "bot_secret": False}),
    ],
)
def test_each_secret_shows_only_for_the_formats_that_use_it(admin_client, fmt, shown):
    hook = Webhook.objects.create(
        agent=make_agent(), format=fmt, url="https://example.com/x", email_to="a@example.com", secret="whsec_x"
    )
    page = admin_client.get(f"/admin/notifications/webhook/{hook.pk}/change/").content.decode()
    assert _fieldsets(page) == shown
    assert "console/webhook_form.js" in page  # follows a change of format in the browser
    # A form posted back with errors shows the secrets of the format it was posted with.
    posted = admin_client.post(ADD, {"agent": hook.agent_id, "format": fmt, "url": "", "email_to": ""})
    assert posted.status_code == 200 and _fieldsets(posted.content.decode()) == shown


def test_a_chat_webhook_takes_no_agentry_secret_and_shows_none(admin_client):
    form = {
        "agent": make_agent().pk,
        "url": "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=k",
        "format": "wecom",
    }
    refused = admin_client.post(ADD, {**form, "new_secret": "typed"})
    assert "new_secret" in _errors(refused) and not Webhook.objects.exists()

    saved = admin_client.post(ADD, form, follow=True)
    hook = Webhook.objects.get()
    assert hook.secret and hook.secret not in saved.content.decode()
    assert "copy it now" not in saved.content.decode()


def test_switching_a_chat_webhook_to_agentry_s_format_shows_its_new_secret(admin_client):
    hook = Webhook.objects.create(agent=make_agent(), format="wecom", url="https://hooks.example.com/x", secret="s1")
    form = {"agent": hook.agent_id, "url": "https://hooks.example.com/x", "format": "agentry", "is_active": "on"}
    page = admin_client.post(f"/admin/notifications/webhook/{hook.pk}/change/", form, follow=True).content.decode()
    hook.refresh_from_db()
    assert hook.format == "agentry" and hook.secret != "s1" and hook.secret in page


def _alert_delivery(url: str) -> WebhookDelivery:
    hook = Webhook.objects.create(agent=make_agent(), url=url, secret="whsec_x")
    return WebhookDelivery.objects.create(webhook=hook, event_type="alert.firing", payload={"type": "alert.firing"})


def test_a_name_that_does_not_resolve_is_retried(settings):
    settings.AGENTRY_WEBHOOK_MAX_ATTEMPTS = 3
    delivery = _alert_delivery("https://agentry-hook.invalid/hook")

    assert webhook_attempt(delivery_id=delivery.pk) is not None  # seconds until the next attempt
    delivery.refresh_from_db()
    [attempt] = delivery.attempt_rows.all()
    assert delivery.status == "pending" and attempt.will_retry
    assert "could not be resolved" in attempt.error or "did not resolve" in attempt.error


@pytest.fixture
def receiver():
    server = WebhookReceiver()
    yield server
    server.stop()


def _failed(url: str) -> WebhookDelivery:
    delivery = _alert_delivery(url)
    WebhookDelivery.objects.filter(pk=delivery.pk).update(status="failed", attempts=5)
    delivery.attempt_rows.create(number=5, http_status=500, error="HTTP 500")
    return delivery


def _staff(*permissions: str):
    user = make_user(staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=permissions))
    return user


def test_a_failed_delivery_is_redelivered_as_a_new_attempt(
    client, settings, receiver, django_capture_on_commit_callbacks
):
    settings.AGENTRY_WEBHOOK_ALLOWLIST = ["127.0.0.1"]
    delivery = _failed(receiver.url)
    client.force_login(_staff("view_webhookdelivery", "change_webhook"))

    with django_capture_on_commit_callbacks() as sent:
        response = client.post(DELIVERIES, {"action": "redeliver", "_selected_action": [delivery.pk]}, follow=True)
    assert "1 failed deliveries queued for another attempt." in response.content.decode()
    assert len(sent) == 1  # the delivery task, enqueued after commit
    delivery.refresh_from_db()
    assert delivery.status == "pending" and delivery.finished_at is None

    assert webhook_attempt(delivery_id=delivery.pk) is None
    delivery.refresh_from_db()
    assert delivery.status == "delivered" and delivery.attempts == 6
    assert list(delivery.attempt_rows.order_by("number").values_list("number", "http_status")) == [(5, 500), (6, 200)]
    assert len(receiver.requests) == 1


def test_redelivering_takes_the_permission_to_change_webhooks(client, receiver):
    delivery = _failed(receiver.url)
    client.force_login(_staff("view_webhookdelivery"))
    assert "redeliver" not in client.get(DELIVERIES).content.decode()
    client.post(DELIVERIES, {"action": "redeliver", "_selected_action": [delivery.pk]})
    delivery.refresh_from_db()
    assert delivery.status == "failed"
