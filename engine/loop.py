"""The agent loop: the life of a run on a worker, from its claim to its end or its parking.

1. Claim (run_advance → _advance): a conditional UPDATE claims the run with a lease
   (engine.leases), then the first step's read: the run and its messages.
2. Steps (_steps → _step): each step begins with its decision, made once by engine.next_step
   (a pure function of the run, its messages and its snapshot): call the model, run the tools
   the model asked for, or finish. The step executes it:
   - a model call (_call_model → engine.llm_step): the answer is recorded with the call, and
     what follows it is decided with it, before that commit, which may act on the decision
     itself (mark the first tool call started, or end the run after a final answer). A decision
     the commit acted on is carried to the next step, which executes it without deciding again;
   - a tool step (_tools → engine.tool_step): every call of the model's last message, then
     their results as messages. A call that needs a person parks the run (awaiting_approval,
     or waiting on the runs it delegated to) and ends the task: no worker waits for a human;
   - a repair turn (_repair → engine.answer_schema): a final answer that does not match the
     run's output schema is sent back to the model with what is wrong, and the next step calls
     the model again.
3. End: a finish decided by next_step, or found by a step (a tool loop, a failed or empty model
   call, a guardrail, a cancel seen at a step boundary), is made once by engine.runs.run_finish
   (_end). A run that used up its time slice goes back to the queue between two steps.

Every step ends with a commit, so any step can be re-run by another worker after a crash.

A step starts from the run and its messages as the database holds them: read when the worker
claims the run (and after a step that parked, waited on others or folded the history into the
summary), otherwise as the previous step's own commit left them. That commit's guard returns
the run's row (its totals, and the cancel flag as it was when the commit was made) and the
step knows the messages it appended; nothing else writes to a running run's conversation, and
every later write is fenced by the lease, so reading them again would only repeat what the
commit said.
"""

import contextlib
import logging
import time
import traceback
from dataclasses import dataclass, replace

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from agents.snapshot import AgentSnapshot
from conversations import events
from conversations.models import Message, Run, RunStatus, StopReason, ToolInvocation
from engine.answer_schema import answer_repair
from engine.context import step_read
from engine.delegation import run_park_for_children
from engine.dispatch import run_enqueue
from engine.guardrails import input_check, output_enforce
from engine.invocations import Started
from engine.leases import LeaseLost, process_owner, renewer, run_claim
from engine.limits import daily_usage, timeout_limit
from engine.llm_step import llm_step
from engine.model_call import EMPTY_ANSWER_MESSAGE, DeadlineReached, EmptyAnswer, ModelStepFailed
from engine.next_step import Finish, Repair, RunTools, Step, next_step
from engine.part_conversion import PartsBlocked
from engine.runs import run_finish, run_park_for_approval
from engine.snapshots import run_snapshot
from engine.speech import agent_says
from engine.tool_step import tool_step
from engine.tracing import run_slice
from engine.transitions import run_transition
from platform_site.logs import log_context

log = logging.getLogger(__name__)

TOOL_LOOP_MESSAGE = _(
    "I stopped here: I kept calling {tools} without getting closer to an answer. "
    "Please rephrase the question or give me more details."
)


def _tools_named(snapshot: AgentSnapshot, names: list[str]) -> str:
    named = _("the tool {name}") if len(names) == 1 else _("the tools {names}")
    return agent_says(snapshot, named, name=names[0], names=", ".join(names))


@dataclass
class Carried:
    """What the next step would read, as the previous step's commit left it."""

    run: Run
    messages: list[Message]
    # The rows of the last message's tool calls, written with it (engine.invocations).
    invocations: list[ToolInvocation] | None = None
    # The call that commit marked started (engine.llm_step): the next step runs it.
    started: Started | None = None
    # What the next step is, when it was decided with the answer and that commit acted on it
    # (started the first call): the next step executes it rather than deciding again.
    decided: Step | None = None


