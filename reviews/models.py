"""Review queues (docs/quality.md): people read production runs picked by filters, label them
against a rubric, give a verdict and a corrected answer, and turn a bad answer into an eval case.

A queue is a workspace's configuration; its items are the runs it picked (reviews.filling), one
per run; a label is one reviewer's judgement of one item. An item is held by one reviewer at a
time (reviews.services.review_next) and is done once `reviews_per_run` different reviewers have
labelled it; two labels of one item are what the queue's agreement is measured on."""

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils.translation import gettext_lazy as _

from workspaces.defaults import InWorkspace
from workspaces.names import name_unique_in_workspace
from workspaces.references import references_check

MAX_RUBRIC_LABELS = 20
MAX_CHOICES = 20


def rubric_check(rubric) -> None:
    """[{"name": text, "choices": [text, …]}, …]: the labels a reviewer picks, each from its choices."""
    message = _('The rubric is a list of {"name": "…", "choices": ["…", …]}, names unique, at least two choices each.')
    if not isinstance(rubric, list) or len(rubric) > MAX_RUBRIC_LABELS:
        raise ValidationError(message)
    names = set()
    for label in rubric:
        if not isinstance(label, dict) or set(label) != {"name", "choices"}:
            raise ValidationError(message)
        name, choices = label["name"], label["choices"]
        if not isinstance(name, str) or not name.strip() or len(name) > 100 or name in names:
            raise ValidationError(message)
        if (
            not isinstance(choices, list)
            or not 2 <= len(choices) <= MAX_CHOICES
            or not all(isinstance(c, str) and c.strip() and len(c) <= 100 for c in choices)
            or len(set(choices)) != len(choices)
        ):
            raise ValidationError(message)
        names.add(name)


