"""Routing rules as configuration: part of the version's snapshot (in order, enabled ones only,
each with its own condition's settings; old snapshots read as no rules), a change to one gives
the next post a new version, and the agent admin's inline offers and takes only the
workspace's chat model configs."""

from datetime import time

import pytest
from django.core.exceptions import ValidationError

from agents.models import ModelConfig, ModelPurpose, RoutingRule
from agents.selectors import agent_config_state
from agents.snapshot import snapshot_build, snapshot_parse, snapshot_routing
from tests.support.admin_forms import agent_admin_inlines
from tests.support.factories import ModelConfigFactory, make_agent, make_user
from workspaces.defaults import default_workspace_id
from workspaces.membership import membership_set
from workspaces.models import Workspace
from workspaces.references import OTHER_WORKSPACE
from workspaces.roles import Role

pytestmark = pytest.mark.django_db


def test_the_snapshot_holds_the_enabled_rules_in_order_with_their_own_settings():
    agent = make_agent()
    big, classifier = ModelConfigFactory(name="big"), ModelConfigFactory(name="classifier")
    RoutingRule.objects.create(
        agent=agent,
        position=2,
        name="coding",
        condition="classifier",
        classifier_model=classifier,
        classifier_prompt="Label: code or chat.",
        labels="Code, programming",
        model_config=big,
    )
    RoutingRule.objects.create(
        agent=agent, position=1, name="long", condition="input_length", length_over=2000, model_config=big
    )
    RoutingRule.objects.create(agent=agent, position=3, condition="tier", tiers="gold", model_config=big, enabled=False)
    RoutingRule.objects.create(
        agent=agent, position=4, condition="time_of_day", time_start=time(22), time_end=time(6), model_config=big
    )

    rules = snapshot_routing(snapshot_build(agent=agent))["rules"]

    assert [(rule["name"], rule["condition"]) for rule in rules] == [
        ("long", "input_length"),
        ("coding", "classifier"),
        ("", "time_of_day"),
    ]
    long, coding, night = rules
    assert long["model"]["name"] == "big" and "api_key" not in long["model"]
    assert (long["length_unit"], long["length_over"], long["length_under"]) == ("chars", 2000, None)
    assert "labels" not in long and "tiers" not in long
    assert coding["labels"] == ["code", "programming"]
    assert coding["classifier_model"]["name"] == "classifier"
    assert coding["classifier_prompt"] == "Label: code or chat."
    assert (night["time_start"], night["time_end"], night["time_zone"]) == ("22:00:00", "06:00:00", "")


def test_an_agent_without_rules_and_an_old_snapshot_have_none():
    agent = make_agent()
    snapshot = snapshot_build(agent=agent)
    assert "routing" not in snapshot and snapshot_routing(snapshot) is None
    RoutingRule.objects.create(
        agent=agent, condition="tier", tiers="gold", model_config=agent.model_config, enabled=False
    )
    assert "routing" not in snapshot_build(agent=agent)
    # A version pinned before routing existed: no key, read as no rules.
    assert snapshot_routing(snapshot_parse(dict(snapshot))) is None


def test_a_change_to_a_rule_or_its_model_changes_the_configuration_state():
    agent = make_agent()
    state, _version = agent_config_state(agent=agent)
    rule = RoutingRule.objects.create(
        agent=agent, condition="input_length", length_over=10, model_config=ModelConfigFactory()
    )
    added, _version = agent_config_state(agent=agent)
    assert added != state
    RoutingRule.objects.filter(pk=rule.pk).update(length_over=20)
    changed, _version = agent_config_state(agent=agent)
    assert changed != added
    ModelConfig.objects.filter(pk=rule.model_config_id).update(temperature=0.1)
    assert agent_config_state(agent=agent)[0] != changed


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"condition": "input_length"}, "length_over"),
        ({"condition": "attachments"}, "attachment_kind"),
        ({"condition": "tier", "tiers": " , "}, "tiers"),
        ({"condition": "time_of_day", "time_start": time(9)}, "time_start"),
        ({"condition": "classifier", "labels": "a"}, "classifier_model"),
        (
            {"condition": "time_of_day", "time_start": time(9), "time_end": time(10), "time_zone": "Mars/Base"},
            "time_zone",
        ),
    ],
)
def test_each_condition_needs_its_settings(fields, field):
    agent = make_agent()
    with pytest.raises(ValidationError) as refused:
        RoutingRule(agent=agent, model_config=agent.model_config, **fields).full_clean()
    assert field in refused.value.message_dict


