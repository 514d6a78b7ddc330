"""Forks: a new run that starts from step N of a past run with one thing changed, to see what
would have happened from there on.

The fork is a run of the same agent in a new conversation (the forker's), linked to its source
(Run.forked_from, Run.fork_step, Run.fork_change). Nothing before step N is executed again: the
conversation before the run, the run's user message and its steps before N (each model answer
with its call, each tool call with its result) are copied from the source's ledger, the calls
marked `copied`, with no usage of their own. From step N on it is an ordinary run on the queue.

What can change (ForkChange): nothing (a replay: with a model that answers the same, the fork
repeats its source step for step), the agent version (the draft, the published one, a number),
the model config, one tool result of step N (the fork goes on from the model's next answer) or
the run's user message (a fork at step 1).

A fork never repeats a side effect: its run is sandboxed (Run.sandbox, decided by
engine.invocations._sandbox_decision). A call that is the same as one its source's tree made
(same tool, same arguments) gets the recorded result; a read tool otherwise runs live; a write
tool gets the result the operator gave for it, or, if the fork allows it, waits for an approval
that lets it run for real (with the fork's own idempotency key); otherwise its call fails
without running. Its delegate calls start children sandboxed the same way, so the subtree from
the fork point runs again and its writes are given their recorded results too. A fork's runs
stay out of the dashboards and never read or write long-term memories.
"""

from dataclasses import dataclass, field
from datetime import timedelta

from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone
from django.utils.translation import gettext as _

from agents.models import ModelConfig
from agents.releases import UnknownVersion, version_target
from agents.run_choices import RunChoiceRefused, run_choice_check
from agents.selectors import agents_usable_by
from agents.snapshot import model_snapshot, snapshot_parse
from conversations.models import (
    TERMINAL_STATUSES,
    ForkChange,
    LLMCall,
    Message,
    Run,
    RunTrigger,
    ToolInvocation,
)
from conversations.services import conversation_create, messages_append
from engine.dispatch import run_enqueue, run_started_record
from engine.invocations import NOT_RUN
from engine.tracing import run_trace_fields
from tools.arguments import arguments_hash

Status = ToolInvocation.Status


class ForkInvalid(ValueError):
    """The fork cannot be made as asked (a 400): the message says why."""


class ForkNotAllowed(PermissionError):
    """The user may not fork this run as asked (a 403): they may not use its agent, or may not
    choose its version or model config (agents.run_choices)."""


@dataclass(frozen=True)
class ForkRequest:
    """What to fork: from which step, changing what (one ForkChange and its fields)."""

    step: int
    change: str = ForkChange.NONE
    version: str | int | None = None  # VERSION: "draft", "published" or a number
    model_config_id: int | None = None  # MODEL
    tool_call_id: str = ""  # TOOL_RESULT: which call of step N
    result: str = ""  # TOOL_RESULT: what it returns instead
    message: str = ""  # USER_MESSAGE: the run's user message instead
    # What a write tool returns in the fork when its source made no such call ({tool: text}).
    write_results: dict = field(default_factory=dict)
    # Such a write, with no result given, waits for a person's approval to run for real.
    real_writes: bool = False


@dataclass
class _Copy:
    """The source's ledger up to the fork point, read once."""

    history: list[Message]
    user_message: Message
    steps: list[Message]  # the run's assistant and tool messages copied, in order
    calls: dict[int, LLMCall]  # by the source call's id
    invocations: list[ToolInvocation]
    iterations: int


def run_fork(*, source: Run, request: ForkRequest, user) -> Run:
    """The fork of `source`, queued once this commits. Raises ForkInvalid (what is wrong with the
    request) or ForkNotAllowed."""
    if user is not None and not agents_usable_by(user=user).filter(pk=source.agent_id).exists():
        raise ForkNotAllowed(_("You may not use this run's agent, so you may not fork its runs."))
    if source.status not in TERMINAL_STATUSES:
        raise ForkInvalid(
            _("Only a run that has ended can be forked; this one is %(status)s.")
            % {"status": source.get_status_display()}
        )
    change = _change_checked(request)
    model = _model(request, workspace_id=source.agent.workspace_id) if change == ForkChange.MODEL else None
    if user is not None:
        # The same rule as a posted message's: a version named, a never-published version run
        # again or a model config the agent does not use takes its permission.
        try:
            run_choice_check(
                user=user,
                agent_id=source.agent_id,
                version=request.version if change == ForkChange.VERSION else source.agent_version,
                model_config=model,
            )
        except RunChoiceRefused as exc:
            raise ForkNotAllowed(str(exc)) from None
    version = _version(source, request) if change == ForkChange.VERSION else source.agent_version
    copied = _copy_read(source, request)
    sandbox = _sandbox(source, request, model)
    described = _described(request, version=version, model=model, user=user)
    content = request.message if change == ForkChange.USER_MESSAGE else copied.user_message.content
    with transaction.atomic():
        run = _run_create(
            source=source,
            request=request,
            version=version,
            user=user,
            sandbox=sandbox,
            described=described,
            iterations=copied.iterations,
            content=content,
        )
        _ledger_copy(run=run, copied=copied, request=request, content=content)
        run_enqueue(run_id=run.pk, stamped=True)
    return run


