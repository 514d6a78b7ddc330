"""The common rows, in one place: users and their API tokens, model configs, agents.

Rows of a run's ledger written without the engine are in `tests.support.ledger` (one run) and
`tests.support.ledger_seed` (many); runs driven through the engine in-process are in
`tests.support.runs`; a model config on the fake model server is `tests.support.llm.fake_model`.
The shared fixtures over these (`agent`, `user`, `api`) are in tests/conftest.py.
"""

import uuid

import factory
from django.contrib.auth.models import User

from agents.models import Agent, AgentTool, ModelConfig
from conversations.tokens import api_token_create
from tools.models import ToolDefinition
from tools.registry import registry
from tools.services import registered_tool_row, tool_definitions_sync_from_registry
from workspaces.models import Workspace


class ModelConfigFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ModelConfig

    name = factory.Sequence(lambda n: f"model-{n}")
    base_url = "http://127.0.0.1:9/v1"
    model = "demo"
    max_retries = 2
    price_input_per_million = "1.0"
    price_output_per_million = "2.0"
    price_cached_input_per_million = "0.5"


class AgentFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Agent

    name = factory.Sequence(lambda n: f"Agent {n}")
    slug = factory.Sequence(lambda n: f"agent-{n}")
    model_config = factory.SubFactory(ModelConfigFactory)
    system_prompt = "You are a test agent."


def registered_tools_synced() -> None:
    """Every registered tool as its ToolDefinition row in every workspace, as tools.services' sync
    makes them, in one statement where a workspace has none yet (a test's first agent; a workspace
    made since has them from its creation) and none where all are: the sync is an update_or_create
    per tool and workspace, about 60 statements and 70 ms per workspace on a loaded 2-core
    machine, and about a thousand tests make agents. A partial set goes through the sync itself."""
    names = set(registry.names())
    present = {workspace_id: set() for workspace_id in Workspace.objects.values_list("pk", flat=True)}
    rows = ToolDefinition.objects.filter(name__in=names)
    for workspace_id, name in rows.values_list("workspace_id", "name"):
        present[workspace_id].add(name)
    empty = [workspace_id for workspace_id, found in present.items() if not found]
    ToolDefinition.objects.bulk_create(
        registered_tool_row(tool, workspace_id) for workspace_id in empty for tool in registry.all()
    )
    partial = [workspace_id for workspace_id, found in present.items() if found and found != names]
    if partial:
        tool_definitions_sync_from_registry(workspace_ids=partial)


def make_agent(*, tools: list[str] = (), approval: dict | None = None, **fields) -> Agent:
    """An agent using the named registered tools (synced into ToolDefinition rows first)."""
    registered_tools_synced()
    agent = AgentFactory(**fields)
    for name in tools:
        AgentTool.objects.create(
            agent=agent,
            tool=ToolDefinition.objects.get(workspace_id=agent.workspace_id, name=name),
            approval=(approval or {}).get(name, AgentTool.Approval.INHERIT),
        )
    return agent


def make_user(*, staff: bool = False, groups=()) -> User:
    """A user with the password "pw" (hashed at the test process's cost: tests.support.passwords)."""
    user = User.objects.create_user(username=f"user-{uuid.uuid4().hex[:8]}", password="pw", is_staff=staff)
    user.groups.set(groups)
    return user


def token_for(user: User) -> str:
    return api_token_create(user=user, name="tests")[1]
