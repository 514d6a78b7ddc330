"""What a run does next, decided from what the database says and nothing else.

`next_step` reads the run row, the messages its model would see and the agent-version snapshot
(plus the time and the agent's usage today, so the caller does every read) and returns one of
four values; the loop executes it (engine.loop). The order of the checks is the promise:

1. a cancel the API accepted ends the run, whatever else holds;
2. past the deadline, the run ends (timeout), unless the model's answer without tool calls has
   just arrived (`answered`): the call stopped waiting at the deadline, and what it brought is
   the answer;
3. the model's answer was cut off at its output limit or its context (`truncated`, known with
   the answer only): the run ends (truncated), and none of the calls it asked for runs, since
   their arguments may be cut off too;
4. the last message is the model's, with tool calls: run them (even at the iteration limit or
   over budget: the calls were asked for and are recorded, their results end the step), unless
   the runs it delegated to used up its budget (engine.delegation: the tree stops);
5. the last message is the model's, without tool calls: that is the answer, if the run has no
   output schema or the answer matches it (its parsed value goes with the ending); one that does
   not is sent back with what is wrong (Repair) while the run has repair turns left, then ends
   the run: schema_invalid (engine.answer_schema);
6. the model was called as often as the agent allows: max_iterations;
7. a run or daily budget is used up: budget;
8. otherwise (a user message, or tool results): call the model.

Decided with the model's answer (`answered`: engine.llm_step asks before the commit that
records it), the decision also says what that commit may do itself instead of the next step:
mark the first tool call started (RunTools.start_first), or end the run after a final answer
(Finish). The loop then carries the decision to the next step, which executes it (engine.loop).

The loop guard (repeat_found) is one of its inputs: a model that keeps making the same calls is
told so once, then stopped.

Two patterns count, whatever the calls' validation outcome (a model repeating malformed
arguments or an unknown name loops as surely as one repeating valid calls):
- a streak: consecutive steps that each call one tool only, with any arguments;
- a cycle: the same steps, names and arguments, repeating with a period of one to three steps
  (A A A A, A B A B, A B C A B C), whatever the calls' arguments are.
Either is a loop once it spans more steps than the agent's `max_same_tool_streak`. This is a
pure function of the run's tool-call steps, so it is tested without I/O.
"""

import json
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Protocol

from django.utils.translation import gettext_lazy as _

from agents.output_schema import answer_read
from agents.snapshot import AgentSnapshot, snapshot_tools
from conversations.models import Message, Run, RunStatus, StopReason
from engine.answer_schema import SCHEMA_INVALID_MESSAGE, repairs_made, run_schema
from engine.delegation import tree_budget_finish
from engine.invocations import invocation_new, runs_at_once
from engine.limits import budget_limit, deadline_passed
from engine.speech import agent_says
from tools.arguments import parse_arguments
from tools.calls import call_name

MAX_ITERATIONS_MESSAGE = _(
    "I stopped here: this task needed more than {limit} model steps, which is this agent's limit, "
    "and I have no final answer yet. Please narrow the question or ask me to continue."
)
TRUNCATED_MESSAGE = _(
    "I stopped here: my answer was cut off before it was complete, so I did not act on it. "
    "Please ask for something shorter, or split the task into smaller steps."
)


@dataclass(frozen=True)
class CallModel:
    """Send the context to the model; its answer is the run's next message."""


@dataclass(frozen=True)
class RunTools:
    """Run the tool calls of `message`, the model's last message. `start_first`: decided with the
    answer, its first call runs at once, so the commit that records the answer may mark it
    started (the mark the tool step would otherwise commit on its own, before the tool starts)."""

    message: Message
    start_first: bool = False


class MadeEnding(Protocol):
    """An ending the answer's commit made itself (engine.runs.AnswerEnding), named by what the loop
    asks of it, so that this module, which engine.runs reads, does not read engine.runs back."""

    def follow(self) -> None: ...


