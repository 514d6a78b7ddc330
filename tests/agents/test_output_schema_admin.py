"""An agent's output schema: set in the agent's admin page under its own heading, checked there
(a value that is not a JSON Schema is a form error, nothing saved), and pinned in the version
(an agent without one pins the same snapshot as before the setting existed)."""

import pytest
from django.contrib.auth.models import Permission
from django.core.exceptions import ValidationError
from django.urls import reverse

from agents.models import Agent
from agents.services import agent_version_current
from agents.snapshot import snapshot_build, snapshot_hash
from tests.support.admin_forms import agent_admin_inlines
from tests.support.factories import make_agent, make_user

pytestmark = pytest.mark.django_db

SCHEMA = {"type": "object", "properties": {"total": {"type": "number"}}, "required": ["total"]}


def _form(agent, **changes) -> dict:
    return {
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
        "output_repair_turns": agent.output_repair_turns,
        "is_active": "on",
        **agent_admin_inlines(),
        **changes,
    }


@pytest.fixture
def operator_client(client):
    operator = make_user(staff=True)
    operator.user_permissions.add(*Permission.objects.filter(codename__in=["view_agent", "change_agent"]))
    client.force_login(operator)
    return client


def test_the_admin_sets_the_output_schema_and_its_repair_turns(operator_client):
    agent = make_agent()
    url = reverse("admin:agents_agent_change", args=[agent.pk])

    page = operator_client.get(url).content.decode()
    assert ">Answers in a schema</h2>" in page and 'name="output_schema"' in page

    response = operator_client.post(
        url, _form(agent, output_schema='{"type": "object", "required": ["total"]}', output_repair_turns=3)
    )

    assert response.status_code == 302, response.content.decode()[:3000]
    agent.refresh_from_db()
    assert (agent.output_schema, agent.output_repair_turns) == ({"type": "object", "required": ["total"]}, 3)


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ('{"type": "nonsense"}', "Not a valid JSON Schema at type"),
        ('"object"', "An output schema must be a JSON object"),
        ('{"required": "total"}', "Not a valid JSON Schema at required"),
    ],
)
def test_a_value_that_is_not_a_json_schema_is_a_form_error(operator_client, value, said):
    agent = make_agent()
    url = reverse("admin:agents_agent_change", args=[agent.pk])

    response = operator_client.post(url, _form(agent, output_schema=value))

    assert response.status_code == 200 and said in response.content.decode()
    agent.refresh_from_db()
    assert agent.output_schema is None


def test_more_than_five_repair_turns_are_refused():
    agent = make_agent(output_schema=SCHEMA, output_repair_turns=6)
    with pytest.raises(ValidationError) as refused:
        agent.full_clean()
    assert "output_repair_turns" in refused.value.message_dict


def test_an_agent_without_a_schema_pins_the_same_snapshot_and_one_with_it_a_new_version():
    agent = make_agent()
    before = snapshot_build(agent=agent)
    first = agent_version_current(agent=agent)
    Agent.objects.filter(pk=agent.pk).update(output_repair_turns=4)
    agent.refresh_from_db()
    unchanged = snapshot_build(agent=agent)
    assert "output_schema" not in unchanged["agent"] and snapshot_hash(unchanged) == snapshot_hash(before)

    Agent.objects.filter(pk=agent.pk).update(output_schema=SCHEMA)
    agent.refresh_from_db()
    second = agent_version_current(agent=agent)

    assert second.number == first.number + 1
    assert (second.snapshot["agent"]["output_schema"], second.snapshot["agent"]["output_repair_turns"]) == (SCHEMA, 4)
