"""Feedback on runs: an end user's rating of an answer, posted by the application serving them.

Apps above the ledger that act on a rating (evals: online evaluators check every run rated
negatively) register a listener from their AppConfig.ready(); this module names none of them."""

from collections.abc import Callable

from conversations.models import Run, RunFeedback


class RunNotFinished(Exception):
    """Only a run that has ended has an answer to rate."""


# Called with (feedback=, run=) after each post, in its transaction if the caller has one.
_listeners: list[Callable[..., None]] = []


def run_feedback_listener_register(listener: Callable[..., None]) -> None:
    """Call `listener(feedback=..., run=...)` after every post; registering the same again is a
    no-op (ready() may run more than once in a process, as in tests)."""
    if listener not in _listeners:
        _listeners.append(listener)


def run_feedback_set(*, run: Run, rating: int, comment: str, by) -> tuple[RunFeedback, bool]:
    """Record the run's feedback, replacing an earlier one (one per run): the row and whether it
    is new. A run's terminal state is final, so the check cannot go stale."""
    if not run.is_terminal:
        raise RunNotFinished(run.status)
    feedback, created = RunFeedback.objects.update_or_create(
        run_id=run.pk, defaults={"rating": rating, "comment": comment, "created_by": by}
    )
    for listener in _listeners:
        listener(feedback=feedback, run=run)
    return feedback, created
