"""One model step: build the context, call the model (model_call.py: attempts, retries, the
fallback model) and record the assistant message with the completed call.

An answer with neither text nor tool calls is no answer (small models do this): it is tried
again like a failed attempt, and if every attempt is empty the step ends with EmptyAnswer. A
server that says the request exceeds its context gets one more try with the history folded.

What follows the answer is decided with it, before the commit that records it
(engine.next_step, `answered`), and that commit may act on the decision itself instead of the
next step: mark the first tool call started (RunTools.start_first), or end the run after a final
answer (engine.runs.AnswerEnding). Its guard then checks what could have changed meanwhile; if it
does not match, the answer is recorded again without it: one statement's guard can only match
or not, what it checks can change up to the statement itself, and the answer must be recorded
whatever it finds (the second try comes only when something stood in the way: a cancel, a
webhook that listens). The decision is handed to the loop (StepResult.decision), which executes it.
"""

from dataclasses import dataclass
from functools import partial

from django.utils import timezone

from agents.guardrails import Hit
from agents.providers import LLMResponse
from agents.snapshot import AgentSnapshot, snapshot_tool, snapshot_tools
from conversations.batch import Is, Row, exists, listening_read, messages_add, run_guard
from conversations.models import LLMCall, Message, Run, StopReason, ToolInvocation
from conversations.selectors import run_step_row
from engine.answer_schema import run_schema
from engine.context import build_context
from engine.guardrails import (
    OutputReview,
    output_hits,
    output_review,
    screened,
    streams_answer,
)
from engine.invocations import Started, approval_unchanged, invocations_add
from engine.memory import Recall, memories_recall
from engine.model_call import (
    Answer,
    ContextOverflow,
    Guard,
    ModelRequest,
    ModelStepFailed,
    answer_record,
    answer_writes,
    model_call,
)
from engine.next_step import Finish, RunTools, Step, next_step
from engine.overrun import answer_truncated, overflow_error, truncation_error
from engine.part_conversion import parts_converted
from engine.routing import Route, run_route
from engine.runs import AnswerEnding

FORCED_CHOICES = ("required", "tool")


@dataclass
class StepResult:
    message: Message
    response: LLMResponse
    # What the agent's output guardrails made of a final answer, if any of them matched.
    guardrail: OutputReview | None = None
    # The run as the commit that recorded the answer left it (its guard returns the columns a
    # step reads): the next step starts from it instead of reading the run again.
    run: Run | None = None
    # The rows of the tool calls the answer asks for, written with it (engine.invocations).
    invocations: list[ToolInvocation] | None = None
    # A final answer: whether a webhook hears the run, read with the answer's commit for the
    # ending that follows it (None: not read).
    listening: bool | None = None
    # The tool call the answer's commit marked started (RunTools.start_first), if it did.
    started: Started | None = None
    # A final answer whose commit ended the run (engine.runs.AnswerEnding), if it did.
    ending: AnswerEnding | None = None
    # What follows the answer, decided with it (engine.next_step): what the loop executes next.
    decision: Step | None = None


MAX_CALL_ID = 128  # ToolInvocation.tool_call_id and Approval.tool_call_id


def _usable_call_id(value) -> bool:
    """A model's id is kept only when it can be stored and sent back as it came: text of a
    storable length, without NUL or lone surrogates (PostgreSQL refuses both). Any other id is
    replaced by our own, which the stored assistant message and the tool results then share."""
    if not isinstance(value, str) or not value or len(value) > MAX_CALL_ID - 4 or "\x00" in value:
        return False
    return not any("\ud800" <= ch <= "\udfff" for ch in value)


def _normalised_tool_calls(response: LLMResponse, run: Run, iteration: int) -> list[dict]:
    """Some providers (seed 000's) send tool calls without ids; results must be matched to
    calls, so every call gets a stable id before it is stored."""
    calls, seen = [], set()
    for index, call in enumerate(response.tool_calls):
        call_id = call.id if _usable_call_id(call.id) else f"call_{run.pk.hex[:12]}_{iteration}_{index}"
        if call_id in seen:
            call_id = f"{call_id}_{index}"
        seen.add(call_id)
        calls.append({"id": call_id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}})
    return calls


def _answer_decision(
    *, run: Run, snapshot: AgentSnapshot, messages: list[Message], response: LLMResponse, calls: list[dict]
) -> Step:
    """What follows an answer asking for `calls` (none: a final answer), decided before the
    commit that records it."""
    answer = Message(
        conversation_id=run.conversation_id,
        run_id=run.pk,
        role=Message.Role.ASSISTANT,
        content=response.content,
        tool_calls=calls,
    )
    truncated = truncation_error(response=response, model=snapshot["model"]) if answer_truncated(response) else ""
    return next_step(run, [*messages, answer], snapshot, now=timezone.now(), answered=True, truncated=truncated)


