"""Notifications' records: where an agent's run events and the alerts are sent (Webhook), one
delivery per event and webhook, one attempt row per try.

The tables keep the names they had in conversations, where these models lived first: the move
changed the models' app, not the rows (migration 0001 takes them over as they are).
"""

import uuid

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from agents.models import email_list, validate_email_list
from platform_site.crypto import EncryptedTextField
from workspaces.defaults import InWorkspace
from workspaces.references import references_check


class Webhook(InWorkspace):
    """Where an agent's run outcomes and approval requests are POSTed, signed with the secret."""

    agent = models.ForeignKey(
        "agents.Agent", on_delete=models.CASCADE, related_name="webhooks", verbose_name=_("agent")
    )
    conversation = models.ForeignKey(
        "conversations.Conversation",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="webhooks",
        help_text=_("Only this conversation's runs. Empty: every run of the agent."),
        verbose_name=_("conversation"),
    )

    class Format(models.TextChoices):
        AGENTRY = "agentry", _("Agentry (signed JSON)")
        FEISHU = "feishu", _("Feishu / Lark custom bot")
        DINGTALK = "dingtalk", _("DingTalk custom robot")
        WECOM = "wecom", _("WeCom group robot")
        SLACK = "slack", _("Slack incoming webhook")
        EMAIL = "email", _("Email (plain text)")

    # Not used by the email format, which sends to email_to instead.
    url = models.URLField(max_length=500, blank=True, verbose_name=_("URL"))
    email_to = models.TextField(
        blank=True,
        default="",
        validators=[validate_email_list],
        help_text=_("Email format only: the addresses to send to, one per line or separated by commas."),
        verbose_name=_("email to"),
    )
    format = models.CharField(
        max_length=16,
        choices=Format.choices,
        default=Format.AGENTRY,
        help_text=_(
            "Agentry: the signed JSON described in the docs. A chat app: the message that app's bot "
            "documents, posted to its own host."
        ),
        verbose_name=_("format"),
    )
    # Agentry's own signature key (generated). A chat bot's signing key is the one the chat app
    # shows, and many bots have none: kept apart so that neither is mistaken for the other.
    secret = EncryptedTextField(verbose_name=_("secret"))
    bot_secret = EncryptedTextField(
        blank=True,
        default="",
        help_text=_("Feishu/Lark and DingTalk only: the bot's signing secret. Empty: messages are not signed."),
        verbose_name=_("bot signing secret"),
    )
    is_active = models.BooleanField(default=True, verbose_name=_("is active"))
    # Alerts are operators' events, not the agent's: a receiver opts in to them.
    receives_alerts = models.BooleanField(
        default=False,
        help_text=_(
            "Also post alert firings and resolutions: those of rules on this agent and of rules on "
            "model configs or on everything."
        ),
        verbose_name=_("receives alerts"),
    )
    # "The next channel": another group or chat than the one asked first, told only when nobody
    # decided in time (Agent.approval_escalate_after_minutes).
    escalation = models.BooleanField(
        default=False,
        help_text=_(
            "Escalation channel: hears only approvals that waited past the agent's escalation time "
            "(and their decisions), not the ordinary requests."
        ),
        verbose_name=_("escalation channel"),
    )
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        db_table = "conversations_webhook"
        verbose_name = _("webhook")
        verbose_name_plural = _("webhooks")

    def __str__(self):
        return f"{self.agent} → {self.target}"

    def clean(self):
        references_check(self)

    @property
    def recipients(self) -> list[str]:
        return email_list(self.email_to)

    @property
    def target(self) -> str:
        """Where deliveries go: the URL, or the addresses of an email webhook."""
        return ", ".join(self.recipients) if self.format == self.Format.EMAIL else self.url

    def clean_fields(self, exclude=None):
        # Here rather than in clean(), which runs even when a form has already refused the field
        # (and left it empty on the instance): the form's own message would then get a second one.
        super().clean_fields(exclude=exclude)
        exclude = exclude or ()
        if self.format == self.Format.EMAIL:
            if not self.recipients and "email_to" not in exclude:
                raise ValidationError({"email_to": _("An email webhook needs at least one address.")})
        elif not self.url and "url" not in exclude:
            raise ValidationError({"url": _("This format posts to a URL: enter one.")})


ALERT_EVENT_TYPES = ("alert.firing", "alert.resolved")


class WebhookDelivery(models.Model):
    """One event for one webhook; written with the event, so no commit loses a delivery.
    A run's event (run_event set) or an alert's firing or resolution (no run event)."""

    class Status(models.TextChoices):
        PENDING = "pending", _("Pending")
        DELIVERED = "delivered", _("Delivered")
        FAILED = "failed", _("Failed")

    # Its workspace is its parent's (workspaces.access.in_workspace).
    workspace_path = "webhook__workspace"
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries", verbose_name=_("webhook"))
    run_event = models.ForeignKey(
        "conversations.RunEvent",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("run event"),
    )
    event_type = models.CharField(max_length=40, verbose_name=_("event type"))
    payload = models.JSONField(verbose_name=_("payload"))
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING, verbose_name=_("status"))
    attempts = models.PositiveSmallIntegerField(default=0, verbose_name=_("attempts"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    finished_at = models.DateTimeField(null=True, blank=True, verbose_name=_("finished at"))

    class Meta:
        db_table = "conversations_webhookdelivery"
        verbose_name = _("webhook delivery")
        verbose_name_plural = _("webhook deliveries")
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["webhook", "run_event"], name="webhook_delivery_event_unique"),
            # Only alerts are delivered without a run event.
            models.CheckConstraint(
                condition=Q(run_event__isnull=False) | Q(event_type__in=ALERT_EVENT_TYPES),
                name="webhook_delivery_run_event_or_alert",
            ),
        ]

    def __str__(self):
        return f"{self.event_type} → {self.webhook.target} ({self.get_status_display().lower()})"


class WebhookAttempt(models.Model):
    # Its workspace is its parent's (workspaces.access.in_workspace).
    workspace_path = "delivery__webhook__workspace"
    delivery = models.ForeignKey(
        WebhookDelivery, on_delete=models.CASCADE, related_name="attempt_rows", verbose_name=_("delivery")
    )
    number = models.PositiveSmallIntegerField(verbose_name=_("number"))
    http_status = models.PositiveSmallIntegerField(null=True, blank=True, verbose_name=_("HTTP status"))
    response_body = models.TextField(blank=True, default="", verbose_name=_("response body"))
    error = models.TextField(blank=True, default="", verbose_name=_("error"))
    duration_ms = models.PositiveIntegerField(default=0, verbose_name=_("duration ms"))
    will_retry = models.BooleanField(default=False, verbose_name=_("will retry"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        db_table = "conversations_webhookattempt"
        verbose_name = _("webhook attempt")
        verbose_name_plural = _("webhook attempts")
        ordering = ["delivery", "number"]
        constraints = [
            models.UniqueConstraint(fields=["delivery", "number"], name="webhook_attempt_number_unique"),
        ]

    def __str__(self):
        return f"attempt {self.number} ({self.http_status or self.error})"
