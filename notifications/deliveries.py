"""Webhook deliveries: one row per event and webhook that hears it, written in the event's
transaction and sent after its commit (notifications.sending), so an event that happened is
never left unreported and one rolled back is never reported.

A run's events reach here through the ledger's run-event listener (`LISTENER`, registered by
NotificationsConfig.ready: conversations.batch.RunEventListener), an alert's firing and
resolution through the alerts' channel (notifications.alerts).

A webhook in a chat app's format (notifications.chat_formats) gets that app's bot message
instead, and also hears approval decisions (as follow-ups to the request message: a bot cannot
edit what it sent); a webhook in Agentry's format hears what it always did. A webhook marked as
an escalation channel hears only approvals that waited past the agent's escalation time
(engine.approvals.approvals_escalate), and their decisions if it is a chat app's. A webhook in
the email format is a chat format whose "bot" is a list of addresses.
"""

from django.db import transaction
from django.db.models import Q

from conversations.batch import Is, Row, RunEventListener, either, exists
from conversations.events import TERMINAL_EVENT_TYPES, EventType
from conversations.models import Approval, Run, RunEvent
from conversations.selectors import run_final_answer
from conversations.usage import usage_values
from notifications import chat_formats
from notifications.models import ALERT_EVENT_TYPES, Webhook, WebhookDelivery
from platform_site.celery import app
from workspaces.access import of_workspace

# Sent by name: notifications.tasks wraps notifications.sending, which this module does not import.
WEBHOOK_DELIVER_TASK = "notifications.tasks.webhook_deliver_task"

# What is POSTed to webhooks: a run's outcome, and a call waiting for a person; a chat app's bot
# also hears the decision or the expiry, as a follow-up to the card it showed (chat_formats).
# An escalation goes only to the webhooks marked as escalation channels (_hears).
WEBHOOK_EVENT_TYPES = TERMINAL_EVENT_TYPES | {
    EventType.APPROVAL_REQUESTED,
    EventType.APPROVAL_DECIDED,
    EventType.APPROVAL_EXPIRED,
    EventType.APPROVAL_ESCALATED,
}


def _payload(event: RunEvent, run: Run) -> dict:
    answer = run_final_answer(run=run)
    return {
        "type": event.type,
        "created_at": event.created_at.isoformat(),
        "event": {"seq": event.seq, "payload": event.payload},
        "run": {
            "id": str(run.pk),
            "conversation": str(run.conversation_id),
            "agent": run.agent.slug,
            "status": run.status,
            "stop_reason": run.stop_reason,
            "output": answer.content if answer is not None else None,
            "usage": usage_values(run),
            "cost": str(run.cost),
        },
    }


def webhook_deliveries_create(*, event: RunEvent) -> list[WebhookDelivery]:
    """In the event's transaction: one delivery per matching webhook, sent after commit."""
    run = Run.objects.select_related("agent").get(pk=event.run_id)
    hooks = list(
        Webhook.objects.filter(agent_id=run.agent_id, is_active=True).filter(
            Q(conversation__isnull=True) | Q(conversation_id=run.conversation_id)
        )
    )
    if not hooks:
        return []
    payload = _payload(event, run)
    deliveries = [
        WebhookDelivery.objects.create(webhook=hook, run_event=event, event_type=event.type, payload=payload)
        for hook in hooks
        if _hears(hook, event.type, payload)
    ]
    _deliveries_send_after_commit(deliveries)
    return deliveries


# The ledger asks whether an active webhook hears a run (through the run's row: its agent, and
# its conversation for a webhook on one) before an event of these types, and calls
# webhook_deliveries_create with the event once its statement has run, in its transaction.
LISTENER = RunEventListener(
    event_types=WEBHOOK_EVENT_TYPES,
    hears=exists(
        Webhook,
        Is("agent_id", Row("agent_id")),
        either(Is("conversation_id", None), Is("conversation_id", Row("conversation_id"))),
        is_active=True,
    ),
    written=lambda event: webhook_deliveries_create(event=event),
)


def _hears(hook: Webhook, event_type: str, payload: dict) -> bool:
    """An escalation channel hears escalations only (a chat one also the decisions that follow
    them), and no other webhook hears them. Otherwise Agentry's format keeps its events
    (decisions are not among them); a chat format hears every event it has a message for."""
    if hook.escalation:
        return _escalation_hears(hook, event_type, payload)
    if event_type == EventType.APPROVAL_ESCALATED:
        return False
    if hook.format == Webhook.Format.AGENTRY:
        return event_type not in chat_formats.APPROVAL_SETTLED
    return chat_formats.chat_message(event_type=event_type, payload=payload) is not None


def _escalation_hears(hook: Webhook, event_type: str, payload: dict) -> bool:
    if event_type == EventType.APPROVAL_ESCALATED:
        return True
    if hook.format == Webhook.Format.AGENTRY or event_type not in chat_formats.APPROVAL_SETTLED:
        return False
    if chat_formats.chat_message(event_type=event_type, payload=payload) is None:
        return False
    # The follow-up of a card this channel showed: only for an approval that was escalated.
    approval_id = payload["event"]["payload"]["approval_id"]
    return Approval.objects.filter(pk=approval_id, escalated_at__isnull=False).exists()


def _deliveries_send_after_commit(deliveries: list[WebhookDelivery]) -> None:
    for delivery in deliveries:
        transaction.on_commit(lambda pk=str(delivery.pk): app.tasks[WEBHOOK_DELIVER_TASK].delay(pk))


def webhook_redeliver(*, delivery_ids) -> int:
    """Failed deliveries back to pending, each sent again after commit: its next attempt is
    numbered after the earlier ones and gets its own row, and a network error or a 5xx is retried
    while AGENTRY_WEBHOOK_MAX_ATTEMPTS allows (past it, the one attempt only). Returns how many;
    a delivery that is pending or delivered is left alone."""
    with transaction.atomic():
        failed = WebhookDelivery.objects.filter(pk__in=delivery_ids, status=WebhookDelivery.Status.FAILED)
        deliveries = list(failed.select_for_update().only("pk"))
        WebhookDelivery.objects.filter(pk__in=[d.pk for d in deliveries]).update(
            status=WebhookDelivery.Status.PENDING, finished_at=None
        )
        _deliveries_send_after_commit(deliveries)
    return len(deliveries)


def webhook_alert_deliveries_create(
    *, event_type: str, payload: dict, agent_id: int | None, workspace_id: int
) -> list[WebhookDelivery]:
    """In the alert's transaction: one delivery per active webhook subscribed to alerts, sent
    after commit. An alert on one agent goes to that agent's subscribed webhooks; an alert on a
    model config or on everything concerns every agent of the rule's workspace, so it goes to
    all of that workspace's subscribed webhooks, never another's."""
    if event_type not in ALERT_EVENT_TYPES:
        raise ValueError(f"not an alert event type: {event_type}")
    hooks = of_workspace(Webhook.objects.filter(is_active=True, receives_alerts=True), workspace_id)
    if agent_id is not None:
        hooks = hooks.filter(agent_id=agent_id)
    deliveries = [
        WebhookDelivery.objects.create(webhook=hook, event_type=event_type, payload=payload) for hook in hooks
    ]
    _deliveries_send_after_commit(deliveries)
    return deliveries
