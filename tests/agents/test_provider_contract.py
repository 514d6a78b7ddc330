"""Both provider adapters satisfy the Provider protocol, and one set of HTTP statuses decides
what is retried, for model calls and webhook deliveries alike."""

import pytest

from notifications.models import Webhook, WebhookDelivery
from notifications.sending import _send
from tests.support.api_server import WebhookReceiver
from tests.unit.agents.test_provider_contract import NOT_RETRIED, RETRIED


@pytest.mark.django_db
def test_a_webhook_receiver_status_is_retried_exactly_when_it_is_in_the_set():
    receiver = WebhookReceiver()
    try:
        statuses = sorted(RETRIED | NOT_RETRIED)
        receiver.statuses = list(statuses)
        delivery = WebhookDelivery(webhook=Webhook(url=receiver.url, secret="whsec_test"))
        for status in statuses:
            http_status, _, error, retryable, _ = _send(delivery, b"{}")
            assert (http_status, error, retryable) == (status, f"HTTP {status}", status in RETRIED)
    finally:
        receiver.stop()
