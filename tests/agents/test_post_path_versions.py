"""A posted message pins the version of its agent's configuration as it is at that moment,
although the snapshot is not rebuilt for every post: each kind of input snapshot_build reads,
changed by a save or by a bulk update, gives the next post a new version."""

import pytest

from agents import services
from agents.models import Agent, AgentTool, AgentVersion, ModelConfig, RoutingRule
from agents.services import agent_version_current
from conversations.models import Run
from tests.support.api import client_for
from tests.support.factories import ModelConfigFactory, make_agent, make_user
from tools.models import ToolDefinition

pytestmark = pytest.mark.django_db


@pytest.fixture
def agent_with_fallback():
    return make_agent(tools=["test-echo"], fallback_model_config=ModelConfigFactory())


@pytest.fixture
def api():
    return client_for(make_user())


def _post(api, agent) -> Run:
    conversation = api.post("/api/v1/conversations/", {"agent": agent.slug}, format="json").json()
    response = api.post(f"/api/v1/conversations/{conversation['id']}/messages/", {"content": "hi"}, format="json")
    assert response.status_code == 202, response.content
    return Run.objects.select_related("agent_version").get(pk=response.json()["id"])


def _save(instance, **fields):
    for name, value in fields.items():
        setattr(instance, name, value)
    instance.save()


def _tool_names(snapshot) -> list[str]:
    return [tool["name"] for tool in snapshot["tools"]]


CHANGES = {
    "agent saved": (
        lambda a: _save(Agent.objects.get(pk=a.pk), system_prompt="Changed."),
        lambda s: s["agent"]["system_prompt"] == "Changed.",
    ),
    "agent updated in bulk": (
        lambda a: Agent.objects.filter(pk=a.pk).update(max_iterations=3),
        lambda s: s["agent"]["max_iterations"] == 3,
    ),
    "model config saved": (
        lambda a: _save(ModelConfig.objects.get(pk=a.model_config_id), temperature=0.3),
        lambda s: s["model"]["temperature"] == 0.3,
    ),
    "model config updated in bulk": (
        lambda a: ModelConfig.objects.filter(pk=a.model_config_id).update(base_url="http://127.0.0.1:10/v1"),
        lambda s: s["model"]["base_url"] == "http://127.0.0.1:10/v1",
    ),
    "fallback model updated in bulk": (
        lambda a: ModelConfig.objects.filter(pk=a.fallback_model_config_id).update(max_retries=7),
        lambda s: s["fallback_model"]["max_retries"] == 7,
    ),
    "fallback model removed": (
        lambda a: Agent.objects.filter(pk=a.pk).update(fallback_model_config=None),
        lambda s: s["fallback_model"] is None,
    ),
    "tool link overridden in bulk": (
        lambda a: AgentTool.objects.filter(agent=a).update(approval=AgentTool.Approval.ALWAYS),
        lambda s: s["tools"][0]["approval"]["policy"] == "always",
    ),
    "tool link disabled": (
        lambda a: AgentTool.objects.filter(agent=a).update(enabled=False),
        lambda s: s["tools"] == [],
    ),
    "tool link added": (
        lambda a: AgentTool.objects.create(agent=a, tool=ToolDefinition.objects.get(name="test-counter")),
        lambda s: _tool_names(s) == ["test-counter", "test-echo"],
    ),
    "tool link removed": (
        lambda a: AgentTool.objects.filter(agent=a).delete(),
        lambda s: s["tools"] == [],
    ),
    "tool definition saved": (
        lambda a: _save(ToolDefinition.objects.get(name="test-echo"), max_result_chars=100),
        lambda s: s["tools"][0]["max_result_chars"] == 100,
    ),
    "tool definition updated in bulk": (
        lambda a: ToolDefinition.objects.filter(name="test-echo").update(description="Changed."),
        lambda s: s["tools"][0]["description"] == "Changed.",
    ),
    "routing rule added": (
        lambda a: RoutingRule.objects.create(
            agent=a, condition="input_length", length_over=100, model_config_id=a.fallback_model_config_id
        ),
        lambda s: s["routing"]["rules"][0]["length_over"] == 100,
    ),
    "tool deactivated in bulk": (
        lambda a: ToolDefinition.objects.filter(name="test-echo").update(is_active=False),
        lambda s: s["tools"] == [],
    ),
}


@pytest.mark.parametrize("change", CHANGES)
def test_each_kind_of_change_gives_the_next_post_a_new_version(api, agent_with_fallback, change):
    apply, shows = CHANGES[change]
    before = _post(api, agent_with_fallback).agent_version
    assert _post(api, agent_with_fallback).agent_version == before

    apply(agent_with_fallback)
    after = _post(api, agent_with_fallback).agent_version
    assert after.number == before.number + 1 and shows(after.snapshot)
    assert _post(api, agent_with_fallback).agent_version == after


def test_an_unchanged_configuration_is_not_rebuilt_for_each_post(api, agent_with_fallback, monkeypatch):
    first = _post(api, agent_with_fallback).agent_version
    builds = []
    build = services.snapshot_build
    monkeypatch.setattr(services, "snapshot_build", lambda **kwargs: builds.append(1) or build(**kwargs))
    assert [_post(api, agent_with_fallback).agent_version for _ in range(3)] == [first] * 3
    assert builds == []


def test_a_configuration_changed_back_pins_a_newer_version_as_before(api, agent_with_fallback):
    first = _post(api, agent_with_fallback).agent_version
    Agent.objects.filter(pk=agent_with_fallback.pk).update(max_iterations=3)
    second = _post(api, agent_with_fallback).agent_version
    Agent.objects.filter(pk=agent_with_fallback.pk).update(max_iterations=agent_with_fallback.max_iterations)
    third = _post(api, agent_with_fallback).agent_version
    assert [first.number, second.number, third.number] == [1, 2, 3]
    assert third.config_hash == first.config_hash


def test_a_version_written_elsewhere_is_not_shadowed_by_the_one_this_process_knows(api, agent_with_fallback):
    known = _post(api, agent_with_fallback).agent_version
    # As another web process would, when the same configuration follows a different one there.
    newer = AgentVersion.objects.create(
        agent=agent_with_fallback, number=known.number + 1, config_hash=known.config_hash, snapshot=known.snapshot
    )
    assert _post(api, agent_with_fallback).agent_version == newer


def test_an_unsaved_edit_of_the_model_config_an_agent_holds_is_what_its_version_pins():
    agent = make_agent()
    agent_version_current(agent=agent)
    agent.model_config.temperature = 1.5
    assert agent_version_current(agent=agent).snapshot["model"]["temperature"] == 1.5
