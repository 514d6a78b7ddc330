"""Feedback on runs: an end user's rating of an answer, posted by the application serving them."""

from conversations.models import Run, RunFeedback


class RunNotFinished(Exception):
    """Only a run that has ended has an answer to rate."""


def run_feedback_set(*, run: Run, rating: int, comment: str, by) -> tuple[RunFeedback, bool]:
    """Record the run's feedback, replacing an earlier one (one per run): the row and whether it
    is new. A run's terminal state is final, so the check cannot go stale."""
    if not run.is_terminal:
        raise RunNotFinished(run.status)
    return RunFeedback.objects.update_or_create(
        run_id=run.pk, defaults={"rating": rating, "comment": comment, "created_by": by}
    )
