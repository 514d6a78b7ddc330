"""Memories keep the boundary conversations keep: an end user id is only as wide as the channel
that vouches for it. "u1" of one widget, of another widget of the same agent and owner, of a hook
and of the owner's API are four people to memory, in what a run is shown, in what its extraction
and its remember tool write, unless the operator joins a widget or hook to the owner's channel."""

import json
import uuid

import pytest

from conversations.models import ToolInvocation
from conversations.services import conversation_create
from engine.tasks import memory_extract_task
from memory.models import Memory, MemoryChange, MemoryUse
from memory.services import MemoryProposal, memory_apply
from tests.engine.test_memory_recall import extractions  # noqa: F401 (a fixture)
from tests.support.api import client_for
from tests.support.factories import make_user
from tests.support.runs import advance, start_run
from triggers.hooks import hook_deliver
from triggers.models import Hook
from widgets.models import Widget
from widgets.services import widget_conversation_open
from workspaces.defaults import default_workspace_id

ANSWER = {"scenarios": [{"match": ".", "steps": [{"content": "好的。"}]}]}
SPACE = "shop"


def _channels(agent, owner):
    """Two widgets and a hook of the agent, and a widget joined to the owner's channel."""
    made = {}
    for name, shared in (("w1", False), ("w2", False), ("joined", True)):
        made[name] = Widget.objects.create(
            agent=agent, name=name, secret=f"wsec_{name}", owner=owner, memory_shared=shared
        )
    made["hook"] = Hook.objects.create(
        agent=agent, name="orders", secret="whsec_x", message="{{ payload.note }}", end_user="u1", owner=owner
    )
    return made


def _hold(owner, statement: str, channel: str, kind: str = "fact") -> Memory:
    [change] = memory_apply(
        workspace_id=default_workspace_id(),
        scope=SPACE,
        owner_id=owner.pk,
        channel=channel,
        end_user="u1",
        proposals=[MemoryProposal("add", kind, statement)],
        source="api",
        kinds=[],
        ttl_days=None,
    )
    return change.memory


def _run_in(agent, owner, channels, where: str, content: str = "明天天气如何？"):
    """A run of end user u1's message, in a conversation through `where`: a widget's name,
    "hook", or "api" (the owner's own token)."""
    if where == "hook":
        run = hook_deliver(
            hook=channels["hook"],
            delivery_id=uuid.uuid4().hex,
            signature=uuid.uuid4().hex,
            content=content,
            end_user="u1",
        )
        return advance(run)
    if where == "api":
        conversation = conversation_create(agent=agent, owner=owner, end_user="u1")
    else:
        conversation, _created = widget_conversation_open(widget=channels[where], end_user="u1")
    return advance(start_run(agent, content, conversation))


def _shown(run) -> list[str]:
    return [use.memory.statement for use in MemoryUse.objects.filter(run=run).select_related("memory")]


@pytest.mark.django_db
def test_a_run_is_shown_only_the_memories_of_the_channel_it_came_through(scripted_agent, extractions):
    agent = scripted_agent(ANSWER, memory_enabled=True, memory_space=SPACE)
    owner = make_user()
    channels = _channels(agent, owner)
    _hold(owner, "住在成都", f"widget:{channels['w1'].pk}")
    _hold(owner, "住在北京", "")
    _hold(owner, "住在上海", f"hook:{channels['hook'].pk}")

    shown = {where: _shown(_run_in(agent, owner, channels, where)) for where in ("w1", "w2", "api", "hook", "joined")}

    assert shown == {
        "w1": ["住在成都"],
        # Another widget of the same agent and owner: another site, another secret, nothing shown.
        "w2": [],
        "api": ["住在北京"],
        "hook": ["住在上海"],
        # Joined by the operator: the owner's channel.
        "joined": ["住在北京"],
    }


