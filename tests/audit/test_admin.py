"""Configuration changes made in the admin: one row per create, change and delete, with who,
from where and the changed fields; secrets masked; the history page shows the diff to holders of
the audit's view permission only; the audit itself cannot be edited."""

import pytest
from django.contrib.contenttypes.models import ContentType
from django.urls import reverse

from agents.models import Agent, ModelConfig
from agents.services import agent_version_current
from audit.models import ConfigChange
from audit.registry import MASK
from tests.audit.conftest import audit_text, staff_with, stored
from tests.support.admin_forms import agent_admin_inlines
from tests.support.factories import ModelConfigFactory, make_agent

pytestmark = pytest.mark.django_db

KEY, OTHER_KEY = "sk-live-0123456789abcdef", "sk-live-fedcba9876543210"


def _model_form(**changes) -> dict:
    data = {
        "name": "gpt",
        "provider": "openai_compatible",
        "base_url": "https://api.example.com/v1",
        "model": "gpt-x",
        "stop": "[]",
        "response_format": "text",
        "extra_params": "{}",
        "response_schema": "null",
        "connect_timeout_seconds": 10,
        "read_timeout_seconds": 120,
        "max_retries": 2,
        "price_input_per_million": 0,
        "price_output_per_million": 0,
        "price_cached_input_per_million": 0,
    }
    return {**data, **changes}


def _agent_form(agent, **changes) -> dict:
    data = {
        "name": agent.name,
        "slug": agent.slug,
        "description": agent.description,
        "is_active": "on",
        "system_prompt": agent.system_prompt,
        "time_zone": "UTC",
        "language": "en",
        "model_config": agent.model_config_id,
        "max_iterations": 8,
        "max_same_tool_streak": 3,
        "tool_choice": "auto",
        "parallel_tool_calls": "on",
        "concurrent_messages": "reject",
        "retention_days": "",
        **agent_admin_inlines(),
    }
    return {**data, **changes}


def test_a_model_configs_life_in_the_admin_is_three_rows_and_its_key_never_appears(client, superuser):
    assert client.post(reverse("admin:agents_modelconfig_add"), _model_form(new_api_key=KEY)).status_code == 302
    model = ModelConfig.objects.get()
    ciphertext = stored(ModelConfig, model.pk, "api_key")
    url = reverse("admin:agents_modelconfig_change", args=[model.pk])
    assert client.post(url, _model_form(new_api_key=OTHER_KEY, max_retries=5)).status_code == 302
    # Saved again unchanged: no row.
    assert client.post(url, _model_form(max_retries=5)).status_code == 302
    assert client.post(reverse("admin:agents_modelconfig_delete", args=[model.pk]), {"post": "yes"}).status_code == 302

    created, changed, deleted = ConfigChange.objects.order_by("id")
    assert [c.action for c in (created, changed, deleted)] == ["create", "change", "delete"]
    for change in (created, changed, deleted):
        assert change.source == "admin" and change.actor == superuser and change.actor_label == "root"
        assert change.content_type == ContentType.objects.get_for_model(ModelConfig)
        assert change.object_id == str(model.pk) and change.object_repr == "gpt (gpt-x)"
    assert created.changes["api_key"] == [None, MASK] and created.changes["model"] == [None, "gpt-x"]
    # Only that the key changed, and the changed field.
    assert changed.changes == {"api_key": [MASK, MASK], "max_retries": [2, 5]}
    assert deleted.changes["api_key"] == [MASK, None]
    # Neither key, in clear or encrypted, in any column of any row.
    text = audit_text()
    for secret in (KEY, OTHER_KEY, ciphertext, KEY[-4:], OTHER_KEY[-4:]):
        assert secret not in text


