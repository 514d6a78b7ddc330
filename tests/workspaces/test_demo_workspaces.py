"""The demo seeds two workspaces: everything it had in the first, and "Research" with its own
model config, agent and builder; the superusers belong to both."""

import io

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from agents.models import Agent, ModelConfig
from demo.workspaces import RESEARCH_AGENT, RESEARCHER
from evals.models import EvalSuite
from tools.models import ToolDefinition
from workspaces.access import binding_for, in_workspace
from workspaces.defaults import default_workspace_id
from workspaces.models import Membership, Workspace
from workspaces.roles import Role

pytestmark = pytest.mark.django_db

LLM = "http://127.0.0.1:9/v1"


def _seed(**options) -> str:
    out = io.StringIO()
    call_command("agentry_seed_demo", llm_base_url=LLM, stdout=out, **options)
    return out.getvalue()


def test_the_demo_seeds_a_second_workspace_with_its_own_model_agent_and_builder(monkeypatch):
    monkeypatch.delenv("AGENTRY_DEMO_RESEARCHER_PASSWORD", raising=False)
    admin = User.objects.create_superuser(username="admin", password="pw")
    output = _seed(dev_default=True)

    default = Workspace.objects.get(pk=default_workspace_id())
    research = Workspace.objects.get(slug="research")
    assert Workspace.objects.count() == 2
    # Everything the demo had stays in the first workspace.
    assert Agent.objects.get(slug="customer-service").workspace == default
    assert ModelConfig.objects.get(name="demo").workspace == default
    # The registered (python) tools, the demo's included, are in every workspace (workspaces.names).
    assert set(ToolDefinition.objects.values_list("workspace_id", flat=True)) == {default.pk, research.pk}
    assert ToolDefinition.objects.exclude(kind="python").count() == 0
    assert set(EvalSuite.objects.values_list("workspace_id", flat=True)) == {default.pk}
    agent = Agent.objects.get(slug=RESEARCH_AGENT)
    assert agent.workspace == research and agent.model_config.workspace == research
    assert agent.model_config.base_url == LLM and agent.model_config != ModelConfig.objects.get(name="demo")

    researcher = User.objects.get(username=RESEARCHER)
    assert researcher.check_password("researcher") and researcher.is_staff and not researcher.is_superuser
    assert list(Membership.objects.filter(user=researcher).values_list("workspace", "role")) == [
        (research.pk, Role.BUILDER)
    ]
    assert binding_for(researcher, None).workspace == research
    assert list(in_workspace(Agent.objects.all(), researcher)) == [agent]
    assert set(Membership.objects.filter(user=admin).values_list("workspace", flat=True)) == {default.pk, research.pk}
    assert "researcher" in output and "for this machine only" in output and "header" in output

    # Seeding again makes nothing twice and keeps a role given since.
    Membership.objects.filter(user=researcher).update(role=Role.VIEWER)
    again = _seed(dev_default=True)
    assert Workspace.objects.count() == 2 and Agent.objects.filter(slug=RESEARCH_AGENT).count() == 1
    assert Membership.objects.get(user=researcher).role == Role.VIEWER
    assert "created" not in again.split("Workspaces:")[1]


def test_the_researcher_is_made_only_with_a_password_from_the_environment_or_on_loopback(monkeypatch):
    monkeypatch.delenv("AGENTRY_DEMO_RESEARCHER_PASSWORD", raising=False)
    # A deployment seeding the demo (docker compose) gets no account anyone could guess.
    output = _seed()
    assert not User.objects.filter(username=RESEARCHER).exists()
    assert Workspace.objects.filter(slug="research").exists() and "AGENTRY_DEMO_RESEARCHER_PASSWORD" in output

    monkeypatch.setenv("AGENTRY_DEMO_RESEARCHER_PASSWORD", "short")
    with pytest.raises(CommandError, match="too weak"):
        _seed()
    assert not User.objects.filter(username=RESEARCHER).exists()

    monkeypatch.setenv("AGENTRY_DEMO_RESEARCHER_PASSWORD", "a-long-demo-passphrase")
    output = _seed()
    researcher = User.objects.get(username=RESEARCHER)
    assert researcher.check_password("a-long-demo-passphrase") and "a-long-demo-passphrase" not in output
    assert Membership.objects.get(user=researcher).role == Role.BUILDER
