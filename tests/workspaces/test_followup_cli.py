"""The commands that read or export data take --workspace SLUG: that workspace's rows and agents
only; without it the whole installation, as before; an unknown slug is a clear CommandError."""

import io
import json

import pytest
from django.core.management import CommandError, call_command

from conversations.models import Conversation, Run
from tests.support.factories import AgentFactory, ModelConfigFactory
from tests.support.ledger import ledger_run
from workspaces.models import Workspace

pytestmark = pytest.mark.django_db


@pytest.fixture
def two():
    a = Workspace.objects.create(name="Alpha", slug="alpha")
    b = Workspace.objects.create(name="Bravo", slug="bravo")
    agents = {}
    for workspace, tag in ((a, "alpha"), (b, "bravo")):
        model = ModelConfigFactory(workspace=workspace, name=f"model-{tag}")
        agents[tag] = AgentFactory(workspace=workspace, model_config=model, slug=f"agent-{tag}")
    runs = {tag: ledger_run(agent) for tag, agent in agents.items()}
    return a, b, agents, runs


def _lines(command: str, *args) -> list[dict]:
    out = io.StringIO()
    call_command(command, *args, stdout=out)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_agentry_export_exports_one_workspaces_runs(two):
    _a, _b, _agents, runs = two
    assert {r["id"] for r in _lines("agentry_export", "--workspace", "alpha")} == {str(runs["alpha"].pk)}
    assert {r["id"] for r in _lines("agentry_export", "--workspace", "bravo")} == {str(runs["bravo"].pk)}
    # Without it: the whole installation, as before.
    assert {r["id"] for r in _lines("agentry_export")} == {str(run.pk) for run in runs.values()}
    # --agent names the workspace's agents only: another's is unknown there.
    with pytest.raises(CommandError, match="--agent"):
        call_command("agentry_export", "--workspace", "alpha", "--agent", "agent-bravo", stdout=io.StringIO())


def test_agentry_audit_export_exports_one_workspaces_changes(two):
    def objects(*args):
        return {line["object"] for line in _lines("agentry_audit_export", *args)}

    alpha, everything = objects("--workspace", "alpha"), objects()
    assert any("agent-alpha" in name or "model-alpha" in name for name in alpha)
    assert not any("bravo" in name.lower() for name in alpha)
    assert any("bravo" in name.lower() for name in everything) and alpha < everything


@pytest.mark.parametrize("command", ["agentry_export", "agentry_audit_export"])
def test_an_unknown_workspace_is_a_clear_error(two, command):
    with pytest.raises(CommandError, match="--workspace: no workspace has the slug 'nope'"):
        call_command(command, "--workspace", "nope", stdout=io.StringIO())


def test_agentry_chat_with_a_workspace_talks_to_its_agents_only(two, no_enqueue):
    _a, _b, agents, runs = two
    before = Run.objects.count()
    with pytest.raises(CommandError, match="No agent with slug 'agent-bravo' in workspace 'alpha'"):
        call_command("agentry_chat", "hi", "--workspace", "alpha", "--agent", "agent-bravo", stdout=io.StringIO())
    conversation_b = str(runs["bravo"].conversation_id)
    with pytest.raises(CommandError, match=f"No conversation {conversation_b} in workspace 'alpha'"):
        call_command("agentry_chat", "hi", "--workspace", "alpha", "--conversation", conversation_b)
    with pytest.raises(CommandError, match="--workspace: no workspace"):
        call_command("agentry_chat", "hi", "--workspace", "nope", "--agent", "agent-alpha")
    assert Run.objects.count() == before

    # Its own agent: the run is started (kept off the broker, so the wait times out).
    with pytest.raises(CommandError):
        call_command(
            "agentry_chat",
            "hi",
            "--workspace",
            "alpha",
            "--agent",
            "agent-alpha",
            "--timeout",
            "0.2",
            stdout=io.StringIO(),
        )
    started = Run.objects.exclude(pk__in=[run.pk for run in runs.values()]).get()
    assert started.agent == agents["alpha"] and Conversation.objects.count() == 3