def test_an_agents_history_page_shows_the_diff_to_holders_of_the_audit_permission(client, superuser):
    agent = make_agent(slug="weather", system_prompt="Answer about the weather.\nBe brief.")
    response = client.post(
        reverse("admin:agents_agent_change", args=[agent.pk]),
        _agent_form(agent, system_prompt="Answer about the weather.\nBe thorough.", max_iterations=4),
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    change = ConfigChange.objects.get(action="change")
    assert change.changes == {
        "system_prompt": ["Answer about the weather.\nBe brief.", "Answer about the weather.\nBe thorough."],
        "max_iterations": [8, 4],
    }
    assert change.agent_id == agent.pk

    history = reverse("admin:agents_agent_history", args=[agent.pk])
    page = client.get(history).content.decode()
    assert "-Be brief." in page and "+Be thorough." in page and "max iterations" in page and "root" in page

    # A staff user who may view agents but not the audit: refused.
    client.force_login(staff_with("view_agent"))
    assert client.get(history).status_code == 403
    client.force_login(staff_with("view_agent", "view_configchange"))
    assert "+Be thorough." in client.get(history).content.decode()
    # The audit without the object: refused too.
    client.force_login(staff_with("view_configchange"))
    assert client.get(history).status_code == 403


def test_an_agents_history_holds_its_parts_and_the_version_page_links_to_the_change_that_made_it(client, superuser):
    agent = make_agent(slug="weather", tools=["test-echo"])
    agent_version_current(agent=agent)
    response = client.post(
        reverse("admin:agents_agent_change", args=[agent.pk]),
        _agent_form(
            agent,
            description="now described",
            **{
                "guardrail_rules-TOTAL_FORMS": 1,
                "guardrail_rules-0-side": "input",
                "guardrail_rules-0-kind": "blocked_terms",
                "guardrail_rules-0-action": "block",
                "guardrail_rules-0-terms": "password",
                "guardrail_rules-0-enabled": "on",
            },
        ),
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    rule_change = ConfigChange.objects.get(content_type__model="guardrailrule")
    assert rule_change.action == "create" and rule_change.agent_id == agent.pk
    history = client.get(reverse("admin:agents_agent_history", args=[agent.pk])).content.decode()
    assert "password" in history and "now described" in history

    # The first message after the edit writes the version; its page names the edit.
    version = agent_version_current(agent=Agent.objects.get(pk=agent.pk))
    assert version.number == 2
    # Writing a version is no one's change (a message posted it), so it is not a row of its own.
    assert not ConfigChange.objects.filter(content_type__model="agentversion").exists()
    page = client.get(reverse("admin:agents_agentversion_change", args=[version.pk])).content.decode()
    latest = ConfigChange.objects.filter(agent_id=agent.pk).order_by("-at", "-id").first()
    assert reverse("admin:audit_configchange_change", args=[latest.pk]) in page
    # The first version was made by the agent's creation: its tool link was the last part added.
    first = agent.versions.get(number=1)
    tool_link = ConfigChange.objects.get(content_type__model="agenttool")
    page = client.get(reverse("admin:agents_agentversion_change", args=[first.pk])).content.decode()
    assert reverse("admin:audit_configchange_change", args=[tool_link.pk]) in page
    # A version older than every recorded change says so.
    ConfigChange.objects.filter(at__lte=first.created_at).delete()
    page = client.get(reverse("admin:agents_agentversion_change", args=[first.pk])).content.decode()
    assert "older than the audit" in page


def test_the_audit_is_read_only_for_everyone_and_gated_by_its_view_permission(client, superuser):
    ModelConfigFactory()
    change = ConfigChange.objects.get()
    assert client.get(reverse("admin:audit_configchange_changelist")).status_code == 200
    page = client.get(reverse("admin:audit_configchange_change", args=[change.pk]))
    assert page.status_code == 200 and b'name="_save"' not in page.content
    assert client.get(reverse("admin:audit_configchange_add")).status_code == 403
    assert client.post(reverse("admin:audit_configchange_delete", args=[change.pk]), {"post": "yes"}).status_code == 403
    assert client.post(reverse("admin:audit_configchange_change", args=[change.pk]), {}).status_code == 403
    assert ConfigChange.objects.get().changes == change.changes
    # No permission to add, change or delete exists to be granted.
    assert {p.codename for p in ContentType.objects.get_for_model(ConfigChange).permission_set.all()} == {
        "view_configchange"
    }
    client.force_login(staff_with("view_modelconfig"))
    assert client.get(reverse("admin:audit_configchange_changelist")).status_code == 403
    assert client.get(reverse("admin:audit_configchange_change", args=[change.pk])).status_code == 403


def test_the_admin_exports_the_selected_changes(client, superuser):
    ModelConfigFactory(name="one")
    ModelConfigFactory(name="two")
    response = client.post(
        reverse("admin:audit_configchange_changelist"),
        {"action": "export_csv", "_selected_action": list(ConfigChange.objects.values_list("pk", flat=True))},
    )
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    lines = b"".join(response.streaming_content).decode().splitlines()
    assert lines[0].startswith("id,at,action,source,object_type") and len(lines) == 3
    assert "agents.modelconfig" in lines[1] and "one" in lines[1]


def test_a_missing_history_is_a_404_not_an_error(client, superuser):
    # A 404, as another workspace's object's history is (workspaces.admin_scope).
    response = client.get(reverse("admin:agents_agent_history", args=[999999]))
    assert response.status_code == 404