def _change_checked(request: ForkRequest) -> str:
    try:
        change = ForkChange(request.change)
    except ValueError:
        raise ForkInvalid(_("Unknown change %(change)r.") % {"change": request.change}) from None
    if isinstance(request.step, bool) or not isinstance(request.step, int) or request.step < 1:
        raise ForkInvalid(_("The step must be a whole number from 1."))
    if change == ForkChange.USER_MESSAGE:
        if request.step != 1:
            raise ForkInvalid(_("An edited user message forks the run from its first step (step 1)."))
        if not request.message.strip():
            raise ForkInvalid(_("The edited user message is empty."))
    if change == ForkChange.TOOL_RESULT and not request.tool_call_id:
        raise ForkInvalid(_("Say which tool call of the step gets the edited result (its tool call id)."))
    if not isinstance(request.write_results, dict) or not all(
        isinstance(name, str) and isinstance(text, str) for name, text in request.write_results.items()
    ):
        raise ForkInvalid(_("Write results must map tool names to result texts."))
    return change


def _version(source: Run, request: ForkRequest):
    target = request.version
    if target is None or target == "" or isinstance(target, bool):
        raise ForkInvalid(_("Say which version the fork runs: draft, published or a number."))
    if isinstance(target, str) and target not in ("draft", "published"):
        try:
            target = int(target)
        except ValueError:
            raise ForkInvalid(_("The agent has no version %(number)s.") % {"number": target}) from None
    try:
        return version_target(agent=source.agent, target=target)
    except UnknownVersion as exc:
        raise ForkInvalid(str(exc)) from None


def _model(request: ForkRequest, *, workspace_id: int) -> ModelConfig:
    # ModelConfig has no active flag: any config of the run's agent's workspace may be tried, by
    # a user allowed to choose it (agents.run_choices). Another workspace's config (its key, its
    # bill) is "no such config", as a missing id is: its name is never said.
    given = request.model_config_id
    config = None
    if isinstance(given, int | str) and not isinstance(given, bool) and str(given).isdigit():
        config = ModelConfig.objects.filter(pk=int(given), workspace_id=workspace_id).first()
    if config is None:
        raise ForkInvalid(_("There is no model config %(id)s.") % {"id": given})
    return config


def _copy_read(source: Run, request: ForkRequest) -> _Copy:
    """What the fork copies: the conversation before the run, the run's user message and its
    messages up to the fork point (steps before N; with an edited tool result, step N's answer
    and results too). Every copied step must have finished (each of its calls answered)."""
    rows = list(Message.objects.filter(run=source).order_by("order"))
    user_message = next((m for m in rows if m.role == Message.Role.USER), None)
    if user_message is None:
        raise ForkInvalid(_("This run has no user message to fork from."))
    history = list(
        Message.objects.filter(conversation_id=source.conversation_id, order__lt=user_message.order).order_by("order")
    )
    calls = {
        call.pk: call
        for call in LLMCall.objects.filter(pk__in=[m.llm_call_id for m in rows if m.llm_call_id is not None])
    }
    answered = {m.llm_call_id: calls[m.llm_call_id].iteration for m in rows if m.llm_call_id in calls}
    last_step = max(answered.values(), default=0)
    copy_through = request.step if request.change == ForkChange.TOOL_RESULT else request.step - 1
    # A run that stopped before its next model answer (a provider error, a limit, a cancel after
    # its tools ran) can be forked at that next step: retrying it with another model is the point.
    last_asked = any(m.tool_calls for m in rows if answered.get(m.llm_call_id) == last_step)
    if request.step > (last_step + 1 if last_asked and request.change != ForkChange.TOOL_RESULT else max(last_step, 1)):
        raise ForkInvalid(
            _("The run has %(count)s steps; step %(step)s does not exist.") % {"count": last_step, "step": request.step}
        )
    steps, open_calls, edited_found = [], set(), False
    for message in rows:
        if message.order <= user_message.order:
            continue
        if message.role == Message.Role.ASSISTANT:
            iteration = answered.get(message.llm_call_id)
            if iteration is None or iteration > copy_through:
                break
            steps.append(message)
            open_calls = {call["id"] for call in message.tool_calls or [] if isinstance(call, dict) and "id" in call}
            if request.change == ForkChange.TOOL_RESULT and iteration == request.step:
                if request.tool_call_id not in open_calls:
                    raise ForkInvalid(
                        _("Step %(step)s made no tool call %(id)r.")
                        % {"step": request.step, "id": request.tool_call_id}
                    )
                edited_found = True
        elif message.role == Message.Role.TOOL and message.tool_call_id in open_calls:
            steps.append(message)
            open_calls.discard(message.tool_call_id)
    if open_calls or (request.change == ForkChange.TOOL_RESULT and not edited_found):
        raise ForkInvalid(
            _("Step %(step)s of this run did not finish (its tool calls have no results), so it cannot be copied.")
            % {"step": copy_through}
        )
    copied_calls = {m.llm_call_id for m in steps if m.llm_call_id is not None}
    call_ids = [m.tool_call_id for m in steps if m.role == Message.Role.TOOL]
    invocations = list(
        ToolInvocation.objects.filter(run=source, tool_call_id__in=call_ids, llm_call_id__in=copied_calls).order_by(
            "llm_call_id", "position"
        )
    )
    return _Copy(
        history=history,
        user_message=user_message,
        steps=steps,
        calls={pk: calls[pk] for pk in copied_calls},
        invocations=invocations,
        iterations=max((calls[pk].iteration for pk in copied_calls), default=0),
    )