@dataclass(frozen=True)
class Finish:
    """End the run for `reason`; `message`, if any, tells the user why (the run's last message),
    `error` what failed. What the commit of a final answer found, for engine.runs.run_finish:
    `listening`, whether a webhook hears the run, when it read that; `made`, the ending itself
    (engine.runs.AnswerEnding), when it made it."""

    reason: str
    message: str | None = None
    error: str = ""
    listening: bool | None = field(default=None, compare=False)
    made: MadeEnding | None = field(default=None, compare=False)
    # A final answer that matched the run's output schema: its parsed value (Run.output_parsed).
    output: object = None

    @property
    def status(self) -> str:
        # A limit is an answer, said in words: only a cancel, or a model the platform could not
        # get an answer from, ends a run other than completed.
        if self.reason == StopReason.CANCELLED:
            return RunStatus.CANCELLED
        return RunStatus.FAILED if self.reason == StopReason.PROVIDER_ERROR else RunStatus.COMPLETED


@dataclass(frozen=True)
class Repair:
    """The model's last message, a final answer, does not match the run's output schema
    (`errors`, what is wrong): send it back (engine.answer_schema.answer_repair), repair turn
    `repair` of at most `of`, then call the model again."""

    errors: list[str]
    repair: int
    of: int


Step = CallModel | RunTools | Finish | Repair


def next_step(
    run: Run,
    messages: list[Message],
    snapshot: AgentSnapshot,
    *,
    now,
    usage_today: tuple[int, Decimal] | None = None,
    answered: bool = False,
    truncated: str = "",
) -> Step:
    """The next step of `run` (see the module's docstring); `usage_today` is limits.daily_usage's;
    `answered`: the last message is the model's answer, about to be recorded; `truncated`: why
    that answer was cut off (engine.overrun), if it was."""
    if run.cancel_requested:
        return Finish(StopReason.CANCELLED)
    last = messages[-1]
    answer = last.role == Message.Role.ASSISTANT
    limit = None if answered and answer and not last.tool_calls else deadline_passed(run, snapshot, now=now)
    if limit:
        return Finish(limit.stop_reason, limit.message)
    if answer and answered and truncated:
        # A cut-off text is still the best answer there is; cut-off calls are none, said in words.
        told = last.tool_calls or not (last.content or "").strip()
        return Finish(StopReason.TRUNCATED, agent_says(snapshot, TRUNCATED_MESSAGE) if told else None, truncated)
    if answer:
        # Agents as tools: runs this run delegated to may have used up its budget while it waited.
        limit = tree_budget_finish(run, snapshot) if last.tool_calls else None
        if limit:
            return Finish(limit.stop_reason, limit.message)
        if not last.tool_calls:
            return _final_answer(run, messages, snapshot)
        return RunTools(last, start_first=answered and _first_runs_at_once(run, messages, snapshot))
    max_iterations = snapshot["agent"]["max_iterations"]
    if run.iterations >= max_iterations:
        return Finish(StopReason.MAX_ITERATIONS, agent_says(snapshot, MAX_ITERATIONS_MESSAGE, limit=max_iterations))
    limit = budget_limit(run, snapshot, usage_today=usage_today)
    if limit:
        return Finish(limit.stop_reason, limit.message)
    return CallModel()


def _final_answer(run: Run, messages: list[Message], snapshot: AgentSnapshot) -> Finish | Repair:
    """The last message is a final answer: held to the run's output schema, if it has one."""
    schema, repairs = run_schema(run, snapshot)
    if schema is None:
        return Finish(StopReason.FINAL_ANSWER)
    read = answer_read(schema, messages[-1].content)
    if read.valid:
        return Finish(StopReason.FINAL_ANSWER, output=read.value)
    made = repairs_made(messages, run.pk)
    if made < repairs:
        return Repair(read.errors, made + 1, repairs)
    message = agent_says(snapshot, SCHEMA_INVALID_MESSAGE, tries=made + 1)
    error = "The answer does not match the output schema: " + "; ".join(read.errors)
    return Finish(StopReason.SCHEMA_INVALID, message, error)


