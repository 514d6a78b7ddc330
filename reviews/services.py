"""Writes of review queues: claiming the next item, labelling it, and making an eval case of it.

Claims: "review next" takes the queue's oldest item that is open, or assigned to someone whose
claim has expired (AGENTRY_REVIEW_CLAIM_MINUTES), and that this reviewer has not labelled, with
select_for_update(skip_locked): two reviewers asking at once lock different rows, so no run is
ever held by two people. A reviewer who already holds one of the queue's items gets it back.
Labelling releases the item: done once `reviews_per_run` different reviewers have labelled it,
open again (for another reviewer) before."""

from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max, Q
from django.utils import timezone
from django.utils.translation import gettext as _

from conversations.models import Run
from evals.models import EvalCase, EvalSuite
from evals.selectors import run_case_material
from reviews.models import ReviewItem, ReviewLabel, ReviewQueue

REVIEW_PERMISSION = "reviews.review_run"
# Making a case of a reviewed run adds to an eval suite.
CASE_PERMISSIONS = ("evals.add_evalcase", "evals.change_evalsuite")


class ReviewRefused(Exception):
    """The item is not this reviewer's to label (someone else holds it, it is done, they
    labelled it already)."""


def _claim_expiry(now):
    return now - timedelta(minutes=settings.AGENTRY_REVIEW_CLAIM_MINUTES)


def review_next(*, queue: ReviewQueue, user, now=None) -> ReviewItem | None:
    """The item `user` reviews next in `queue`, now assigned to them; None when none is left."""
    now = now or timezone.now()
    held = (
        ReviewItem.objects.filter(
            queue=queue, state=ReviewItem.State.ASSIGNED, assigned_to=user, assigned_at__gte=_claim_expiry(now)
        )
        .order_by("assigned_at", "pk")
        .first()
    )
    if held is not None:
        return held
    with transaction.atomic():
        item = (
            ReviewItem.objects.filter(queue=queue)
            .filter(
                Q(state=ReviewItem.State.OPEN) | Q(state=ReviewItem.State.ASSIGNED, assigned_at__lt=_claim_expiry(now))
            )
            .exclude(labels__reviewer=user)
            .order_by("created_at", "pk")
            .select_for_update(skip_locked=True, of=("self",))
            .first()
        )
        if item is None:
            return None
        item.state, item.assigned_to, item.assigned_at = ReviewItem.State.ASSIGNED, user, now
        item.save(update_fields=["state", "assigned_to", "assigned_at"])
    return item


def review_release(*, item: ReviewItem, user) -> None:
    """Give an item back unlabelled (the reviewer skips it): open again for anyone."""
    ReviewItem.objects.filter(pk=item.pk, state=ReviewItem.State.ASSIGNED, assigned_to=user).update(
        state=ReviewItem.State.OPEN, assigned_to=None, assigned_at=None
    )


def labels_check(*, rubric: list, labels: dict) -> dict:
    """The picked labels, each a choice of its rubric label; ValidationError otherwise."""
    choices = {label["name"]: label["choices"] for label in rubric}
    if not isinstance(labels, dict) or set(labels) - set(choices):
        raise ValidationError(_("Pick labels of the queue's rubric only."))
    for name, value in labels.items():
        if value not in choices[name]:
            raise ValidationError(_("%(value)s is not a choice of %(name)s.") % {"value": value, "name": name})
    return labels


def review_label(
    *, item: ReviewItem, user, verdict: str, labels: dict, corrected_answer: str = "", notes: str = ""
) -> ReviewLabel:
    """`user`'s judgement of the item they hold (even past their claim's expiry, while nobody else
    took it); the item is then done, or open for its second reviewer."""
    if verdict not in ReviewLabel.Verdict.values:
        raise ValidationError({"verdict": _("Choose good or bad.")})
    with transaction.atomic():
        item = ReviewItem.objects.select_for_update().select_related("queue").get(pk=item.pk)
        labels = labels_check(rubric=item.queue.rubric, labels=labels)
        if item.state != ReviewItem.State.ASSIGNED or item.assigned_to_id != user.pk:
            raise ReviewRefused(_("This run is not assigned to you any more: take the next one."))
        if item.labels.filter(reviewer=user).exists():
            raise ReviewRefused(_("You have already reviewed this run."))
        label = ReviewLabel.objects.create(
            item=item,
            reviewer=user,
            verdict=verdict,
            labels=labels,
            corrected_answer=corrected_answer.strip(),
            notes=notes.strip(),
        )
        done = item.labels.values("reviewer").distinct().count() >= item.queue.reviews_per_run
        item.state = ReviewItem.State.DONE if done else ReviewItem.State.OPEN
        item.assigned_to, item.assigned_at = None, None
        item.save(update_fields=["state", "assigned_to", "assigned_at"])
    return label


class AnswerCheck:
    """How a case made from a review checks a future answer against the corrected one."""

    AUTO = "auto"  # the judge where the suite has a judge model, the exact text otherwise
    JUDGE = "judge"
    EQUALS = "equals"
    CONTAINS = "contains"


JUDGE_RUBRIC = _(
    "The answer gives the user what this corrected answer, written by a reviewer, gives them: the same "
    "facts and the same outcome (the wording may differ).\n\nThe corrected answer:\n%(answer)s"
)


def _answer_expectation(*, suite: EvalSuite, check: str, answer: str) -> dict:
    if check == AnswerCheck.AUTO:
        check = AnswerCheck.JUDGE if suite.judge_model_config_id else AnswerCheck.EQUALS
    if check == AnswerCheck.JUDGE:
        return {"answer_rubric": str(JUDGE_RUBRIC) % {"answer": answer}}
    if check == AnswerCheck.CONTAINS:
        if len(answer) > EvalCase._meta.get_field("answer_contains").max_length:
            raise ValidationError({"answer_contains": _("At most 500 characters: choose a shorter key phrase.")})
        return {"answer_contains": answer}
    return {"answer_equals": answer}


def review_case_make(
    *, item: ReviewItem, suite: EvalSuite, name: str, corrected_answer: str, check: str, expected_tool_calls=None
) -> EvalCase:
    """A new case of `suite` from the reviewed run: its conversation up to the run's user message,
    the tool calls it made (or the ones the reviewer gives) as expected calls, what they returned as
    the case's tool results, and the corrected answer as the answer's expectation. Raises
    ValidationError and saves nothing when something is wrong."""
    answer = corrected_answer.strip()
    if not answer:
        raise ValidationError({"corrected_answer": _("Write the corrected answer the case expects.")})
    run = Run.objects.filter(pk=item.run_id).first()
    material = run_case_material(run=run) if run is not None else None
    if material is None:
        raise ValidationError({"turns": _("This run has no user message to make a case of.")})
    if expected_tool_calls is not None:
        material["expected_tool_calls"] = expected_tool_calls
    position = suite.cases.aggregate(last=Max("position"))["last"]
    case = EvalCase(
        suite=suite,
        name=name,
        position=0 if position is None else position + 1,
        source_run=run,
        **material,
        **_answer_expectation(suite=suite, check=check, answer=answer),
    )
    case.full_clean()
    case.save()
    return case