def _step(run_id, owner: str, carried: Carried | None = None) -> Carried | Finish | bool:
    """Take one step (from `carried`, else from what is read now). Returns what follows it: the
    state the next step starts from (Carried), the ending (Finish), True to go on from what is
    read then, or False: the run parked.

    A cancel is honoured at every step boundary: here (as of the previous step's commit, or the
    read), before each tool starts (tool_step), and when a model call returns (run_finish ends a
    run whose cancel was accepted as cancelled, so an answer that arrives late is kept in the
    ledger but never delivered as the answer)."""
    run, messages = (carried.run, carried.messages) if carried else step_read(run_id=run_id)
    if run.status != RunStatus.RUNNING or run.lease_owner != owner:
        raise LeaseLost(str(run_id))
    snapshot = run_snapshot(run)
    step = carried.decided if carried and carried.decided else _decide(run, messages, snapshot)
    if isinstance(step, Finish):
        return step
    if isinstance(step, RunTools):
        return _tools(run=run, owner=owner, snapshot=snapshot, messages=messages, carried=carried)
    if isinstance(step, Repair):
        return _repair(run=run, owner=owner, snapshot=snapshot, messages=messages, repair=step)
    return _call_model(run=run, owner=owner, snapshot=snapshot, messages=messages)


def _decide(run: Run, messages: list[Message], snapshot: AgentSnapshot) -> Step:
    """The next step, decided now (engine.next_step) from the run and its messages."""
    now = timezone.now()
    # The day's usage is one read, and only a model call can be stopped by it: a tool step skips it.
    calls_model = messages[-1].role != Message.Role.ASSISTANT
    usage_today = daily_usage(run, snapshot, now=now) if calls_model else None
    return next_step(run, messages, snapshot, now=now, usage_today=usage_today)


def _tools(
    *, run: Run, owner: str, snapshot: AgentSnapshot, messages: list[Message], carried: Carried | None
) -> Carried | Finish | bool:
    """Run the tool calls of the last message, the model's."""
    made, started = (carried.invocations, carried.started) if carried else (None, None)
    outcome = tool_step(
        run=run,
        owner=owner,
        snapshot=snapshot,
        messages=messages,
        current=messages[-1],
        made=made,
        started=started,
    )
    if outcome.cancelled:
        # Tool calls the model asked for and that never ran get their rows (cancelled) from run_finish.
        return Finish(StopReason.CANCELLED)
    if outcome.loop:
        message = agent_says(snapshot, TOOL_LOOP_MESSAGE, tools=_tools_named(snapshot, outcome.loop.names))
        return Finish(StopReason.TOOL_LOOP, message)
    if outcome.parked:
        # Not parked means every approval was decided and every delegated run ended while the
        # step ran: take the step again.
        parked = run_park_for_approval(run_id=run.pk, owner=owner) or run_park_for_children(run_id=run.pk, owner=owner)
        return not parked
    # The next step starts from the run as the step's last commit left it: a cancel accepted
    # while the tools ran is seen at that step's boundary.
    return Carried(outcome.run, [*messages, *outcome.messages])


def _repair(*, run: Run, owner: str, snapshot: AgentSnapshot, messages: list[Message], repair: Repair) -> bool:
    """Send the final answer (the last message) back: it does not match the run's output schema."""
    answer_repair(
        run=run,
        owner=owner,
        snapshot=snapshot,
        answer=messages[-1],
        errors=repair.errors,
        repair=repair.repair,
        of=repair.of,
    )
    # The next step reads the run and its messages, the repair turn among them, and calls the model.
    return True


