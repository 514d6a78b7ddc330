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

from agents.models import AgentTool
from agents.snapshot import DELEGATE_KIND
from conversations import events
from conversations.batch import Batch, Select, either, event_add, exists, row_insert
from conversations.events import EventType
from conversations.models import Approval, Run, ToolInvocation
from platform_site.text import scrub_nul
from tools.approval_policy import ApprovalPolicy, approval_need
from tools.arguments import arguments_hash, parse_arguments, validate_arguments
from tools.calls import call_arguments, call_name
from tools.models import ToolDefinition
from tools.results import trim_text

Status = ToolInvocation.Status


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


# What happens to one call: call_decision's answers, which engine.tool_step carries out.


@dataclass(frozen=True)
class Settled:
    """The call ends without running (or without running again): this is its outcome."""

    status: str
    result: str
    error: str = ""
    truncated: bool = False
    simulated: bool = False


@dataclass(frozen=True)
class Execute:
    """Run the tool with these arguments (the call's own, or the ones a person approved)."""

    arguments: dict


@dataclass(frozen=True)
class Delegate:
    """The tool is an agent: the call is a child run (engine.delegation)."""


@dataclass(frozen=True)
class AskApproval:
    """A person must approve the call first: request it (a run-wide grant may approve it at once)."""

    why: str


@dataclass(frozen=True)
class Wait:
    """The call's approval (or hand-off) is pending: the run parks until a person decides."""


CallDecision = Settled | Execute | Delegate | AskApproval | Wait


def call_decision(
    *, invocation: ToolInvocation, spec: dict | None, approval: Approval | None, blocked: str | None, sandbox
) -> CallDecision:
    """What happens to one tool call, from what is known of it: its row, its tool's spec, its
    approval (None: none exists), the loop hint that blocks the step's calls (`blocked`) and the
    run's sandbox (`sandbox`: an evaluation's or a fork's, None for ordinary traffic). The
    order is the promise:

    1. a loop hint blocks the call (a model repeating malformed calls is looping too);
    2. invalid arguments or an unknown tool: the model reads what is wrong;
    3. a sandboxed run's call takes the result it is given, see _sandbox_decision (before
       delegation: an evaluation's delegate call would run its child's tools for real);
    4. an agent as a tool: a child run;
    5. no approval yet: run it, or ask a person if its policy says so (the spec's approval, the
       one in force: the stricter of the version's and the tool's now, which the caller reads,
       agents.selectors.tools_in_force);
    6. an approval: wait while it is pending; a hand-off's answer is the result; a rejected,
       expired or mismatched approval refuses the call; an approved one runs it with the
       arguments approved (possibly edited)."""
    if blocked:
        return Settled(Status.BLOCKED, blocked, error="same-tool streak")
    if invocation.validation_errors or spec is None:
        return Settled(Status.ERROR, " ".join(invocation.validation_errors), error="invalid arguments")
    if sandbox is not None:
        sandboxed = _sandbox_decision(invocation, spec, sandbox, approval)
        if sandboxed is not None:
            return sandboxed
    if spec["kind"] == DELEGATE_KIND:
        return Delegate()
    if approval is None:
        need = approval_need(spec=spec, arguments=invocation.arguments)
        return AskApproval(need.why) if need.required else Execute(invocation.arguments)
    if approval.status == Approval.Status.PENDING:
        return Wait()
    if approval.kind == Approval.Kind.HANDOFF:
        return Settled(Status.SUCCEEDED, _handoff_result(invocation, approval))
    refusal = _approval_refusal(invocation, approval, spec)
    if refusal is not None:
        return Settled(Status.REJECTED, refusal, error=approval.status)
    return Execute(approval.arguments)


