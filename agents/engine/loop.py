"""The agent loop: claim a run, then take steps until it ends or parks.

The worker keeps nothing between steps: each step starts by reading the run and its messages
from the database and ends with a commit, so any step can be re-run by another worker after a
crash. What the next step is follows from the last message of the run:
user or tool message → call the model; assistant message with tool calls → run them;
assistant message without tool calls → the run is complete.
"""

import logging
import time
import traceback

from django.conf import settings
from django.db import transaction
from django.utils.translation import gettext_lazy as _

from agents.engine.context import conversation_messages
from agents.engine.limits import Limit, budget_reached, deadline_passed, timeout_limit
from agents.engine.llm_step import llm_step
from agents.engine.model_call import DeadlineReached, EmptyAnswer, ModelStepFailed
from agents.engine.tool_step import tool_step
from agents.leases import LeaseLost, process_owner, renewer, run_claim
from conversations.models import Message, Run, RunStatus, StopReason
from conversations.services import run_enqueue, run_event_append, run_finish, run_park_for_approval
from platform_site.logs import log_context

log = logging.getLogger(__name__)

MAX_ITERATIONS_MESSAGE = (
    "I stopped here: this task needed more than {limit} model steps, which is this agent's limit, "
    "and I have no final answer yet. Please narrow the question or ask me to continue."
)
TOOL_LOOP_MESSAGE = _(
    "I stopped here: I kept calling {tools} without getting closer to an answer. "
    "Please rephrase the question or give me more details."
)


def _stop(run: Run, limit: Limit) -> bool:
    """A limit ends the run like max_iterations does: completed, with the reason said."""
    run_finish(run_id=run.pk, status=RunStatus.COMPLETED, stop_reason=limit.stop_reason, final_message=limit.message)
    return False


def _cancel(run_id) -> bool:
    # Tool calls the model asked for and that never ran get their rows (cancelled) from run_finish.
    run_finish(run_id=run_id, status=RunStatus.CANCELLED, stop_reason=StopReason.CANCELLED)
    return False


def _tools_named(names: list[str]) -> str:
    return (_("the tool {name}") if len(names) == 1 else _("the tools {names}")).format(
        name=names[0], names=", ".join(names))


def _step(run_id, owner: str) -> bool:
    """Take one step. Returns True when the loop should go on.

    A cancel is honoured at every step boundary: here, before each tool starts (tool_step), and
    when a model call returns (run_finish ends a run whose cancel was accepted as cancelled,
    so an answer that arrives late is kept in the ledger but never delivered as the answer)."""
    run = Run.objects.select_related("agent_version", "conversation").get(pk=run_id)
    if run.status != RunStatus.RUNNING or run.lease_owner != owner:
        raise LeaseLost(str(run_id))
    if run.cancel_requested:
        return _cancel(run.pk)
    snapshot = run.agent_version.snapshot
    limit = deadline_passed(run, snapshot)
    if limit:
        return _stop(run, limit)
    messages = conversation_messages(run)
    last = messages[-1]
    if last.role == Message.Role.ASSISTANT and last.tool_calls:
        outcome = tool_step(run=run, owner=owner, snapshot=snapshot, messages=messages, current=last)
        if outcome.cancelled:
            return _cancel(run.pk)
        if outcome.loop:
            run_finish(run_id=run.pk, status=RunStatus.COMPLETED, stop_reason=StopReason.TOOL_LOOP,
                       final_message=TOOL_LOOP_MESSAGE.format(tools=_tools_named(outcome.loop.names)))
            return False
        if outcome.parked:
            # Not parked means every approval was decided while the step ran: take the step again.
            return not run_park_for_approval(run_id=run.pk, owner=owner)
        return True
    if last.role == Message.Role.ASSISTANT:
        run_finish(run_id=run.pk, status=RunStatus.COMPLETED, stop_reason=StopReason.FINAL_ANSWER)
        return False
    max_iterations = snapshot["agent"]["max_iterations"]
    if run.iterations >= max_iterations:
        run_finish(run_id=run.pk, status=RunStatus.COMPLETED, stop_reason=StopReason.MAX_ITERATIONS,
                   final_message=MAX_ITERATIONS_MESSAGE.format(limit=max_iterations))
        return False
    limit = budget_reached(run, snapshot)
    if limit:
        return _stop(run, limit)
    try:
        result = llm_step(run=run, owner=owner, snapshot=snapshot, messages=messages)
    except DeadlineReached:
        return _stop(run, timeout_limit(snapshot))
    except EmptyAnswer as exc:
        # Like the limits, a model that gave no answer ends the run completed with the reason
        # said to the user (failed is for runs the platform could not carry out).
        run_finish(run_id=run.pk, status=RunStatus.COMPLETED, stop_reason=StopReason.EMPTY_ANSWER,
                   final_message=str(exc))
        return False
    except ModelStepFailed as exc:
        run_finish(run_id=run.pk, status=RunStatus.FAILED, stop_reason=StopReason.PROVIDER_ERROR, error=str(exc))
        return False
    if not result.message.tool_calls:
        run_finish(run_id=run.pk, status=RunStatus.COMPLETED, stop_reason=StopReason.FINAL_ANSWER)
        return False
    # The calls it asked for start in the next step, which begins by checking for a cancel.
    return True


def run_advance(*, run_id) -> None:
    with log_context(run_id=run_id):
        _advance(run_id)


def _requeue_between_steps(run_id, owner: str) -> None:
    with transaction.atomic():
        if Run.objects.filter(pk=run_id, status=RunStatus.RUNNING, lease_owner=owner).update(
            status=RunStatus.QUEUED, lease_owner="", lease_expires_at=None
        ):
            run_event_append(run_id=run_id, type="run.requeued", payload={"reason": "time slice used up"})
            run_enqueue(run_id=run_id)


def _advance(run_id) -> None:
    owner = process_owner()
    if not run_claim(run_id=run_id, owner=owner):
        log.info("run %s: not claimable (taken, parked or finished)", run_id)
        return
    log.info("run %s: claimed by %s", run_id, owner)
    run_event_append(run_id=run_id, type="run.running", payload={"worker": owner})
    renewer.hold(run_id)
    slice_ends = time.monotonic() + settings.AGENTRY_TASK_SLICE_SECONDS
    try:
        while _step(run_id, owner):
            if time.monotonic() > slice_ends:
                # A long run goes back to the queue between steps, so no task runs unbounded
                # (thread pools cannot enforce Celery's time limits) and other runs get a turn.
                _requeue_between_steps(run_id, owner)
                break
    except LeaseLost:
        log.warning("run %s: lease lost; another worker has taken it over", run_id)
    except Exception:
        log.exception("run %s failed", run_id)
        run_finish(run_id=run_id, status=RunStatus.FAILED, stop_reason=StopReason.INTERNAL_ERROR,
                   error=traceback.format_exc(limit=20))
    finally:
        renewer.release(run_id)
    log.info("run %s: released", run_id)
