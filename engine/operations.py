"""What an operator can do to a run from the monitoring pages or the admin: cancel it, requeue
a stuck one, retry a failed one. Each is a guarded state change recorded as a RunEvent naming
who did it, and a run that has to move again is enqueued only after commit.

Retrying is the one way out of a terminal state, and it is deliberate: only a `failed` run,
only by a person, only while it is still the latest run of its conversation. The run goes back
to `queued` and resumes from its last committed step, as after a crash (the engine derives the
next step from the run's last message), so a completed model call is not made again and a
side-effecting tool call whose outcome is unknown is reported rather than repeated. Its earlier
outcome stays in the events (`run.failed`, and `run.retried` with the previous status, stop
reason and error).
"""

import logging

from django.db import transaction
from django.utils.translation import gettext as _

from conversations import events
from conversations.batch import run_event_append
from conversations.events import EventType
from conversations.models import Message, Run, RunStatus
from engine.dispatch import run_enqueue
from engine.runs import run_cancel
from engine.transitions import run_transition

log = logging.getLogger(__name__)


# Cancel, requeue and retry, from the monitoring pages and the admin.
OPERATE_PERMISSION = "conversations.operate_run"


def user_may_operate(user) -> bool:
    return bool(user and user.is_active and user.is_staff and user.has_perm(OPERATE_PERMISSION))


class RunActionRefused(Exception):
    """The run is not in a state this action applies to; the message says why."""


def _actor(user) -> dict:
    return {"by": user.get_username(), "by_id": user.pk}


def _locked(run_id) -> Run:
    return Run.objects.select_for_update().get(pk=run_id)


def run_cancel_by_operator(*, run_id, user) -> Run:
    """run_cancel, refused (with a reason the page shows) for a run that already ended."""
    run = Run.objects.get(pk=run_id)
    if run.is_terminal:
        raise RunActionRefused(_("The run already ended (%(status)s).") % {"status": run.status})
    run = run_cancel(run=run, by=user)
    log.info("run %s: cancelled by %s", run_id, user.get_username())
    return run


def run_requeue(*, run_id, user) -> Run:
    """Give a stuck run to any worker: a running run goes back to queued (a worker still
    holding it loses its lease at its next commit and stops); a queued run's task is sent again."""
    with transaction.atomic():
        run = _locked(run_id)
        if run.status not in (RunStatus.RUNNING, RunStatus.QUEUED):
            raise RunActionRefused(
                _("Only a running or queued run can be requeued; this one is %(status)s.") % {"status": run.status}
            )
        payload = {
            "reason": "operator",
            **_actor(user),
            "previous_status": run.status,
            "previous_owner": run.lease_owner,
            "lease_expires_at": run.lease_expires_at.isoformat() if run.lease_expires_at else None,
        }
        run_transition(run_id=run.pk, to=RunStatus.QUEUED, expect=[run.status], payload=payload)
        run_enqueue(run_id=run.pk)
    log.info("run %s: requeued by %s", run_id, user.get_username())
    run.refresh_from_db()
    return run


def run_retry(*, run_id, user) -> Run:
    """Reopen a failed run from its last committed step (see the module's docstring)."""
    with transaction.atomic():
        run = _locked(run_id)
        if run.status != RunStatus.FAILED:
            raise RunActionRefused(
                _("Only a failed run can be retried; this one is %(status)s.") % {"status": run.status}
            )
        if Run.objects.filter(conversation_id=run.conversation_id, created_at__gt=run.created_at).exists():
            raise RunActionRefused(_("The conversation has moved on (a newer run exists); post a new message instead."))
        last = Message.objects.filter(run=run).order_by("-order").values("order", "role").first()
        run_transition(
            run_id=run.pk,
            to=RunStatus.QUEUED,
            expect=[RunStatus.FAILED],
            by=user,
            fields={"stop_reason": "", "error": "", "finished_at": None, "cancel_requested": False, "recoveries": 0},
            payload=events.run_retried(
                **_actor(user),
                resume_after=last,
                previous={
                    "status": run.status,
                    "stop_reason": run.stop_reason,
                    "error": run.error[:2000],
                    "recoveries": run.recoveries,
                },
            ),
        )
        run_event_append(run_id=run.pk, type=EventType.RUN_QUEUED, payload=events.run_queued(reason="retry"))
        run_enqueue(run_id=run.pk)
    log.info("run %s: retried by %s", run_id, user.get_username())
    run.refresh_from_db()
    return run