def _first_call_guard(*, run: Run, owner: str, snapshot: AgentSnapshot, calls: list[dict]) -> Guard:
    """The guard of an answer's commit that marks its first call started: it checks what could
    change before the commit, that no cancel was accepted since the run was read, that the
    call's id is new in the run (a call recorded before is the tool step's to read) and that
    the tool's approval now is the one the version pinned, under which the call was decided to
    run (a policy changed since is the tool step's to apply: engine.invocations.approval_unchanged)."""
    recorded = exists(ToolInvocation, run_id=Row("id"), tool_call_id=calls[0]["id"])
    unchanged = approval_unchanged(
        spec=snapshot_tool(snapshot, calls[0]["function"]["name"]), agent_id=snapshot["agent"]["id"]
    )
    where = (Is("cancel_requested", False), ~recorded, *unchanged)
    return partial(run_guard, run_id=run.pk, lease_owner=owner, where=where)


def effective_tool_choice(*, run: Run, snapshot: AgentSnapshot, messages: list[Message]) -> tuple[str, str]:
    """A forced choice ('required' or a named tool) holds until the run has called a tool, then
    the model may answer: forcing every step would loop until a limit stops the run."""
    agent = snapshot["agent"]
    choice, name = agent.get("tool_choice", "auto"), agent.get("tool_choice_name", "")
    if choice not in FORCED_CHOICES:
        return choice, ""
    if any(m.run_id == run.pk and m.role == Message.Role.ASSISTANT and m.tool_calls for m in messages):
        return "auto", ""
    if choice == "tool" and snapshot_tool(snapshot, name) is None:
        raise ModelStepFailed(f"The agent's tool choice names the tool {name!r}, which it does not have (enabled).")
    return choice, name


def llm_step(*, run: Run, owner: str, snapshot: AgentSnapshot, messages: list[Message]) -> StepResult:
    # The model the run's routing rules picked, decided at its first step (engine.routing): the
    # step goes on with the version's snapshot holding that model.
    route = run_route(run=run, owner=owner, snapshot=snapshot, messages=messages)
    if route is not None:
        snapshot = route.snapshot
    try:
        return _fitted_step(run=run, owner=owner, snapshot=snapshot, messages=messages, route=route)
    except ContextOverflow as exc:
        # Said as what happened: a model whose own answers filled its context produced too much.
        error = overflow_error(server_said=exc.server_said, messages=messages, run_id=run.pk)
        raise ModelStepFailed(error) from exc


def _fitted_step(
    *, run: Run, owner: str, snapshot: AgentSnapshot, messages: list[Message], route: Route | None
) -> StepResult:
    """The step, and once more with the history folded if the server says it does not fit."""
    iteration = run.iterations + 1
    tool_choice, tool_name = effective_tool_choice(run=run, snapshot=snapshot, messages=messages)
    # Models see the requester's messages as the input guardrails left them (engine.guardrails).
    shown = screened(messages)
    # The end user's long-term memories, if the version keeps them (engine.memory).
    recall = memories_recall(run=run, snapshot=snapshot, messages=shown, iteration=iteration)
    # Parts the models do not take, as text (engine.part_conversion): None without any.
    converted = parts_converted(run=run, owner=owner, snapshot=snapshot, messages=shown, iteration=iteration)
    wire_messages = build_context(
        run=run,
        owner=owner,
        snapshot=snapshot,
        messages=shown,
        iteration=iteration,
        memory=recall.message,
        converted=converted,
    )
    try:
        return _call(
            run=run,
            owner=owner,
            snapshot=snapshot,
            messages=messages,
            iteration=iteration,
            wire_messages=wire_messages,
            tool_choice=tool_choice,
            tool_name=tool_name,
            recall=recall,
            route=route,
        )
    except ContextOverflow:
        folded = build_context(
            run=run,
            owner=owner,
            snapshot=snapshot,
            messages=shown,
            iteration=iteration,
            shrink=True,
            memory=recall.message,
            converted=converted,
        )
        if len(folded) >= len(wire_messages):
            raise  # nothing older to fold: the same request would fail the same way
    return _call(
        run=run,
        owner=owner,
        snapshot=snapshot,
        messages=messages,
        iteration=iteration,
        wire_messages=folded,
        tool_choice=tool_choice,
        tool_name=tool_name,
        recall=recall,
        route=route,
    )


