"""An agent's memory settings: part of its version (a change pins a new one; an agent without
memory pins the same snapshot as before memory existed), checked when saved, and set in the
agent's admin page under Memory."""

import pytest
from django.contrib.auth.models import Permission
from django.core.exceptions import ValidationError
from django.urls import reverse

from agents.models import Agent
from agents.services import agent_version_current
from agents.snapshot import MemorySnapshot, snapshot_build, snapshot_hash
from tests.support.admin_forms import agent_admin_inlines
from tests.support.factories import make_agent, make_user

pytestmark = pytest.mark.django_db


def test_an_agent_without_memory_has_no_memory_key_and_its_hash_ignores_the_memory_fields():
    agent = make_agent()
    before = snapshot_hash(snapshot_build(agent=agent))
    Agent.objects.filter(pk=agent.pk).update(memory_shown=9, memory_space="shared", memory_ttl_days=3)
    agent.refresh_from_db()

    snapshot = snapshot_build(agent=agent)
    assert "memory" not in snapshot and snapshot_hash(snapshot) == before


def test_memory_on_pins_its_settings_with_every_kind_when_none_is_named():
    agent = make_agent(memory_enabled=True, memory_ttl_days=30)

    memory = snapshot_build(agent=agent)["memory"]

    assert set(memory) == MemorySnapshot.__required_keys__
    assert memory == {"space": "", "kinds": ["fact", "preference", "event", "instruction"], "shown": 5, "ttl_days": 30}


def test_kinds_are_pinned_in_one_order_however_they_were_named():
    first = make_agent(memory_enabled=True, memory_kinds=["preference", "fact"])
    second = make_agent(memory_enabled=True, memory_kinds=["fact", "preference"])
    assert (
        snapshot_build(agent=first)["memory"]["kinds"]
        == snapshot_build(agent=second)["memory"]["kinds"]
        == [
            "fact",
            "preference",
        ]
    )


@pytest.mark.parametrize(
    ("field", "value", "shows"),
    [
        ("memory_enabled", False, lambda s: "memory" not in s),
        ("memory_space", "support", lambda s: s["memory"]["space"] == "support"),
        ("memory_kinds", ["fact"], lambda s: s["memory"]["kinds"] == ["fact"]),
        ("memory_shown", 2, lambda s: s["memory"]["shown"] == 2),
        ("memory_ttl_days", 7, lambda s: s["memory"]["ttl_days"] == 7),
        ("memory_daily_tokens", 5000, lambda s: s["memory"]["daily_tokens"] == 5000),
    ],
)
def test_a_change_of_a_memory_setting_pins_a_new_version(field, value, shows):
    agent = make_agent(memory_enabled=True)
    first = agent_version_current(agent=agent)

    Agent.objects.filter(pk=agent.pk).update(**{field: value})
    agent.refresh_from_db()
    second = agent_version_current(agent=agent)

    assert second.number == first.number + 1 and shows(second.snapshot)


@pytest.mark.parametrize("kinds", [["opinion"], ["fact", "fact"], "fact", [1]])
def test_unknown_or_repeated_kinds_are_refused_when_the_agent_is_saved(kinds):
    agent = make_agent(memory_kinds=kinds)
    with pytest.raises(ValidationError) as refused:
        agent.full_clean()
    assert "memory_kinds" in refused.value.message_dict


def test_a_model_config_that_keeps_to_a_schema_says_so_in_its_snapshot_and_anthropic_cannot():
    agent = make_agent(memory_enabled=True)
    before = snapshot_build(agent=agent)
    assert "structured_output" not in before["model"]
    config = agent.model_config
    config.structured_output = True
    config.full_clean()
    config.save()
    agent.refresh_from_db()
    assert snapshot_build(agent=agent)["model"]["structured_output"] is True

    config.provider = "anthropic"
    with pytest.raises(ValidationError) as refused:
        config.full_clean()
    assert "structured_output" in refused.value.message_dict


def test_a_daily_extraction_budget_below_one_token_is_refused():
    agent = make_agent(memory_enabled=True, memory_daily_tokens=0)
    with pytest.raises(ValidationError) as refused:
        agent.full_clean()
    assert "memory_daily_tokens" in refused.value.message_dict


def _form(agent, **changes) -> dict:
    data = {
        "name": agent.name,
        "slug": agent.slug,
        "system_prompt": agent.system_prompt,
        "time_zone": agent.time_zone,
        "language": agent.language,
        "model_config": agent.model_config_id,
        "max_iterations": agent.max_iterations,
        "max_same_tool_streak": agent.max_same_tool_streak,
        "tool_choice": agent.tool_choice,
        "context_max_turns": agent.context_max_turns or "",
        "concurrent_messages": agent.concurrent_messages,
        "memory_shown": agent.memory_shown,
        "is_active": "on",
        **agent_admin_inlines(),
    }
    data.update(changes)
    return data


def test_the_agent_admin_sets_memory_under_its_own_heading(client):
    agent = make_agent()
    operator = make_user(staff=True)
    operator.user_permissions.add(*Permission.objects.filter(codename__in=["view_agent", "change_agent"]))
    client.force_login(operator)
    url = reverse("admin:agents_agent_change", args=[agent.pk])

    page = client.get(url).content.decode()
    assert ">Memory</h2>" in page and 'name="memory_kinds"' in page and 'name="memory_ttl_days"' in page

    response = client.post(url, _form(agent, memory_enabled="on", memory_kinds='["fact", "preference"]'))

    assert response.status_code == 302, response.content.decode()[:3000]
    agent.refresh_from_db()
    assert agent.memory_enabled and agent.memory_kinds == ["fact", "preference"]
    response = client.post(url, _form(agent, memory_kinds='["opinion"]'))
    assert response.status_code == 200 and "Unknown kinds: opinion" in response.content.decode()
    response = client.post(url, _form(agent, memory_kinds=""))
    assert response.status_code == 302
    agent.refresh_from_db()
    assert agent.memory_kinds == []
