"""The alerts' channels: a rule's firing and resolution posted to the webhooks subscribed to
alerts (deliveries written in the firing's transaction, sent after its commit like a run's) and
mailed to the rule's addresses after its commit. Registered with alerts.services by
NotificationsConfig.ready.
"""

import logging

from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.utils.translation import gettext as _

from alerts.models import CONTROL_CHARACTERS, AlertFiring, AlertRule
from alerts.selectors import number_text
from alerts.services import FIRING
from notifications.deliveries import webhook_alert_deliveries_create

log = logging.getLogger(__name__)


def _payload(firing: AlertFiring, event_type: str) -> dict:
    rule = firing.rule
    return {
        "type": event_type,
        "created_at": (firing.resolved_at or firing.started_at).isoformat(),
        "alert": {
            "firing_id": firing.pk,
            "rule": {
                "id": rule.pk,
                "name": rule.name,
                "kind": rule.kind,
                "window": rule.window if rule.kind in AlertRule.WINDOWED else None,
                "agent": rule.agent.slug if rule.agent_id else None,
                "model_config": rule.model_config.name if rule.model_config_id else None,
            },
            "value": number_text(firing.value),
            "threshold": number_text(firing.threshold),
            "resolved_value": None if firing.resolved_value is None else number_text(firing.resolved_value),
            "summary": firing.summary,
            "started_at": firing.started_at.isoformat(),
            "resolved_at": firing.resolved_at.isoformat() if firing.resolved_at else None,
        },
    }


def header_text(text: str) -> str:
    """Text fit for an email header: every control character or line separator becomes a space.
    A rule named before names were checked may hold a line break, and Django refuses such a
    header (BadHeaderError), which would drop every email of the rule."""
    return " ".join(CONTROL_CHARACTERS.sub(" ", text).split())


def _email(*, recipients: list[str], subject: str, body: str) -> None:
    """Sent after commit by Django's email backend; a mail server that is down is logged, not
    raised: the firing is recorded and shown whatever happens to its email."""
    try:
        send_mail(header_text(subject), body, settings.DEFAULT_FROM_EMAIL, recipients)
    except Exception:
        log.exception("alert email to %s failed", ", ".join(recipients))


def alert_notify(*, firing: AlertFiring, event_type: str) -> None:
    """Tell the firing's rule's webhooks and addresses of a firing or a resolution."""
    rule = firing.rule
    if rule.send_webhooks:
        webhook_alert_deliveries_create(
            event_type=event_type,
            payload=_payload(firing, event_type),
            agent_id=rule.agent_id,
            workspace_id=rule.workspace_id,
        )
    recipients = rule.recipients
    if not recipients:
        return
    if event_type == FIRING:
        subject = _("[Agentry alert] %(rule)s is firing") % {"rule": rule.name}
    else:
        subject = _("[Agentry alert] %(rule)s resolved") % {"rule": rule.name}
    body = "\n".join(
        [
            firing.summary,
            _("Scope: %(scope)s") % {"scope": rule.scope_text()},
            _("Since: %(at)s") % {"at": firing.started_at.isoformat()},
            *([_("Resolved: %(at)s") % {"at": firing.resolved_at.isoformat()}] if firing.resolved_at else []),
        ]
    )
    transaction.on_commit(lambda: _email(recipients=recipients, subject=subject, body=body))
