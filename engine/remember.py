"""The `remember` tool: the agent writes a memory about the run's end user itself, as a python
tool an operator gives the agent (synced from the registry like the other built-ins).

The memory goes through the same consolidation as an extraction's changes
(memory.services.memory_apply, source "tool"): the kinds the version keeps, never the same
statement twice, secrets never stored, the version's input guardrail rules applied. Whose
memory it is follows engine.memory.memory_target, so an evaluation's run writes into its eval
run's scope only, and a widget's or hook's run into its own channel's (memory.channels). A run
whose version keeps no memory, or whose conversation has no end user, gets a tool error the
model reads.

Registered from EngineConfig.ready() (the memory app sits below the engine and cannot know its
runs' snapshots). Like a knowledge base's search, it reads and writes the database on the tool
pool's thread, and closes that thread's connection when done. Running it twice for one call
(after a crash) stores nothing more: the second finds the statement held, so it is idempotent.
"""

from django.db import connection
from django.db.models import Subquery
from django.utils.translation import gettext as _

from agents.models import MEMORY_KINDS
from agents.snapshot import snapshot_memory
from conversations.models import LLMCall, Run, ToolInvocation
from engine.memory import conversation_memory_target, memory_rules
from engine.snapshots import version_snapshot
from memory.consolidation import STATEMENT_MAX_CHARS
from memory.services import MemoryProposal, MemoryRejected, memory_apply
from tools.registry import ToolContext, ToolError, python_tool

REMEMBER_TOOL = "remember"


@python_tool(
    name=REMEMBER_TOOL,
    description=(
        "Remember something about the user for later conversations: a fact about them, a preference, "
        "an event in their life or a standing instruction they gave, as one short sentence in the user's "
        "language. Only what the user said about themselves; never passwords, keys or other secrets."
    ),
    parameters={
        "type": "object",
        "properties": {
            "statement": {
                "type": "string",
                "minLength": 1,
                "maxLength": STATEMENT_MAX_CHARS,
                "description": "What to remember, e.g. 住在成都.",
            },
            "kind": {"type": "string", "enum": list(MEMORY_KINDS), "description": "What kind of memory it is."},
        },
        "required": ["statement", "kind"],
        "additionalProperties": False,
    },
    # It writes, but only the end user's memory, audited and undone by an operator's delete:
    # nothing a person must approve first.
    side_effect="write",
    approval_policy="never",
    idempotent=True,
    timeout_seconds=15,
    max_result_chars=500,
)
def remember(*, ctx: ToolContext, statement: str, kind: str) -> str:
    try:
        return _remember(ctx, statement=statement, kind=kind)
    finally:
        connection.close()


def _remember(ctx: ToolContext, *, statement: str, kind: str) -> str:
    run = Run.objects.select_related("conversation", "agent").get(pk=ctx.run_id)
    snapshot = version_snapshot(run.agent_version_id)
    memory = snapshot_memory(snapshot)
    if memory is None:
        raise ToolError(_("long-term memory is off for this agent; answer without remembering."))
    target = conversation_memory_target(
        run.conversation, run=run, snapshot=snapshot, workspace_id=run.agent.workspace_id
    )
    if target is None:
        raise ToolError(_("this conversation has no end user to remember things about; answer without remembering."))
    # The model call that asked for this one: the change's audit row names it.
    asking = ToolInvocation.objects.filter(run_id=run.pk, tool_call_id=ctx.tool_call_id).values("llm_call_id")[:1]
    call = LLMCall.objects.filter(pk=Subquery(asking)).only("pk").first()
    try:
        applied = memory_apply(
            workspace_id=target.workspace_id,
            scope=target.scope,
            owner_id=target.owner_id,
            channel=target.channel,
            end_user=target.end_user,
            proposals=[MemoryProposal(action="add", kind=kind, statement=statement)],
            source="tool",
            kinds=memory["kinds"],
            ttl_days=memory["ttl_days"],
            guardrails=memory_rules(snapshot),
            run=run,
            llm_call=call,
        )
    except MemoryRejected as exc:
        raise ToolError(exc.reason) from None
    if applied.refused:
        # Why is said without the statement, which may be the secret.
        raise ToolError(_("this may not be remembered (it looks like a secret or breaks a rule of this agent)."))
    if not applied:
        return _("Already remembered.")
    return _("Remembered: %(statement)s") % {"statement": applied[0].after}