def test_a_rule_picks_a_chat_model_config():
    agent = make_agent()
    speech = ModelConfigFactory(purpose=ModelPurpose.TRANSCRIPTION)
    with pytest.raises(ValidationError) as refused:
        RoutingRule(agent=agent, condition="attachments", attachment_kind="any", model_config=speech).full_clean()
    assert "model_config" in refused.value.message_dict


def _agent_post(model_config, **fields) -> dict:
    return {
        "name": "Router",
        "slug": "router",
        "system_prompt": "",
        "time_zone": "UTC",
        "language": "en",
        "model_config": model_config.pk,
        "max_iterations": 8,
        "max_same_tool_streak": 3,
        "tool_choice": "auto",
        "tool_choice_name": "",
        "parallel_tool_calls": "on",
        "is_active": "on",
        **agent_admin_inlines(routing_rules=1),
        "routing_rules-0-position": 0,
        "routing_rules-0-name": "long",
        "routing_rules-0-condition": "input_length",
        "routing_rules-0-length_unit": "chars",
        "routing_rules-0-length_over": 500,
        "routing_rules-0-enabled": "on",
        **fields,
    }


def test_the_inline_offers_and_takes_only_the_workspaces_chat_model_configs(client):
    first = Workspace.objects.get(pk=default_workspace_id())
    other = Workspace.objects.create(name="zulu team", slug="zulu")
    member = make_user(staff=True)
    membership_set(user=member, workspace=first, role=Role.BUILDER)
    ours = ModelConfigFactory(workspace=first, name="ours-big")
    speech = ModelConfigFactory(workspace=first, name="ours-speech", purpose=ModelPurpose.TRANSCRIPTION)
    theirs = ModelConfigFactory(workspace=other, name="zulu-big")
    client.force_login(member)

    page = client.get("/admin/agents/agent/add/")
    assert page.status_code == 200
    formset = next(f for f in page.context["inline_admin_formsets"] if f.formset.prefix == "routing_rules")
    for field in ("model_config", "classifier_model"):
        offered = set(formset.formset.empty_form.fields[field].queryset)
        assert ours in offered and theirs not in offered and speech not in offered

    for refused in (theirs, speech):
        page = client.post(
            "/admin/agents/agent/add/", _agent_post(ours, **{"routing_rules-0-model_config": refused.pk})
        )
        assert page.status_code == 200
        assert "Select a valid choice" in page.content.decode()
    assert not RoutingRule.objects.exists()

    saved = client.post("/admin/agents/agent/add/", _agent_post(ours, **{"routing_rules-0-model_config": ours.pk}))
    assert saved.status_code == 302
    rule = RoutingRule.objects.get()
    assert (rule.agent.slug, rule.model_config, rule.length_over) == ("router", ours, 500)


def test_a_rule_may_not_refer_to_another_workspaces_model_config():
    agent = make_agent(workspace=Workspace.objects.get(pk=default_workspace_id()))
    theirs = ModelConfigFactory(workspace=Workspace.objects.create(name="zulu team", slug="zulu"))
    with pytest.raises(ValidationError) as refused:
        RoutingRule(agent=agent, condition="attachments", attachment_kind="any", model_config=theirs).full_clean()
    assert str(OTHER_WORKSPACE) in refused.value.message_dict["model_config"]
