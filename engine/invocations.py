"""A step's tool calls as ToolInvocation rows: built from the model's answer, and written with it.

The rows of the calls an answer asks for are written in the statement that records the answer
(engine.llm_step), so the tool step that follows starts with them instead of inserting them in a
statement of its own; a tool step taken again (after a crash, an approval, a folded history)
inserts what is missing and reads the rest (engine.tool_step._step_invocations). A call whose
row exists already (the same id earlier in the run) is skipped here, and the tool step reads it.
"""

from conversations.batch import Batch
from conversations.models import Run, ToolInvocation
from conversations.services import row_insert
from platform_site.text import scrub_nul
from tools.arguments import parse_arguments, validate_arguments
from tools.calls import call_arguments, call_name


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
        run=run,
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


def invocations_add(
    batch: Batch, *, run: Run, llm_call_id: int, calls: list[dict], tools: dict
) -> list[ToolInvocation]:
    """The calls' rows as writes of `batch` (only if its guard matches): once it is executed, a
    row has its id, or none if a row of the run had its tool call id already."""
    rows = [
        invocation_new(run=run, llm_call_id=llm_call_id, position=position, call=call, tools=tools)
        for position, call in enumerate(calls)
    ]
    for position, row in enumerate(rows):
        row_insert(batch, f"invocation_{position}", row, conflict=("run", "tool_call_id"))
    return rows
