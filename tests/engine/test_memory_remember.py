"""The `remember` tool: the agent writes a memory for the run's end user in its own scope,
through the same consolidation as an extraction; without memory or an end user the model reads
a tool error."""

from conversations.models import ToolInvocation
from conversations.services import conversation_create
from memory.models import Memory, MemoryChange
from tests.engine.test_memory_recall import extractions  # noqa: F401 (a fixture)
from tests.support.factories import make_user
from tests.support.runs import advance, start_run
from tools.models import ToolDefinition


def _remembering(statement: str, kind: str = "fact") -> dict:
    call = {"name": "remember", "arguments": {"statement": statement, "kind": kind}}
    return {"scenarios": [{"match": ".", "steps": [{"tool_calls": [call]}, {"content": "{last_tool_result}"}]}]}


def _called(run) -> ToolInvocation:
    return ToolInvocation.objects.get(run=run, tool_name="remember")


def test_the_tool_remembers_for_the_end_user_in_the_agents_scope(scripted_agent, extractions):
    agent = scripted_agent(_remembering("住在成都"), tools=["remember"], memory_enabled=True)
    owner = make_user()
    run = advance(start_run(agent, "我在成都", conversation_create(agent=agent, owner=owner, end_user="u1")))

    invocation = _called(run)
    assert (invocation.status, invocation.result) == ("succeeded", "Remembered: 住在成都")
    [memory] = Memory.objects.all()
    assert (memory.scope, memory.owner_id, memory.end_user, memory.kind) == (
        f"agent:{agent.pk}",
        owner.pk,
        "u1",
        "fact",
    )
    assert memory.source_run_id == run.pk
    [change] = MemoryChange.objects.all()
    assert (change.source, change.action, change.llm_call_id) == ("tool", "add", invocation.llm_call_id)
    # Built in, synced from the registry like the other python tools, with no approval to wait for.
    tool = ToolDefinition.objects.get(name="remember")
    assert (tool.side_effect, tool.idempotent) == ("write", True)

    # The same again stores nothing more.
    again = advance(start_run(agent, "我在成都", conversation_create(agent=agent, owner=owner, end_user="u1")))
    assert _called(again).result == "Already remembered."
    assert Memory.objects.count() == 1 and MemoryChange.objects.count() == 1


def test_without_memory_an_end_user_or_with_a_secret_the_model_reads_an_error(scripted_agent, extractions):
    off = scripted_agent(_remembering("住在成都"), tools=["remember"])
    no_memory = advance(start_run(off, "我在成都", conversation_create(agent=off, end_user="u1")))
    on = scripted_agent(_remembering("住在成都"), tools=["remember"], memory_enabled=True)
    nobody = advance(start_run(on, "我在成都", conversation_create(agent=on)))
    secret = scripted_agent(_remembering("密码是 hunter2"), tools=["remember"], memory_enabled=True)
    leaked = advance(start_run(secret, "我的密码是 hunter2", conversation_create(agent=secret, end_user="u1")))
    facts = scripted_agent(
        _remembering("喜欢猫", "preference"), tools=["remember"], memory_enabled=True, memory_kinds=["fact"]
    )
    unkept = advance(start_run(facts, "我喜欢猫", conversation_create(agent=facts, end_user="u1")))

    for run, said in (
        (no_memory, "long-term memory is off"),
        (nobody, "no end user"),
        (leaked, "may not be remembered"),
        (unkept, "'preference' is not one this agent keeps"),
    ):
        invocation = _called(run)
        assert run.status == "completed"
        assert invocation.status == "error" and said in invocation.result, invocation.result
    assert not Memory.objects.exists() and not MemoryChange.objects.exists()
