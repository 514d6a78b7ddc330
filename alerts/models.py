"""Alert rules set by operators, and the firings that evaluating them opens and resolves."""

import re

from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from workspaces.defaults import InWorkspace
from workspaces.names import name_unique_in_workspace
from workspaces.references import references_check

# Ages (stuck runs, waiting approvals) are thresholds in minutes, up to a week.
MAX_AGE_MINUTES = 7 * 24 * 60

# C0 and C1 controls (CR, LF, tab, NUL…) and the Unicode line and paragraph separators: text
# that an email header, a log line or a metrics label would split or break on.
CONTROL_CHARACTERS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def validate_no_control_characters(value: str) -> None:
    if CONTROL_CHARACTERS.search(value):
        raise ValidationError(_("Must not contain line breaks or other control characters."), code="control_characters")


class AlertRule(InWorkspace):
    class Kind(models.TextChoices):
        TOKENS = "tokens", _("Tokens per window")
        COST = "cost", _("Cost per window")
        FAILURE_RATE = "failure_rate", _("Failure rate over a window (%)")
        STUCK_RUNS = "stuck_runs", _("Runs not finished after N minutes")
        APPROVAL_AGE = "approval_age", _("Oldest pending approval older than N minutes")
        NEGATIVE_FEEDBACK = "negative_feedback", _("Negative feedback rate over a window (%)")
        EXTRACTION_RATE = "extraction_rate", _("Memory extraction success rate below the threshold over a window (%)")
        ONLINE_SCORE = "online_score", _("Average online evaluation score below the threshold over a window (0 to 1)")

    class Window(models.TextChoices):
        HOUR = "hour", _("Last hour")
        DAY = "day", _("Last 24 hours")

    # Kinds measured over a sliding window; the other two look at what is open now.
    WINDOWED = (
        Kind.TOKENS,
        Kind.COST,
        Kind.FAILURE_RATE,
        Kind.NEGATIVE_FEEDBACK,
        Kind.EXTRACTION_RATE,
        Kind.ONLINE_SCORE,
    )
    # Runs and approvals belong to agents, not to model configs.
    AGENT_ONLY = (Kind.STUCK_RUNS, Kind.APPROVAL_AGE)

    # Unique: it names the rule in emails, webhooks and the metrics' `rule` label.
    name = models.CharField(max_length=200, validators=[validate_no_control_characters], verbose_name=_("name"))
    kind = models.CharField(max_length=20, choices=Kind.choices, verbose_name=_("kind"))
    agent = models.ForeignKey(
        "agents.Agent",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text=_("Only this agent. Leave both agent and model config empty to watch everything."),
        verbose_name=_("agent"),
    )
    model_config = models.ForeignKey(
        "agents.ModelConfig",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text=_("Only the calls of this model config (tokens, cost, failure rate of model calls)."),
        verbose_name=_("model config"),
    )
    window = models.CharField(max_length=8, choices=Window.choices, default=Window.HOUR, verbose_name=_("window"))
    threshold = models.DecimalField(
        max_digits=20,
        decimal_places=8,
        help_text=_(
            "Tokens: a whole number. Cost: an amount in the prices' currency. Failure rate and negative "
            "feedback rate: a percentage above 0, at most 100. Memory extraction success rate: fires below this "
            "percentage (above 0, at most 100). Online score: fires below this average score (above 0, at most 1). "
            "Stuck runs and approval age: whole minutes."
        ),
        verbose_name=_("threshold"),
    )
    min_runs = models.PositiveIntegerField(
        default=10,
        help_text=_(
            "Rates only: fewer runs (or model calls, feedback posts, memory extraction calls, online scores) than "
            "this in the window never fire."
        ),
        verbose_name=_("minimum runs"),
    )
    enabled = models.BooleanField(default=True, verbose_name=_("enabled"))
    email_to = models.TextField(
        blank=True,
        default="",
        help_text=_("Addresses to email on firing and resolution, one per line or separated by commas."),
        verbose_name=_("email to"),
    )
    send_webhooks = models.BooleanField(
        default=True,
        help_text=_("Post firings and resolutions to the active webhooks subscribed to alerts."),
        verbose_name=_("send webhooks"),
    )
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        verbose_name = _("alert rule")
        verbose_name_plural = _("alert rules")
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(threshold__gt=0), name="alert_rule_threshold_positive"),
            models.CheckConstraint(
                condition=Q(agent__isnull=True) | Q(model_config__isnull=True), name="alert_rule_one_scope"
            ),
            name_unique_in_workspace("alert_rule_name_per_workspace"),
        ]

    def __str__(self):
        return self.name

    @property
    def recipients(self) -> list[str]:
        return [address for address in self.email_to.replace(",", "\n").split() if address]

    def scope_text(self) -> str:
        if self.agent_id:
            return _("agent %(name)s") % {"name": self.agent}
        if self.model_config_id:
            return _("model config %(name)s") % {"name": self.model_config}
        return str(_("everything"))

    def clean(self):
        references_check(self)
        errors = {}
        if self.agent_id and self.model_config_id:
            errors["model_config"] = _("Choose an agent or a model config, not both.")
        elif self.kind in self.AGENT_ONLY and self.model_config_id:
            errors["model_config"] = _("Runs and approvals are watched per agent or for everything.")
        elif self.kind == self.Kind.NEGATIVE_FEEDBACK and self.model_config_id:
            errors["model_config"] = _("Feedback is on runs: watch it per agent or for everything.")
        elif self.kind == self.Kind.EXTRACTION_RATE and self.model_config_id:
            errors["model_config"] = _("Memory is an agent's: watch its extractions per agent or for everything.")
        elif self.kind == self.Kind.ONLINE_SCORE and self.model_config_id:
            errors["model_config"] = _("Online scores are on runs: watch them per agent or for everything.")
        threshold = self.threshold
        if threshold is not None:
            whole = threshold == threshold.to_integral_value()
            if self.kind == self.Kind.TOKENS and not (threshold >= 1 and whole):
                errors["threshold"] = _("A token threshold is a whole number of at least 1.")
            elif self.kind == self.Kind.COST and threshold <= 0:
                errors["threshold"] = _("A cost threshold is above 0.")
            elif self.kind == self.Kind.FAILURE_RATE and not 0 < threshold <= 100:
                errors["threshold"] = _("A failure rate is a percentage above 0 and at most 100.")
            elif self.kind == self.Kind.NEGATIVE_FEEDBACK and not 0 < threshold <= 100:
                errors["threshold"] = _("A negative feedback rate is a percentage above 0 and at most 100.")
            elif self.kind == self.Kind.EXTRACTION_RATE and not 0 < threshold <= 100:
                errors["threshold"] = _("A success rate is a percentage above 0 and at most 100.")
            elif self.kind == self.Kind.ONLINE_SCORE and not 0 < threshold <= 1:
                errors["threshold"] = _("An online score threshold is above 0 and at most 1.")
            elif self.kind in self.AGENT_ONLY and not (whole and 1 <= threshold <= MAX_AGE_MINUTES):
                errors["threshold"] = _("An age is a whole number of minutes from 1 to %(max)d.") % {
                    "max": MAX_AGE_MINUTES
                }
        if self.kind == self.Kind.FAILURE_RATE and self.min_runs < 1:
            errors["min_runs"] = _("At least one run is needed to measure a failure rate.")
        elif self.kind == self.Kind.NEGATIVE_FEEDBACK and self.min_runs < 1:
            errors["min_runs"] = _("At least one feedback post is needed to measure a negative feedback rate.")
        elif self.kind == self.Kind.EXTRACTION_RATE and self.min_runs < 1:
            errors["min_runs"] = _("At least one extraction call is needed to measure a success rate.")
        elif self.kind == self.Kind.ONLINE_SCORE and self.min_runs < 1:
            errors["min_runs"] = _("At least one score is needed to measure an average score.")
        for address in self.recipients:
            try:
                validate_email(address)
            except ValidationError:
                errors["email_to"] = _("%(address)s is not an email address.") % {"address": address[:100]}
                break
        if errors:
            raise ValidationError(errors)