# The error of a sandboxed call refused without running: no result of the tool, so never a
# recorded one for a fork of this run (engine.forks.recorded_calls leaves these out).
NOT_RUN_IN_FORK = "not run in a fork"
NOT_RUN_IN_EVALUATION = "not run in an evaluation"
NOT_RUN_IN_PLAYGROUND = "not run in the playground"
NOT_RUN = (NOT_RUN_IN_FORK, NOT_RUN_IN_EVALUATION, NOT_RUN_IN_PLAYGROUND)

# A fork's write call that a person may let run for real (Run.sandbox["real_writes"]): the
# approval's reason says what approving it means.
REAL_WRITE_REASON = "a fork: approving runs this call for real, with a new idempotency key"


def recorded_result(invocation: ToolInvocation, recorded: list) -> dict | None:
    """The recorded call (a fork's source tree, a replayed case) that is the same call as
    `invocation`: the same tool with the same arguments, compared by their hash; the first one."""
    if not recorded or not isinstance(invocation.arguments, dict):
        return None
    wanted = arguments_hash(invocation.arguments)
    for call in recorded:
        if call.get("name") == invocation.tool_name and arguments_hash(call.get("arguments") or {}) == wanted:
            return call
    return None


def _sandbox_decision(
    invocation: ToolInvocation, spec: dict, sandbox: dict, approval: Approval | None
) -> CallDecision | None:
    """A call of a sandboxed run (an evaluation's, or a fork's: engine.forks), which never
    changes the outside world unless a person explicitly allows it. None: the ordinary path
    decides (a fork's delegate call, or a write a person is asked to allow).

    1. a fork's delegate call starts a child run, sandboxed like the fork (its subtree re-runs);
    2. the same call as one recorded (the fork's source, the replayed run): its recorded result;
    3. a result given for the tool (an eval case's, or the operator's for a fork's write);
    4. a read tool that needs no approval runs live, if the sandbox allows live reads;
    5. a fork that lets writes run after an approval: a person is asked (and decides);
    6. otherwise the call fails, readably, without running.
    Given results are recorded as simulated and need no approval, since nothing happens."""
    if spec["kind"] == DELEGATE_KIND and sandbox.get("delegate"):
        return None
    same = recorded_result(invocation, sandbox.get("recorded"))
    given = same["result"] if same is not None else sandbox.get("results", {}).get(invocation.tool_name)
    if given is not None:
        # Cut like the tool's own result would be, so the model sees what it would see live.
        shown = trim_text(scrub_nul(str(given)), spec["max_result_chars"])
        status = Status.ERROR if same is not None and same.get("error") else Status.SUCCEEDED
        return Settled(status, shown.text, truncated=shown.truncated, simulated=True)
    needs_approval = approval_need(spec=spec, arguments=invocation.arguments).required
    if sandbox.get("live_reads", False) and spec["side_effect"] == "read" and not needs_approval:
        return Execute(invocation.arguments)
    if sandbox.get("real_writes") == "approval" and spec["kind"] != DELEGATE_KIND:
        return AskApproval(REAL_WRITE_REASON) if approval is None else None
    if "playground" in sandbox:
        return Settled(
            Status.ERROR,
            f"Tool {spec['name']} was not run: this is a prompt playground's test run, which never changes "
            "anything outside it.",
            error=NOT_RUN_IN_PLAYGROUND,
        )
    if "fork" in sandbox:
        return Settled(
            Status.ERROR,
            f"Tool {spec['name']} was not run: this is a fork of a run, its source made no such call and no "
            "result was given for it.",
            error=NOT_RUN_IN_FORK,
        )
    return Settled(
        Status.ERROR,
        f"Tool {spec['name']} was not run: this is an evaluation run and its case gives no result for this tool.",
        error=NOT_RUN_IN_EVALUATION,
    )