def _call_model(*, run: Run, owner: str, snapshot: AgentSnapshot, messages: list[Message]) -> Carried | Finish | bool:
    summary_through = run.conversation.context_summary_through
    try:
        if run.iterations == 0:
            # The user's message is checked once, before the model first sees it (a moderation
            # rule's call can fail or run out of time like the step's own).
            blocked = input_check(run=run, owner=owner, snapshot=snapshot, messages=messages)
            if blocked is not None:
                return blocked
        result = llm_step(run=run, owner=owner, snapshot=snapshot, messages=messages)
    except PartsBlocked as exc:
        # Text turned out of a part the run brings is blocked like the same text typed.
        return exc.finish
    except DeadlineReached:
        limit = timeout_limit(snapshot)
        return Finish(limit.stop_reason, limit.message)
    except EmptyAnswer:
        # Like the limits, a model that gave no answer ends the run completed with the reason
        # said to the user (failed is for runs the platform could not carry out).
        return Finish(StopReason.EMPTY_ANSWER, agent_says(snapshot, EMPTY_ANSWER_MESSAGE))
    except ModelStepFailed as exc:
        return Finish(StopReason.PROVIDER_ERROR, error=str(exc))
    if result.guardrail is not None:
        blocked = output_enforce(run=run, owner=owner, review=result.guardrail)
        if blocked is not None:
            return blocked
    decision = result.decision
    if isinstance(decision, Finish):
        # A final answer, perhaps ended by its own commit already (engine.runs.AnswerEnding; if
        # not, run_finish ends a run whose cancel was accepted meanwhile as cancelled), or a
        # limit that stops the calls it asked for.
        return replace(decision, listening=result.listening, made=result.ending)
    # The calls it asked for start in the next step. If the answer's commit started the first
    # one, having checked for a cancel, that step runs them as decided; otherwise it decides
    # anew from what the commit returned (a cancel accepted meanwhile ends the run there).
    decided = decision if result.started else None
    if run.conversation.context_summary_through != summary_through:
        # The history was folded into the summary: the next step starts from what is left,
        # read now, with the calls' rows as the answer's commit wrote them.
        return Carried(*step_read(run_id=run.pk), result.invocations, result.started, decided=decided)
    return Carried(result.run, [*messages, result.message], result.invocations, result.started, decided=decided)


def run_advance(*, run_id) -> None:
    with log_context(run_id=run_id), run_slice(run_id):
        _advance(run_id)


class _SliceUsed:
    """The worker's time slice for the run is used up between two steps."""


SLICE_USED = _SliceUsed()


def _advance(run_id) -> None:
    owner = process_owner()
    if not run_claim(run_id=run_id, owner=owner):
        log.info("run %s: not claimable (taken, parked or finished)", run_id)
        return
    log.info("run %s: claimed by %s", run_id, owner)
    renewer.hold(run_id)
    try:
        after = _steps(run_id, owner, Carried(*step_read(run_id=run_id)))
        if isinstance(after, Finish):
            _end(run_id, after)
        elif after is SLICE_USED:
            _requeue(run_id, owner)
    except LeaseLost as exc:
        # Found when a commit's fence failed, perhaps while an error was being handled: it is kept.
        log.warning("run %s: lease lost; another worker has taken it over", run_id, exc_info=exc.__context__)
    except Exception:
        log.exception("run %s failed", run_id)
        # LeaseLost: the run is another worker's now.
        with contextlib.suppress(LeaseLost):
            run_finish(
                run_id=run_id,
                status=RunStatus.FAILED,
                stop_reason=StopReason.INTERNAL_ERROR,
                error=traceback.format_exc(limit=20),
            )
    finally:
        renewer.release(run_id)
    log.info("run %s: released", run_id)


def _steps(run_id, owner: str, carried: Carried) -> Finish | _SliceUsed | None:
    """Take steps from `carried` until the run ends, parks or its slice is used up. Returns the
    ending, SLICE_USED, or None: the run parked."""
    slice_ends = time.monotonic() + settings.AGENTRY_TASK_SLICE_SECONDS
    while True:
        went = _step(run_id, owner, carried)
        if went is False:
            return None
        if isinstance(went, Finish):
            return went
        carried = went if isinstance(went, Carried) else None
        # A call the last commit started runs in this slice: requeued, it would be found
        # running by the next one, as after a worker's crash.
        if time.monotonic() > slice_ends and not (carried and carried.started):
            # A long run goes back to the queue between steps, so no task runs unbounded
            # (thread pools cannot enforce Celery's time limits) and other runs get a turn.
            return SLICE_USED


def _end(run_id, finish: Finish) -> None:
    """End the run as decided: a limit ends it completed with the reason said, like an answer."""
    run_finish(
        run_id=run_id,
        status=finish.status,
        stop_reason=finish.reason,
        error=finish.error,
        final_message=finish.message,
        listening=finish.listening,
        made=finish.made,
        output=finish.output,
    )


def _requeue(run_id, owner: str) -> None:
    with transaction.atomic():
        if run_transition(
            run_id=run_id,
            to=RunStatus.QUEUED,
            expect=[RunStatus.RUNNING],
            owner=owner,
            payload=events.run_requeued(reason="time slice used up"),
        ):
            run_enqueue(run_id=run_id)
