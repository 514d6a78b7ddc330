"""Evaluating the alert rules: open a firing when a rule's condition starts to hold, resolve it
when the condition clears, and tell the rule's webhooks and addresses both times.

Safe to run twice at once (two beats, a slow evaluation overlapping the next): at most one
firing per rule is open, by a partial unique constraint; the evaluation that loses the insert
drops its firing with its notifications, and resolving is a conditional update that only one
evaluation wins. Notifications are written in the same transaction as the firing (webhook
deliveries) or sent after its commit (email), so a rolled-back firing tells no one.
"""

import logging
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from alerts.models import CONTROL_CHARACTERS, AlertFiring, AlertRule
from alerts.selectors import Measurement, alert_rule_measure, number_text
from conversations.webhooks import webhook_alert_deliveries_create

log = logging.getLogger(__name__)

FIRING, RESOLVED = "alert.firing", "alert.resolved"


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


def _notify(firing: AlertFiring, event_type: str) -> None:
    rule = firing.rule
    if rule.send_webhooks:
        webhook_alert_deliveries_create(
            event_type=event_type, payload=_payload(firing, event_type), agent_id=rule.agent_id
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


def alert_firing_open(*, rule: AlertRule, measurement: Measurement, now: datetime) -> AlertFiring | None:
    """Open the rule's firing and notify; None when another evaluation has one open already."""
    try:
        with transaction.atomic():
            firing = AlertFiring.objects.create(
                rule=rule,
                value=measurement.value,
                threshold=rule.threshold,
                summary=measurement.summary[:500],
                started_at=now,
            )
            _notify(firing, FIRING)
    except IntegrityError:
        return None
    return firing


def alert_firing_resolve(*, firing: AlertFiring, value: Decimal | None, now: datetime) -> bool:
    """Resolve an open firing and notify; False when another evaluation resolved it first."""
    with transaction.atomic():
        if not AlertFiring.objects.filter(pk=firing.pk, resolved_at__isnull=True).update(
            resolved_at=now, resolved_value=value
        ):
            return False
        firing.resolved_at, firing.resolved_value = now, value
        _notify(firing, RESOLVED)
    return True


def alert_rules_evaluate(*, now: datetime | None = None) -> dict[str, int]:
    """Measure every enabled rule once; a disabled rule's open firing is resolved unmeasured."""
    now = now or timezone.now()
    open_by_rule = {
        firing.rule_id: firing
        for firing in AlertFiring.objects.filter(resolved_at__isnull=True).select_related(
            "rule__agent", "rule__model_config"
        )
    }
    counts = {"evaluated": 0, "fired": 0, "resolved": 0}
    for rule in AlertRule.objects.filter(enabled=True).select_related("agent", "model_config"):
        counts["evaluated"] += 1
        measurement = alert_rule_measure(rule=rule, now=now)
        firing = open_by_rule.pop(rule.pk, None)
        if measurement.holds and firing is None:
            counts["fired"] += alert_firing_open(rule=rule, measurement=measurement, now=now) is not None
        elif not measurement.holds and firing is not None:
            counts["resolved"] += alert_firing_resolve(firing=firing, value=measurement.value, now=now)
    for firing in open_by_rule.values():
        counts["resolved"] += alert_firing_resolve(firing=firing, value=None, now=now)
    return counts
