"""A step's tool calls as ToolInvocation rows: built from the model's answer, and written with it.

The rows of the calls an answer asks for are written in the statement that records the answer
(engine.llm_step), so the tool step that follows starts with them instead of inserting them in a
statement of its own; a tool step taken again (after a crash, an approval, a folded history)
inserts what is missing and reads the rest (engine.tool_step._step_invocations). A call whose
row exists already (the same id earlier in the run) is skipped here, and the tool step reads it.

The answer's statement may also mark its first call started (`start_first`), with the call's
tool.started event and the tool's live state: the mark that the tool step would otherwise commit
on its own, before the tool starts (engine.llm_step says when it may; engine.tool_step then runs
the call without marking it again).
"""

from dataclasses import dataclass

from django.utils import timezone

from agents.snapshot import DELEGATE_KIND
from conversations import events
from conversations.batch import Batch, Select, event_add, row_insert
from conversations.events import EventType
from conversations.models import Run, ToolInvocation
from platform_site.text import scrub_nul
from tools.approval_policy import approval_need
from tools.arguments import parse_arguments, validate_arguments
from tools.calls import call_arguments, call_name
from tools.models import ToolDefinition


def invocation_new(*, run: Run, llm_call_id: int, position: int, call: dict, tools: dict) -> ToolInvocation:
    """The call's row; whatever shape the model gave it, what is wrong becomes its validation
    errors (the model reads them) and what is stored fits its columns."""
    name, name_problem = call_name(call)
    raw = call_arguments(call)
    spec = tools.get(name) if name_problem is None else None
    parsed = parse_arguments(raw)
    arguments = scrub_nul(parsed.arguments)
    errors = list(parsed.errors)
    if spec is None:
        errors = [
            f"{name_problem or f'There is no tool named {name!r}.'} Available tools: {', '.join(tools) or 'none'}."
        ]
    elif arguments is not None:
        # Validated as stored: a NUL in a key would otherwise reach the error text unstorable.
        errors += validate_arguments(spec["parameters"], arguments)
    return ToolInvocation(
        run_id=run.pk,
        tool_call_id=call["id"],
        llm_call_id=llm_call_id,
        tool_id=spec["id"] if spec else None,
        tool_name=name,
        position=position,
        raw_arguments=raw,
        arguments=arguments,
        validation_errors=errors,
        idempotency_key=f"{run.pk}:{call['id']}",
    )


@dataclass(frozen=True)
class Started:
    """The call an answer's commit marked started, and its tool's live state as read then."""

    invocation_id: int
    live: dict


def runs_at_once(*, run: Run, invocation: ToolInvocation, spec: dict | None, held_back: bool) -> bool:
    """Whether a call whose row is new runs as soon as its step reaches it, as engine.tool_step
    decides: no loop hint holds it back (`held_back`), its arguments are valid, the run is not an
    evaluation's (whose calls take the results its case gives), the tool is not an agent (a
    delegated child run) and no person must approve the call."""
    if held_back or invocation.validation_errors or spec is None or run.eval_tools is not None:
        return False
    if spec["kind"] == DELEGATE_KIND:
        return False
    return not approval_need(spec=spec, arguments=invocation.arguments).required


def rerunnable(spec: dict) -> bool:
    """A call that may run again when its outcome is unknown: a read, or an idempotent write."""
    return spec["side_effect"] == "read" or spec["idempotent"]


def tool_live_read(batch: Batch, spec: dict) -> None:
    """The tool's live state (switched off since the snapshot?), read as `tool` in the statement
    that marks its call started."""
    if spec.get("id") is not None:
        batch.read("tool", Select(ToolDefinition, ("is_active",)).where(id=spec["id"]))


def invocations_add(
    batch: Batch, *, run: Run, llm_call_id: int, calls: list[dict], tools: dict, start_first: bool = False
) -> list[ToolInvocation]:
    """The calls' rows as writes of `batch` (only if its guard matches): once it is executed, a
    row has its id, or none if a row of the run had its tool call id already. With
    `start_first`, the first call's row is written started, with its event and the tool's live
    state (see the module): the caller's guard must make sure the row is new, and the batch
    then commits synchronously if the call has effects it cannot repeat (at most once)."""
    rows = [
        invocation_new(run=run, llm_call_id=llm_call_id, position=position, call=call, tools=tools)
        for position, call in enumerate(calls)
    ]
    if start_first:
        rows[0].status, rows[0].started_at = ToolInvocation.Status.RUNNING, timezone.now()
    for position, row in enumerate(rows):
        row_insert(batch, f"invocation_{position}", row, conflict=("run", "tool_call_id"))
    if start_first:
        first, spec = rows[0], tools[rows[0].tool_name]
        payload = events.tool_started(tool_invocation_id=None, tool=first.tool_name, arguments=first.arguments)
        fill = {"tool_invocation_id": "invocation_0.id"}
        event_add(batch, run_id=run.pk, type=EventType.TOOL_STARTED, payload=payload, fill=fill)
        tool_live_read(batch, spec)
        batch.durable |= not rerunnable(spec)
    return rows