class AlertFiring(models.Model):
    """One period in which a rule's condition held: opened by an evaluation that found it true,
    resolved by the first that found it false. At most one is open per rule (a constraint)."""

    # Its workspace is its parent's (workspaces.access.in_workspace).
    workspace_path = "rule__workspace"
    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="firings", verbose_name=_("rule"))
    value = models.DecimalField(max_digits=20, decimal_places=8, verbose_name=_("value"))
    threshold = models.DecimalField(max_digits=20, decimal_places=8, verbose_name=_("threshold"))
    summary = models.CharField(max_length=500, verbose_name=_("summary"))
    started_at = models.DateTimeField(default=timezone.now, verbose_name=_("started at"))
    resolved_at = models.DateTimeField(null=True, blank=True, verbose_name=_("resolved at"))
    # Empty when the rule was disabled while firing (nothing was measured).
    resolved_value = models.DecimalField(
        max_digits=20, decimal_places=8, null=True, blank=True, verbose_name=_("value at resolution")
    )

    class Meta:
        verbose_name = _("alert firing")
        verbose_name_plural = _("alert firings")
        ordering = ["-started_at"]
        constraints = [
            # Two evaluations racing on one rule: the second insert fails and is dropped.
            models.UniqueConstraint(
                fields=["rule"], condition=Q(resolved_at__isnull=True), name="alert_firing_one_open_per_rule"
            ),
        ]
        indexes = [models.Index(fields=["started_at"], name="alert_firing_started_idx")]

    def __str__(self):
        return self.summary

    @property
    def is_open(self) -> bool:
        return self.resolved_at is None