def _first_runs_at_once(run: Run, messages: list[Message], snapshot: AgentSnapshot) -> bool:
    """Whether the first call of the answer (the last message) runs as soon as its step reaches
    it (engine.invocations.runs_at_once), and the run has no delegated usage: the only input of
    step 3 that may change under the answer's commit, whose guard does not check it."""
    if run.children_tokens or run.children_cost:
        return False
    tools = snapshot_tools(snapshot)
    first = invocation_new(run=run, llm_call_id=None, position=0, call=messages[-1].tool_calls[0], tools=tools)
    held_back = repeat_found(run_steps(messages, run.pk), snapshot["agent"]["max_same_tool_streak"]) is not None
    return runs_at_once(run=run, invocation=first, spec=tools.get(first.tool_name), held_back=held_back)


# --- The loop guard

MAX_PERIOD = 3


@dataclass(frozen=True)
class Repeat:
    names: list[str]  # the tools repeated, in the order first called
    steps: int  # how many steps, the current one included, the pattern spans
    cycle: bool  # names and arguments repeat (not only the tool's name)
    earlier: list[Message]  # the pattern's steps before the current one


def _call_signature(call: dict) -> tuple[str, str]:
    name, _ = call_name(call)
    raw = (call.get("function") or {}).get("arguments")
    parsed = parse_arguments(raw)
    if parsed.arguments is not None:
        return name, json.dumps(parsed.arguments, sort_keys=True, ensure_ascii=False)
    return name, raw.strip() if isinstance(raw, str) else repr(type(raw))


def _step_signature(message: Message) -> tuple:
    # Parallel calls may come in any order: the step is the same set of calls.
    return tuple(sorted(_call_signature(call) for call in message.tool_calls))


def _names(steps: list[Message]) -> list[str]:
    names: list[str] = []
    for message in steps:
        for call in message.tool_calls:
            name, _ = call_name(call)
            if name not in names:
                names.append(name)
    return names


def _streak(steps: list[Message]) -> int:
    """How many steps, ending with the last, called only one and the same tool."""
    names = {call_name(call)[0] for call in steps[-1].tool_calls}
    if len(names) != 1:
        return 0
    count = 0
    for message in reversed(steps):
        if {call_name(call)[0] for call in message.tool_calls} != names:
            break
        count += 1
    return count


def _cycle(steps: list[Message], limit: int) -> int:
    """The length of the longest repeating tail of period 1 to 3 that makes a loop, or 0."""
    # A pattern longer than the limit shows in the last limit + 1 steps, two periods at least.
    window = steps[-max(limit + 1, 2 * MAX_PERIOD) :]
    signatures = [_step_signature(m) for m in window]
    for period in range(1, MAX_PERIOD + 1):
        length = period
        while length < len(signatures) and signatures[-length - 1] == signatures[-length - 1 + period]:
            length += 1
        if length > limit and length >= 2 * period:
            return length
    return 0


def run_steps(messages: list[Message], run_id) -> list[Message]:
    """The run's assistant messages with tool calls, in order: only this run's steps count, since
    earlier questions that needed the same tool are no loop."""
    return [m for m in messages if m.run_id == run_id and m.role == Message.Role.ASSISTANT and m.tool_calls]


def repeat_found(steps: list[Message], limit: int) -> Repeat | None:
    """`steps`: the run's assistant messages with tool calls, in order, ending with the current."""
    streak = _streak(steps)
    if streak > limit:
        return Repeat(_names(steps[-1:]), streak, False, steps[-streak:-1])
    length = _cycle(steps, limit)
    if length:
        return Repeat(_names(steps[-length:]), length, True, steps[-length:-1])
    return None
