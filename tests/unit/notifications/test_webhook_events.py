"""The run events webhooks hear: a run's outcome, and an approval's life."""

from conversations.events import TERMINAL_EVENT_TYPES
from notifications.deliveries import LISTENER, WEBHOOK_EVENT_TYPES


def test_webhooks_hear_outcomes_and_approvals():
    assert WEBHOOK_EVENT_TYPES == TERMINAL_EVENT_TYPES | {
        "approval.requested",
        "approval.decided",
        "approval.expired",
        "approval.escalated",
    }
    assert LISTENER.event_types == WEBHOOK_EVENT_TYPES
