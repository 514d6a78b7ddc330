"""Evaluating the alert rules: open a firing when a rule's condition starts to hold, resolve it
when the condition clears, and tell the rule's channels both times (notifications.alerts: its
webhooks and addresses).

Safe to run twice at once (two beats, a slow evaluation overlapping the next): at most one
firing per rule is open, by a partial unique constraint; the evaluation that loses the insert
drops its firing with its notifications, and resolving is a conditional update that only one
evaluation wins. The channels are told in the firing's transaction (and write or send after its
commit), so a rolled-back firing tells no one.
"""

from collections.abc import Callable
from datetime import datetime
from decimal import Decimal

from django.db import IntegrityError, transaction
from django.utils import timezone

from alerts.models import AlertFiring, AlertRule
from alerts.selectors import Measurement, alert_rule_measure

FIRING, RESOLVED = "alert.firing", "alert.resolved"


# The channels that tell a rule's webhooks and addresses, registered at start-up by the app
# above this one that sends (notifications, from NotificationsConfig.ready): this module names
# none of them. Each is called in the firing's (or resolution's) transaction.
_channels: list[Callable[..., None]] = []


def alert_channel_register(channel: Callable[..., None]) -> None:
    """Call `channel(firing=..., event_type=FIRING or RESOLVED)` on every firing and resolution;
    registering the same again is a no-op (ready() may run more than once in a process)."""
    if channel not in _channels:
        _channels.append(channel)


def _notify(firing: AlertFiring, event_type: str) -> None:
    for channel in _channels:
        channel(firing=firing, event_type=event_type)


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
