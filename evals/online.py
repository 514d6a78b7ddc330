"""Which production runs the online evaluators check (docs/quality.md § Online evaluation).

A run's end is heard through the ledger's run-event listener (`LISTENER`, registered by
EvalsConfig.ready: conversations.batch.RunEventListener) only when an enabled evaluator of its
agent and version would pick it: its id is below the evaluator's sample bound, or it has a
guardrail trigger. For every other run, of an agent with evaluators or not, the question is one
more EXISTS in a read the ending makes anyway, and nothing else happens. For a heard run of
production traffic (no sandbox: not an evaluation, a replay, a fork or a playground's) each
such evaluator decides:

1. the run had a guardrail hit and the evaluator checks every such run: reason `guardrail`;
2. else the run completed and it is sampled: reason `sample`. Sampled means the run's id falls
   below the evaluator's bound (OnlineEvaluator.sample_below: sample_rate of the id space). Run
   ids are random (uuid4), so that is sample_rate of the runs, decided by the run's id and the
   evaluator's rate alone: an event heard twice (a re-delivery) decides the same, no count is
   kept anywhere, and evaluators with the same rate check the same runs (their scores compare).

A negative rating (conversations.feedback, `feedback_heard`) is the third way in: reason
`negative_feedback` for the evaluators that check every such run.

What is picked is sent after commit to a task (evals.tasks.online_score_task) that scores it
(evals.online_scoring): nothing is scored on the worker's run path, and a rolled-back ending
sends nothing. A score is made once per evaluator and run (a unique constraint): a second
trigger for the same pair is a no-op there.
"""

import logging
import uuid
from functools import partial

from django.db import transaction
from django.db.models import Exists, Q, Subquery

from conversations.batch import Is, Row, RunEventListener, either, exists
from conversations.events import TERMINAL_EVENT_TYPES
from conversations.models import GuardrailTrigger, Run, RunEvent, RunFeedback, RunStatus
from evals.models import OnlineEvaluator, OnlineScore
from platform_site.celery import app

log = logging.getLogger(__name__)

# Sent by name: evals.tasks wraps evals.online_scoring, which this module does not import.
ONLINE_SCORE_TASK = "evals.tasks.online_score_task"
NEGATIVE = -1


def sampled(*, run_id, evaluator: OnlineEvaluator) -> bool:
    """Whether the evaluator samples the run (the listener's condition, `LISTENER`, in Python)."""
    return uuid.UUID(str(run_id)) < evaluator.sample_below


def _evaluators(run: Run, **flags) -> list[OnlineEvaluator]:
    return list(
        OnlineEvaluator.objects.filter(agent_id=run.agent_id, enabled=True, **flags)
        .filter(Q(version__isnull=True) | Q(version_id=run.agent_version_id))
        .only("pk", "sample_below", "on_guardrail_hit")
    )


def picks_of_ended(*, run_id, completed: bool, evaluators: list[OnlineEvaluator]) -> list[tuple[int, str]]:
    """(evaluator id, reason) for the evaluators that check the ended run; each evaluator read
    with `guardrail_hit` (whether the run has a guardrail trigger)."""
    picks = []
    for evaluator in evaluators:
        if evaluator.guardrail_hit and evaluator.on_guardrail_hit:
            picks.append((evaluator.pk, OnlineScore.Reason.GUARDRAIL))
        elif completed and sampled(run_id=run_id, evaluator=evaluator):
            picks.append((evaluator.pk, OnlineScore.Reason.SAMPLE))
    return picks


def run_ended_heard(*, event: RunEvent) -> None:
    """In the ending's transaction: pick the evaluators that check the run, send them after commit.

    Every listener of an ending is called once one of them hears the run (a webhook's run
    included), so this is one read: the enabled evaluators of the run's agent and version, with
    what the choice needs of the run; none for another agent's run or a sandboxed one."""
    run = Run.objects.filter(pk=event.run_id)
    evaluators = list(
        OnlineEvaluator.objects.filter(
            Q(version__isnull=True) | Q(version_id=Subquery(run.values("agent_version_id"))),
            agent_id=Subquery(run.filter(sandbox__isnull=True).values("agent_id")),
            enabled=True,
        )
        .annotate(
            completed=Exists(run.filter(status=RunStatus.COMPLETED)),
            guardrail_hit=Exists(GuardrailTrigger.objects.filter(run_id=event.run_id)),
        )
        .only("pk", "sample_below", "on_guardrail_hit")
    )
    if evaluators:
        completed = evaluators[0].completed
        online_scores_later(
            run_id=event.run_id, picks=picks_of_ended(run_id=event.run_id, completed=completed, evaluators=evaluators)
        )


def feedback_heard(*, feedback: RunFeedback, run: Run) -> None:
    """After a rating is stored: a negative one on a production run is checked by every evaluator
    that checks such runs."""
    if feedback.rating != NEGATIVE or run.sandbox is not None:
        return
    picks = [(e.pk, OnlineScore.Reason.NEGATIVE_FEEDBACK) for e in _evaluators(run, on_negative_feedback=True)]
    online_scores_later(run_id=run.pk, picks=picks)


def _send(run_id, picks: list[tuple[int, str]]) -> None:
    try:
        app.tasks[ONLINE_SCORE_TASK].delay(str(run_id), [list(pick) for pick in picks])
    except Exception:
        # A score is a sample, not a promise: a broker outage loses it, and says so.
        log.exception("run %s: the online scores' task not sent", run_id)


def online_scores_later(*, run_id, picks: list[tuple[int, str]]) -> None:
    if picks:
        transaction.on_commit(partial(_send, run_id, picks), robust=True)


# The ledger asks, through the run's row, whether an enabled evaluator of its agent and version
# would pick it (its id below the evaluator's bound, or a guardrail trigger on it) before its
# ending event, and calls run_ended_heard with the event in its transaction.
LISTENER = RunEventListener(
    event_types=TERMINAL_EVENT_TYPES,
    hears=exists(
        OnlineEvaluator,
        Is("agent_id", Row("agent_id")),
        either(Is("version_id", None), Is("version_id", Row("agent_version_id"))),
        either(Is("sample_below", Row("id"), ">"), exists(GuardrailTrigger, Is("run_id", Row("id")))),
        enabled=True,
    ),
    written=lambda event: run_ended_heard(event=event),
)