def _call(
    *,
    run: Run,
    owner: str,
    snapshot: AgentSnapshot,
    messages: list[Message],
    iteration: int,
    wire_messages: list[dict],
    tool_choice: str,
    tool_name: str,
    recall: Recall,
    route: Route | None,
) -> StepResult:
    # Asked of models that keep to a schema; every answer is checked all the same (next_step), so
    # none is relayed as it arrives: an answer is only the run's once it matched.
    schema = run_schema(run, snapshot)[0]
    request = ModelRequest(
        messages=wire_messages,
        tools=snapshot["tools"],
        tool_choice=tool_choice,
        tool_name=tool_name,
        parallel_tool_calls=snapshot["agent"]["parallel_tool_calls"],
        reject_empty=True,
        relay_deltas=streams_answer(snapshot) and schema is None,
        attempt_writes=partial(recall.record, run_id=run.pk) if recall.memories else None,
        routing=route.decision if route else None,
        routing_store=bool(route and route.new),
        answer_schema=schema,
    )
    answer = model_call(
        run=run,
        owner=owner,
        snapshot=snapshot,
        purpose=LLMCall.Purpose.STEP,
        iteration=iteration,
        request=request,
    )
    response = answer.response
    calls = _normalised_tool_calls(response, run, iteration)
    decision = _answer_decision(run=run, snapshot=snapshot, messages=messages, response=response, calls=calls)
    if isinstance(decision, Finish) and decision.reason == StopReason.TRUNCATED:
        # Cut-off calls are left out of the recorded message (the call's ledger row keeps them),
        # so no step, now or after a crash, can run one.
        calls = []
    hits = None
    if not calls:
        # A final answer is judged by the output rules (moderation calls included) before it is recorded.
        hits = output_hits(run=run, owner=owner, snapshot=snapshot, iteration=iteration, content=response.content)
    recorded = _Recorded(run=run, snapshot=snapshot, calls=calls, hits=hits)
    recorded.decision = decision
    # The answer's commit acts on the decision made with it, if it may (see the module); if its
    # guard matches nothing, the answer is recorded again under the lease's fence alone.
    plan = _plan(run=run, owner=owner, snapshot=snapshot, decision=recorded.decision, calls=calls, hits=hits)
    if plan is not None:
        result = recorded.commit(answer, plan)
        if result is not None:
            return result
    return recorded.commit(answer, None)


@dataclass
class _Plan:
    """What the answer's commit does beyond recording it, under its own guard: start the first
    tool call (`ending` None), or end the run (AnswerEnding)."""

    guard: Guard
    ending: AnswerEnding | None = None


def _plan(
    *, run: Run, owner: str, snapshot: AgentSnapshot, decision: Step, calls: list[dict], hits: list[Hit] | None
) -> _Plan | None:
    if isinstance(decision, RunTools):
        if not decision.start_first:
            return None
        return _Plan(_first_call_guard(run=run, owner=owner, snapshot=snapshot, calls=calls))
    if not isinstance(decision, Finish) or decision.reason != StopReason.FINAL_ANSWER or hits:
        # Not the usual ending: a limit that stops the calls asked for, or an output rule that
        # matched the answer; engine.loop ends the run, enforcing what the rule does, after
        # the commit (engine.runs.AnswerEnding).
        return None
    ending = AnswerEnding(run.pk, owner, output=decision.output)
    return _Plan(ending.guard, ending)


@dataclass
class _Recorded:
    """The answer's commit: the assistant message, its tool calls' rows, the output rules'
    review and, as planned, the first call started or the run's end."""

    run: Run
    snapshot: AgentSnapshot
    calls: list[dict]
    hits: list[Hit] | None
    decision: Step | None = None

    def commit(self, answer: Answer, plan: _Plan | None) -> StepResult | None:
        """The StepResult, or None if the plan's guard matched nothing (nothing was written)."""
        run, response, calls = self.run, answer.response, self.calls
        batch = answer_writes(answer, guard=plan.guard if plan else None)
        review = (
            None
            if calls
            else output_review(batch, run_id=run.pk, snapshot=self.snapshot, content=response.content, hits=self.hits)
        )
        [message] = messages_add(
            batch,
            conversation_id=run.conversation_id,
            run_id=run.pk,
            messages=[
                {
                    "role": Message.Role.ASSISTANT,
                    "content": review.content if review is not None else response.content,
                    "tool_calls": calls or None,
                    "llm_call_id": answer.call.pk,
                    "reasoning": response.reasoning,
                }
            ],
        )
        rows = None
        if calls:
            # The calls' rows are written with the answer: the tool step starts with them.
            tools = snapshot_tools(self.snapshot)
            rows = invocations_add(
                batch, run=run, llm_call_id=answer.call.pk, calls=calls, tools=tools, start_first=plan is not None
            )
        elif plan is not None:
            # The run ends with this commit; its guard made sure no webhook must hear it.
            plan.ending.writes(batch, call_id=answer.call.pk)
        else:
            # The run ends next, usually in one statement: whether a listener (a webhook) must
            # hear that is read here, in this commit's statement, instead of by a read of its own.
            # A webhook saved between the two misses the ending, as one saved while the ending is
            # written did.
            heard = listening_read(batch, run_id=run.pk)
        results = answer_record(answer, batch, tentative=plan is not None)
        if results is None:
            return None
        result = StepResult(
            message,
            response,
            review,
            run=run_step_row(results["run"], run.conversation),
            invocations=rows,
            decision=self.decision,
        )
        if calls and plan is not None:
            result.started = Started(rows[0].pk, results.get("tool") or {})
        elif plan is not None:
            result.ending = plan.ending
        elif not calls:
            result.listening = heard(results)
        return result