class ReviewQueue(InWorkspace):
    """Which runs people review, and how. A finished production run (not an evaluation's, a
    fork's or the playground's) of the queue's agent (or of any agent of the workspace) enters
    when it matches any of the filters switched on."""

    name = models.CharField(max_length=100, verbose_name=_("name"))
    agent = models.ForeignKey(
        "agents.Agent",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("agent"),
        help_text=_("Leave empty for every agent of the workspace."),
    )
    on_negative_feedback = models.BooleanField(
        default=True, verbose_name=_("negative feedback"), help_text=_("Runs an end user rated not helpful.")
    )
    score_below = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0), MaxValueValidator(1)],
        verbose_name=_("online score below"),
        help_text=_("Runs an online evaluator scored under this (0 to 1). Leave empty for none."),
    )
    score_evaluator = models.ForeignKey(
        "evals.OnlineEvaluator",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("online evaluator"),
        help_text=_("Only this evaluator's scores. Leave empty for every evaluator's."),
    )
    on_guardrail_hit = models.BooleanField(
        default=False, verbose_name=_("guardrail hit"), help_text=_("Runs a guardrail rule matched.")
    )
    on_tool_error = models.BooleanField(
        default=False, verbose_name=_("tool error"), help_text=_("Runs with a tool call that ended in an error.")
    )
    sample_rate = models.FloatField(
        default=0,
        validators=[MinValueValidator(0), MaxValueValidator(1)],
        verbose_name=_("sample rate"),
        help_text=_("The share of completed runs picked at random, from 0 to 1."),
    )
    rubric = models.JSONField(
        default=list,
        blank=True,
        verbose_name=_("rubric"),
        help_text=_(
            '[{"name": "tone", "choices": ["fine", "rude"]}, …]: labels the reviewer picks, besides the verdict '
            "(good or bad) and a corrected answer."
        ),
    )
    guidelines = models.TextField(
        blank=True, default="", verbose_name=_("guidelines"), help_text=_("What reviewers look for, shown to them.")
    )
    reviews_per_run = models.PositiveSmallIntegerField(
        default=1,
        validators=[MinValueValidator(1), MaxValueValidator(2)],
        verbose_name=_("reviews per run"),
        help_text=_("2: a second reviewer labels each run too, and the queue shows how often the two agree."),
    )
    enabled = models.BooleanField(default=True, verbose_name=_("enabled"))
    # Runs are picked from events at or after this time (reviews.filling); None: not filled yet.
    filled_until = models.DateTimeField(null=True, blank=True, editable=False, verbose_name=_("filled until"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        verbose_name = _("review queue")
        verbose_name_plural = _("review queues")
        ordering = ["name"]
        constraints = [
            name_unique_in_workspace("review_queue_name_per_workspace"),
            models.CheckConstraint(
                condition=models.Q(reviews_per_run__gte=1, reviews_per_run__lte=2), name="review_queue_reviews_1_or_2"
            ),
            models.CheckConstraint(
                condition=models.Q(sample_rate__gte=0, sample_rate__lte=1), name="review_queue_rate_range"
            ),
        ]

    def __str__(self):
        return self.name

    def clean(self):
        references_check(self)
        errors = {}
        try:
            rubric_check(self.rubric)
        except ValidationError as exc:
            errors["rubric"] = exc.messages
        if self.score_evaluator_id is not None and self.score_below is None:
            errors["score_below"] = _("Give the score under which a run enters.")
        if (
            self.score_evaluator_id is not None
            and self.agent_id is not None
            and self.score_evaluator.agent_id != self.agent_id
        ):
            errors["score_evaluator"] = _("Choose an evaluator of the queue's agent.")
        if errors:
            raise ValidationError(errors)


class ReviewItem(models.Model):
    class Reason(models.TextChoices):
        NEGATIVE_FEEDBACK = "negative_feedback", _("Negative feedback")
        LOW_SCORE = "low_score", _("Low online score")
        GUARDRAIL = "guardrail", _("Guardrail hit")
        TOOL_ERROR = "tool_error", _("Tool error")
        SAMPLE = "sample", _("Sampled")

    class State(models.TextChoices):
        OPEN = "open", _("Open")
        ASSIGNED = "assigned", _("Assigned")
        DONE = "done", _("Done")

    # Its workspace is its queue's (workspaces.access.in_workspace).
    workspace_path = "queue__workspace"
    queue = models.ForeignKey(ReviewQueue, on_delete=models.CASCADE, related_name="items", verbose_name=_("queue"))
    # No database constraint: retention deletes old runs with plain SQL (conversations.retention),
    # and a review outlives the run it read, as an eval result does.
    run = models.ForeignKey(
        "conversations.Run",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="+",
        verbose_name=_("run"),
    )
    reason = models.CharField(max_length=20, choices=Reason.choices, verbose_name=_("why"))
    state = models.CharField(max_length=10, choices=State.choices, default=State.OPEN, verbose_name=_("state"))
    assigned_to = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("assigned to"),
    )
    assigned_at = models.DateTimeField(null=True, blank=True, verbose_name=_("assigned at"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        verbose_name = _("review item")
        verbose_name_plural = _("review items")
        ordering = ["queue", "created_at", "id"]
        permissions = [("review_run", _("Can review runs in a review queue"))]
        constraints = [models.UniqueConstraint(fields=["queue", "run"], name="review_item_run_once_per_queue")]
        # "Review next" reads a queue's open items, oldest first.
        indexes = [models.Index(fields=["queue", "state", "created_at"], name="review_item_queue_state_idx")]

    def __str__(self):
        return f"{self.queue} #{self.run_id}"


class ReviewLabel(models.Model):
    class Verdict(models.TextChoices):
        GOOD = "good", _("Good")
        BAD = "bad", _("Bad")

    # Its workspace is its item's queue's (workspaces.access.in_workspace).
    workspace_path = "item__queue__workspace"
    item = models.ForeignKey(ReviewItem, on_delete=models.CASCADE, related_name="labels", verbose_name=_("item"))
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+", verbose_name=_("reviewer")
    )
    # {rubric label name: the choice picked}.
    labels = models.JSONField(default=dict, blank=True, verbose_name=_("labels"))
    verdict = models.CharField(max_length=8, choices=Verdict.choices, verbose_name=_("verdict"))
    corrected_answer = models.TextField(blank=True, default="", verbose_name=_("corrected answer"))
    notes = models.TextField(blank=True, default="", verbose_name=_("notes"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        verbose_name = _("review label")
        verbose_name_plural = _("review labels")
        ordering = ["item", "created_at", "id"]
        constraints = [models.UniqueConstraint(fields=["item", "reviewer"], name="review_label_once_per_reviewer")]

    def __str__(self):
        return f"{self.item} {self.get_verdict_display()}"