def recorded_calls(*, run: Run) -> list[dict]:
    """The calls `run` and the runs it delegated to (its whole tree) made and got a result for,
    in order, as a sandbox's "recorded" list: what a fork or a replay gives back when the same
    call is made again. Delegate calls are left out: a fork runs its subtree again (and finds
    the children's own calls here); so are calls a sandbox refused unrun, which have no result
    of the tool (a fork of this run may give one, or let it run)."""
    tree, level = [run.pk], [run.pk]
    while level:
        level = list(Run.objects.filter(parent_run_id__in=level).values_list("pk", flat=True))
        tree += level
    delegating = Exists(Run.objects.filter(parent_tool_invocation_id=OuterRef("pk")))
    rows = (
        ToolInvocation.objects.filter(
            run_id__in=tree, status__in=[Status.SUCCEEDED, Status.ERROR], validation_errors=[]
        )
        .exclude(delegating)
        .exclude(arguments__isnull=True)
        .exclude(status=Status.ERROR, error__in=NOT_RUN)
        .order_by("created_at", "id")
        .values_list("tool_name", "arguments", "result", "status")
    )
    return [
        {"name": name, "arguments": arguments, "result": result, "error": status == Status.ERROR}
        for name, arguments, result, status in rows
        if isinstance(arguments, dict)
    ]


def _sandbox(source: Run, request: ForkRequest, model: ModelConfig | None) -> dict:
    # A fork of a fork (or of an evaluation's run) also knows what its source was given: a
    # call its source's own source made is still one made already, and must not run again.
    recorded = recorded_calls(run=source) + list((source.sandbox or {}).get("recorded", []))
    if request.change == ForkChange.TOOL_RESULT:
        edited = ToolInvocation.objects.filter(run=source, tool_call_id=request.tool_call_id).first()
        if edited is not None and isinstance(edited.arguments, dict):
            # The same call made again in the fork gets the edited result, not the recorded one.
            recorded.insert(
                0, {"name": edited.tool_name, "arguments": edited.arguments, "result": request.result, "error": False}
            )
    given = dict((source.sandbox or {}).get("results", {}))
    given.update(request.write_results)
    sandbox = {
        "fork": str(source.pk),
        "recorded": _first_of_each(recorded),
        "results": given,
        "live_reads": True,
        "delegate": True,
    }
    if request.real_writes:
        sandbox["real_writes"] = "approval"
    if model is not None:
        sandbox["model"] = dict(model_snapshot(model))
    return sandbox


def _first_of_each(recorded: list[dict]) -> list[dict]:
    """The first recorded result of each call (tool and arguments), the one a match gives: a
    chain of forks would otherwise carry every earlier link's list again."""
    seen, kept = set(), []
    for call in recorded:
        key = (call["name"], arguments_hash(call["arguments"]))
        if key not in seen:
            seen.add(key)
            kept.append(call)
    return kept


def _described(request: ForkRequest, *, version, model: ModelConfig | None, user) -> dict:
    """Run.fork_change: what changed, and who forked."""
    described = {"kind": str(request.change)}
    if request.change == ForkChange.VERSION:
        described["version"] = version.number
    elif request.change == ForkChange.MODEL:
        described.update(model_config_id=model.pk, model=model.model)
    elif request.change == ForkChange.TOOL_RESULT:
        described.update(tool_call_id=request.tool_call_id, result=request.result)
    elif request.change == ForkChange.USER_MESSAGE:
        described["message"] = request.message
    if request.write_results:
        described["write_results"] = request.write_results
    described["real_writes"] = request.real_writes
    if user is not None:
        described.update(by=user.get_username(), by_id=user.pk)
    return described


