"""Webhooks moved from conversations to notifications with their tables unrenamed: an installation
upgraded from before the move keeps its webhooks, deliveries and attempts, and the permissions
granted on them follow the models to their new app label (and back, migrating backwards)."""

import pytest
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command

from notifications.models import Webhook, WebhookAttempt, WebhookDelivery
from tests.support.factories import make_agent


def _labels() -> set[str]:
    ContentType.objects.clear_cache()
    return set(ContentType.objects.filter(model="webhook").values_list("app_label", flat=True))


@pytest.mark.django_db(transaction=True)
def test_an_upgraded_installation_keeps_its_webhooks_and_their_permissions():
    hook = Webhook.objects.create(agent=make_agent(), url="https://hooks.example.com/in", secret="s" * 32)
    delivery = WebhookDelivery.objects.create(webhook=hook, event_type="alert.firing", payload={"a": 1})
    WebhookAttempt.objects.create(delivery=delivery, number=1, http_status=200)
    group = Group.objects.create(name="Webhook keepers")
    group.permissions.add(Permission.objects.get(content_type__app_label="notifications", codename="change_webhook"))

    call_command("migrate", "conversations", "0026", verbosity=0)  # before the move
    try:
        assert _labels() == {"conversations"}
        assert group.permissions.get().content_type.app_label == "conversations"
    finally:
        call_command("migrate", verbosity=0)

    assert _labels() == {"notifications"}
    assert group.permissions.get().codename == "change_webhook"
    assert group.permissions.get().content_type.app_label == "notifications"
    assert WebhookAttempt.objects.get(delivery__webhook=hook).delivery.payload == {"a": 1}
    assert Webhook.objects.get().secret == "s" * 32