def _approval_refusal(invocation: ToolInvocation, approval: Approval, spec: dict) -> str | None:
    """None when the approval lets exactly this call run; otherwise what to tell the model."""
    name = spec["name"]
    if approval.status == Approval.Status.APPROVED:
        if (
            approval.tool_call_id != invocation.tool_call_id
            or arguments_hash(approval.arguments) != approval.arguments_hash
        ):
            return f"This call of {name} was not run: its approval does not match the call's arguments."
        return None
    if approval.status == Approval.Status.REJECTED:
        return f"A reviewer rejected this call of {name}; it was not run. Reason: {approval.reason or 'none given'}."
    if approval.status == Approval.Status.EXPIRED:
        return (
            f"Nobody approved this call of {name} in time, so it was not run. Do not assume it "
            "happened; tell the user it is waiting for an approval that did not come."
        )
    return f"This call of {name} was not run: its approval was {approval.status}."


def _handoff_result(invocation: ToolInvocation, approval: Approval) -> str:
    """What the model reads once a hand-off is settled: the person's answer (their decision's
    reason) to relay, or, rejected or expired, the result kept for nobody answering."""
    if approval.status == Approval.Status.APPROVED:
        return (
            "A person answered this question for the user. Reply with their answer, in your own words if needed, "
            f"and add nothing that it does not say:\n{approval.reason}"
        )
    return invocation.result


def runs_at_once(*, run: Run, invocation: ToolInvocation, spec: dict | None, held_back: bool) -> bool:
    """Whether a call whose row is new (so no approval exists for it) runs as soon as its step
    reaches it: what call_decision says of it, unless a loop hint holds the step back."""
    if held_back:
        return False
    decision = call_decision(invocation=invocation, spec=spec, approval=None, blocked=None, sandbox=run.sandbox)
    return isinstance(decision, Execute)


def rerunnable(spec: dict) -> bool:
    """A call that may run again when its outcome is unknown: a read, or an idempotent write."""
    return spec["side_effect"] == "read" or spec["idempotent"]


def tool_live_read(batch: Batch, spec: dict) -> None:
    """The tool's live state (switched off since the snapshot?), read as `tool` in the statement
    that marks its call started."""
    if spec.get("id") is not None:
        batch.read("tool", Select(ToolDefinition, ("is_active",)).where(id=spec["id"]))


# An agent's own approval for a tool, instead of the tool's (AgentTool.approval other than inherit).
_OVERRIDES = (ApprovalPolicy.NEVER, ApprovalPolicy.ALWAYS, ApprovalPolicy.RULE)


def approval_unchanged(*, spec: dict | None, agent_id: int) -> tuple:
    """Conditions that hold while the tool's approval now, with the agent's override of it,
    resolves to the one `spec` pinned (agents.selectors.tool_approvals_now resolves it the same
    way): for the guard of the statement that marks a call started before its step reads the
    approvals in force. If it was changed, tightened or loosened, the guard fails, the call is
    not marked, and the tool step decides it under the stricter of the two (tools_in_force).

    The agent's link says the same (`same_link`), or it does not override the tool and the tool
    says the same: (same_link or not overridden) and (same_link or tool_same)."""
    if spec is None or spec["id"] is None:
        return ()
    policy, rule = spec["approval"]["policy"], spec["approval"]["rule"]
    link = {"agent_id": agent_id, "tool_id": spec["id"]}
    same = {"approval": policy, **({"approval_rule": rule} if policy == ApprovalPolicy.RULE else {})}
    same_link = exists(AgentTool, **link, **same)
    overridden = exists(AgentTool, **link, approval__in=_OVERRIDES)
    tool = {"id": spec["id"]}
    if policy == ApprovalPolicy.RULE:
        tool_same = exists(ToolDefinition, **tool, approval_policy=ApprovalPolicy.RULE, approval_rule=rule)
    else:
        by_side = {"side_effect__ne": "write"} if policy == ApprovalPolicy.NEVER else {"side_effect": "write"}
        tool_same = either(
            exists(ToolDefinition, **tool, approval_policy=policy),
            exists(ToolDefinition, **tool, approval_policy=ApprovalPolicy.AUTO, **by_side),
        )
    return (either(same_link, ~overridden), either(same_link, tool_same))


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
