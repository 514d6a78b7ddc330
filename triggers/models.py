"""What starts a run without an application posting a message: an agent's schedules (fired by
beat through a worker) and inbound hooks (a signed request from another system).

Every fire and every delivery is a row, linked to the run it started (or saying why it started
none), so a run's trigger is read from the ledger like everything else about it, and a
delivery id is unique per hook in the database: a retried delivery can never start a second run.
"""

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from platform_site.crypto import EncryptedTextField
from workspaces.defaults import InWorkspace
from workspaces.references import references_check


class Schedule(InWorkspace):
    class Kind(models.TextChoices):
        CRON = "cron", _("Cron expression")
        INTERVAL = "interval", _("Interval")

    class ConversationPolicy(models.TextChoices):
        NEW = "new", _("A new conversation each time")
        SAME = "same", _("One running conversation")

    class Overlap(models.TextChoices):
        SKIP = "skip", _("Skip this fire")
        QUEUE = "queue", _("Queue it after the running one")
        ALLOW = "allow", _("Start it anyway")

    class Missed(models.TextChoices):
        ONCE = "once", _("Run once for the fires missed")
        SKIP = "skip", _("Skip the fires missed")

    agent = models.ForeignKey(
        "agents.Agent", on_delete=models.CASCADE, related_name="schedules", verbose_name=_("agent")
    )
    name = models.CharField(_("name"), max_length=200)
    enabled = models.BooleanField(_("enabled"), default=True, help_text=_("A paused schedule does not fire."))
    kind = models.CharField(_("kind"), max_length=16, choices=Kind.choices, default=Kind.CRON)
    cron = models.CharField(
        _("cron expression"), max_length=120, blank=True, help_text=_("Five fields: minute hour day month weekday.")
    )
    interval_seconds = models.PositiveIntegerField(_("interval (seconds)"), null=True, blank=True)
    time_zone = models.CharField(_("time zone"), max_length=64, default="Asia/Shanghai")
    message = models.TextField(_("message"), help_text=_("A template over the fire time and the schedule's variables."))
    variables = models.JSONField(_("variables"), default=dict, blank=True)
    end_user = models.CharField(_("end user"), max_length=200, blank=True, default="")
    conversation_policy = models.CharField(
        _("conversation"), max_length=16, choices=ConversationPolicy.choices, default=ConversationPolicy.NEW
    )
    # The running conversation of the SAME policy, made by the first fire.
    conversation = models.ForeignKey(
        "conversations.Conversation",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("running conversation"),
    )
    overlap = models.CharField(
        _("while the previous run is going"), max_length=16, choices=Overlap.choices, default=Overlap.SKIP
    )
    missed = models.CharField(_("after downtime"), max_length=16, choices=Missed.choices, default=Missed.ONCE)
    # Who the runs' conversations belong to (what the API shows them to); who made the schedule.
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("owner"),
    )
    next_fire_at = models.DateTimeField(_("next fire"), null=True, blank=True)
    last_fired_at = models.DateTimeField(_("last fired"), null=True, blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("schedule")
        verbose_name_plural = _("schedules")
        ordering = ["agent", "name"]
        indexes = [
            # Beat's tick reads the enabled schedules that are due, and only them.
            models.Index(fields=["next_fire_at"], condition=Q(enabled=True), name="schedule_due_idx"),
        ]

    def __str__(self):
        return self.name

    def clean(self):
        references_check(self)


class ScheduleFire(models.Model):
    """One fire of a schedule: the run it started, or why it started none."""

    class Outcome(models.TextChoices):
        STARTED = "started", _("Started a run")
        SKIPPED_RUNNING = "skipped_running", _("Skipped: the previous run was still going")
        SKIPPED_MISSED = "skipped_missed", _("Skipped: missed while the scheduler was down")
        SKIPPED_LIMITED = "skipped_limited", _("Skipped: the agent's limit per end user was reached")
        FAILED = "failed", _("Failed to start")

    # Its workspace is its parent's (workspaces.access.in_workspace).
    workspace_path = "schedule__workspace"
    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="fires", verbose_name=_("schedule"))
    fire_at = models.DateTimeField(_("fire time"))
    # How many fire times this fire stands for (after downtime, the fires missed run once).
    covers = models.PositiveIntegerField(_("fires covered"), default=1)
    outcome = models.CharField(_("outcome"), max_length=32, choices=Outcome.choices)
    run = models.OneToOneField(
        "conversations.Run",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="schedule_fire",
        verbose_name=_("run"),
    )
    detail = models.TextField(_("detail"), blank=True, default="")
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("schedule fire")
        verbose_name_plural = _("schedule fires")
        ordering = ["-fire_at"]
        constraints = [
            # A fire time fires once, whichever beat tick or worker gets there first.
            models.UniqueConstraint(fields=["schedule", "fire_at"], name="schedule_fire_once"),
        ]


class Hook(InWorkspace):
    """An agent's inbound hook: POST /api/v1/hooks/<id>/ with a signed JSON body starts a run."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="hooks", verbose_name=_("agent"))
    name = models.CharField(_("name"), max_length=200)
    enabled = models.BooleanField(_("enabled"), default=True)
    secret = EncryptedTextField(_("secret"))
    message = models.TextField(_("message"), help_text=_("A template over the request's JSON payload."))
    end_user = models.CharField(
        _("end user"), max_length=200, blank=True, default="", help_text=_("A template over the payload, or fixed.")
    )
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("owner"),
    )
    # Whoever holds the secret names any end user, so their memories are the hook's own
    # (memory.channels) unless the operator joins them to the owner's other channels.
    memory_shared = models.BooleanField(
        _("shares end users' memory with the owner's other channels"),
        default=False,
        help_text=_(
            "Off: what the agent remembers of an end user through this hook is kept for this hook only. "
            "On: it is shared with the owner's API and the widgets and hooks that share theirs, so trust "
            "the sender's end user ids as much as your own. Applies to conversations started after the change."
        ),
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("hook")
        verbose_name_plural = _("hooks")
        ordering = ["agent", "name"]

    def __str__(self):
        return self.name

    def clean(self):
        references_check(self)


class HookDelivery(models.Model):
    """One accepted request to a hook, under the delivery id its sender gave."""

    # Its workspace is its parent's (workspaces.access.in_workspace).
    workspace_path = "hook__workspace"
    hook = models.ForeignKey(Hook, on_delete=models.CASCADE, related_name="deliveries", verbose_name=_("hook"))
    delivery_id = models.CharField(_("delivery id"), max_length=200)
    # The request's signature (hex HMAC over its timestamp and body): the delivery id is not
    # signed, so a request captured and sent again within the tolerance under another id is
    # still the same signed request, and is refused by it.
    signature = models.CharField(_("signature"), max_length=64)
    run = models.OneToOneField(
        "conversations.Run",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="hook_delivery",
        verbose_name=_("run"),
    )
    received_at = models.DateTimeField(_("received at"), auto_now_add=True)

    class Meta:
        verbose_name = _("hook delivery")
        verbose_name_plural = _("hook deliveries")
        ordering = ["-received_at"]
        constraints = [
            models.UniqueConstraint(fields=["hook", "delivery_id"], name="hook_delivery_once"),
            models.UniqueConstraint(fields=["hook", "signature"], name="hook_request_once"),
        ]