@pytest.mark.django_db
def test_an_extraction_writes_in_its_run_s_channel_and_cannot_reach_another(scripted_agent, fake_llm, extractions):
    owner = make_user()
    chengdu = _hold(owner, "住在成都", "widget:00000000-0000-4000-8000-000000000000")
    # The extraction moves "u1" to 重庆 by the id of a memory another channel holds, and adds a pet.
    changes = [
        {"action": "update", "id": str(chengdu.pk), "statement": "住在重庆"},
    ]
    script = {**ANSWER, "memory_extraction": {"content": json.dumps({"changes": changes}, ensure_ascii=False)}}
    agent = scripted_agent(script, memory_enabled=True, memory_space=SPACE)
    channels = _channels(agent, owner)
    Memory.objects.filter(pk=chengdu.pk).update(channel=f"widget:{channels['w1'].pk}")
    adding = {"changes": [{"action": "add", "kind": "preference", "statement": "喜欢猫"}]}

    for where in ("w2", "hook", "api"):
        run = _run_in(agent, owner, channels, where, "我搬到重庆了")
        memory_extract_task(str(run.pk))
        # Not a memory this end user holds here: the whole answer is refused, nothing changes.
        call = run.llm_calls.get(purpose="memory")
        assert call.status == "failed" and "is not a memory held for this user" in call.error
        # And the extraction was not shown it to begin with.
        request = fake_llm.requests(agent.model_config.model)[-1]["messages"]
        assert json.loads(request[1]["content"])["held"] == []
    chengdu.refresh_from_db()
    assert chengdu.statement == "住在成都"

    run = _run_in(agent, owner, channels, "w1", "我搬到重庆了")
    memory_extract_task(str(run.pk))
    chengdu.refresh_from_db()
    assert chengdu.statement == "住在重庆"
    assert MemoryChange.objects.get(run=run).channel == f"widget:{channels['w1'].pk}"

    # What an extraction adds is its own channel's.
    fake_llm.script(
        agent.model_config.model, {**ANSWER, "memory_extraction": {"content": json.dumps(adding, ensure_ascii=False)}}
    )
    for where in ("w2", "hook", "joined"):
        memory_extract_task(str(_run_in(agent, owner, channels, where, "我喜欢猫").pk))
    added = sorted(Memory.objects.filter(statement="喜欢猫").values_list("channel", flat=True))
    assert added == sorted(["", f"widget:{channels['w2'].pk}", f"hook:{channels['hook'].pk}"])


def _remembering(statement: str) -> dict:
    call = {"name": "remember", "arguments": {"statement": statement, "kind": "preference"}}
    return {"scenarios": [{"match": ".", "steps": [{"tool_calls": [call]}, {"content": "{last_tool_result}"}]}]}


# Commits: the remember tool reads and writes on a tool thread's own connection.
def test_the_remember_tool_writes_in_its_run_s_channel(scripted_agent, extractions):
    agent = scripted_agent(_remembering("喜欢猫"), tools=["remember"], memory_enabled=True, memory_space=SPACE)
    owner = make_user()
    channels = _channels(agent, owner)
    _hold(owner, "喜欢猫", f"widget:{channels['w1'].pk}", kind="preference")

    said = {}
    for where in ("w2", "w1", "hook", "joined", "api"):
        run = _run_in(agent, owner, channels, where, "我喜欢猫")
        said[where] = ToolInvocation.objects.get(run=run, tool_name="remember").result

    assert said == {
        # W1's memory is not W2's to confirm: W2 writes one of its own.
        "w2": "Remembered: 喜欢猫",
        "w1": "Already remembered.",
        "hook": "Remembered: 喜欢猫",
        "joined": "Remembered: 喜欢猫",
        # The joined widget wrote into the owner's channel.
        "api": "Already remembered.",
    }
    held = Memory.objects.filter(statement="喜欢猫").values_list("channel", flat=True)
    assert sorted(held) == sorted(
        ["", f"widget:{channels['w1'].pk}", f"widget:{channels['w2'].pk}", f"hook:{channels['hook'].pk}"]
    )
    assert sorted(MemoryChange.objects.values_list("channel", flat=True)) == sorted(held)


@pytest.mark.django_db
def test_the_owner_lists_every_channel_s_memories_and_may_narrow_to_one():
    owner = make_user()
    widget_channel = "widget:" + str(uuid.uuid4())
    _hold(owner, "住在成都", widget_channel)
    _hold(owner, "住在北京", "")
    url = "/api/v1/end-users/u1/memories/"
    client = client_for(owner)

    listed = client.get(url).json()["results"]
    assert sorted((m["statement"], m["channel"]) for m in listed) == [("住在北京", ""), ("住在成都", widget_channel)]
    assert [m["statement"] for m in client.get(url, {"channel": widget_channel}).json()["results"]] == ["住在成都"]
    assert [m["statement"] for m in client.get(url, {"channel": ""}).json()["results"]] == ["住在北京"]
    refused = client.get(url, {"channel": "widget:nope"})
    assert refused.status_code == 400 and "channel" in refused.json()["message"]
