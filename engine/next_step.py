"""What a run does next, decided from what the database says and nothing else.

`next_step` reads the run row, the messages its model would see and the agent-version snapshot
(plus the time and the agent's usage today, so the caller does every read) and returns one of
three values; the loop executes it (engine.loop). The order of the checks is the promise:

1. a cancel the API accepted ends the run, whatever else holds;
2. past the deadline, the run ends (timeout);
3. the last message is the model's, with tool calls: run them (even at the iteration limit or
   over budget: the calls were asked for and are recorded, their results end the step), unless
   the runs it delegated to used up its budget (engine.delegation: the tree stops);
4. the last message is the model's, without tool calls: that is the answer;
5. the model was called as often as the agent allows: max_iterations;
6. a run or daily budget is used up: budget;
7. otherwise (a user message, or tool results): call the model.
"""

from dataclasses import dataclass
from decimal import Decimal

from django.utils.translation import gettext_lazy as _

from agents.snapshot import AgentSnapshot
from conversations.models import Message, Run, RunStatus, StopReason
from engine.delegation import tree_budget_finish
from engine.limits import budget_limit, deadline_passed
from engine.speech import agent_says

MAX_ITERATIONS_MESSAGE = _(
    "I stopped here: this task needed more than {limit} model steps, which is this agent's limit, "
    "and I have no final answer yet. Please narrow the question or ask me to continue."
)


@dataclass(frozen=True)
class CallModel:
    """Send the context to the model; its answer is the run's next message."""


@dataclass(frozen=True)
class RunTools:
    """Run the tool calls of `message`, the model's last message."""

    message: Message


@dataclass(frozen=True)
class Finish:
    """End the run for `reason`; `message`, if any, tells the user why (the run's last message)."""

    reason: str
    message: str | None = None

    @property
    def status(self) -> str:
        # Only a cancel ends a run other than completed here: a limit is an answer, said in words.
        return RunStatus.CANCELLED if self.reason == StopReason.CANCELLED else RunStatus.COMPLETED


Step = CallModel | RunTools | Finish


def next_step(
    run: Run, messages: list[Message], snapshot: AgentSnapshot, *, now, usage_today: tuple[int, Decimal] | None = None
) -> Step:
    """The next step of `run` (see the module's docstring); `usage_today` is limits.daily_usage's."""
    if run.cancel_requested:
        return Finish(StopReason.CANCELLED)
    limit = deadline_passed(run, snapshot, now=now)
    if limit:
        return Finish(limit.stop_reason, limit.message)
    last = messages[-1]
    if last.role == Message.Role.ASSISTANT:
        # Agents as tools: runs this run delegated to may have used up its budget while it waited.
        limit = tree_budget_finish(run, snapshot) if last.tool_calls else None
        if limit:
            return Finish(limit.stop_reason, limit.message)
        return RunTools(last) if last.tool_calls else Finish(StopReason.FINAL_ANSWER)
    max_iterations = snapshot["agent"]["max_iterations"]
    if run.iterations >= max_iterations:
        return Finish(StopReason.MAX_ITERATIONS, agent_says(snapshot, MAX_ITERATIONS_MESSAGE, limit=max_iterations))
    limit = budget_limit(run, snapshot, usage_today=usage_today)
    if limit:
        return Finish(limit.stop_reason, limit.message)
    return CallModel()