def _run_create(
    *, source: Run, request: ForkRequest, version, user, sandbox: dict, described: dict, iterations: int, content: str
) -> Run:
    conversation = conversation_create(
        agent=source.agent,
        owner=user,
        title=_("Fork of run %(run)s at step %(step)s") % {"run": source.pk, "step": request.step},
        metadata={"forked_from": str(source.pk), "fork_step": request.step},
    )
    timeout = snapshot_parse(version.snapshot)["agent"]["run_timeout_seconds"]
    now = timezone.now()
    run = Run.objects.create(
        conversation=conversation,
        agent=source.agent,
        agent_version=version,
        deadline=now + timedelta(seconds=timeout) if timeout else None,
        enqueued_at=now,
        iterations=iterations,
        sandbox=sandbox,
        forked_from=source,
        fork_step=request.step,
        fork_change=described,
        trigger=RunTrigger.FORK,
        **run_trace_fields(),
    )
    run_started_record(
        run=run,
        user_id=user.pk if user is not None else None,
        content=content,
        version_number=version.number,
        reason=f"forked from run {source.pk} at step {request.step}",
    )
    return run


def _ledger_copy(*, run: Run, copied: _Copy, request: ForkRequest, content: str) -> None:
    """The copied rows: the conversation before the run, the user message, each copied step's
    call (marked copied, no usage), its tool calls (the edited one with its new result) and its
    messages. The user message, edited, is screened again by the fork's first step."""
    now = timezone.now()
    if copied.history:
        messages_append(conversation_id=run.conversation_id, run_id=None, messages=[_fields(m) for m in copied.history])
    user_fields = _fields(copied.user_message)
    if request.change == ForkChange.USER_MESSAGE:
        user_fields.update(content=content, screened_content=None)
    calls = {
        pk: LLMCall(
            run=run,
            iteration=call.iteration,
            attempt=1,
            purpose=LLMCall.Purpose.STEP,
            model_config_id=call.model_config_id,
            provider=call.provider,
            model_name=call.model_name,
            request=call.request,
            response=call.response,
            status=LLMCall.Status.SUCCEEDED,
            http_status=call.http_status,
            finish_reason=call.finish_reason,
            copied=True,
            finished_at=now,
        )
        for pk, call in copied.calls.items()
    }
    LLMCall.objects.bulk_create(calls.values())
    edited = request.tool_call_id if request.change == ForkChange.TOOL_RESULT else None
    ToolInvocation.objects.bulk_create(
        [
            _invocation_copy(
                invocation, run=run, call=calls[invocation.llm_call_id], edited=edited, result=request.result, now=now
            )
            for invocation in copied.invocations
        ]
    )
    step_fields = []
    for message in copied.steps:
        fields = _fields(message)
        if message.llm_call_id is not None:
            fields["llm_call_id"] = calls[message.llm_call_id].pk
        if message.role == Message.Role.TOOL and message.tool_call_id == edited:
            fields["content"] = request.result
        step_fields.append(fields)
    messages_append(conversation_id=run.conversation_id, run_id=run.pk, messages=[user_fields, *step_fields])


def _invocation_copy(
    source: ToolInvocation, *, run: Run, call: LLMCall, edited: str | None, result: str, now
) -> ToolInvocation:
    is_edited = source.tool_call_id == edited
    return ToolInvocation(
        run=run,
        llm_call=call,
        tool_id=source.tool_id,
        tool_name=source.tool_name,
        tool_call_id=source.tool_call_id,
        position=source.position,
        raw_arguments=source.raw_arguments,
        arguments=source.arguments,
        validation_errors=source.validation_errors,
        status=Status.SUCCEEDED if is_edited else source.status,
        result=result if is_edited else source.result,
        truncated=False if is_edited else source.truncated,
        error="" if is_edited else source.error,
        details={} if is_edited else source.details,
        idempotency_key=f"{run.pk}:{source.tool_call_id}",
        simulated=is_edited or source.simulated,
        copied=True,
        started_at=now,
        finished_at=now,
    )


def _fields(message: Message) -> dict:
    """A message's content as messages_append writes it again (order, run and call are the copy's)."""
    return {
        "role": message.role,
        "content": message.content,
        "tool_calls": message.tool_calls,
        "tool_call_id": message.tool_call_id,
        "name": message.name,
        "reasoning": message.reasoning,
        "screened_content": message.screened_content,
        "parts": message.parts,
    }
