"""The demo's second workspace: "Research", with a model config of its own on the same fake LLM,
one agent and one member (`researcher`, a builder). Everything else the demo seeds stays in the
installation's first workspace; the superusers are members of both, to show the switcher."""

from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import transaction

from agents.models import Agent, ModelConfig
from workspaces.defaults import default_workspace_id
from workspaces.membership import membership_set
from workspaces.models import Membership, Workspace
from workspaces.roles import Role

RESEARCH_SLUG = "research"
RESEARCH_AGENT = "research-assistant"
RESEARCH_MODEL = "research-demo"
RESEARCHER = "researcher"
# Only for the demo on loopback (scripts/dev.sh prints it, as it prints the admin's).
RESEARCHER_DEV_PASSWORD = "researcher"


@dataclass(frozen=True)
class ResearchSeed:
    workspace: Workspace
    agent: Agent
    researcher_created: bool


@transaction.atomic
def research_workspace_seed(*, llm_base_url: str, password: str | None, stream: bool = True, reset: bool = False):
    """Create what is missing (with `reset`, put the agent and its model config back). The
    researcher's account is made only with a password (and keeps it afterwards): without one, a
    deployment seeding the demo gets no account anyone could guess."""
    workspace, _ = Workspace.objects.get_or_create(slug=RESEARCH_SLUG, defaults={"name": "Research"})
    seed = _reset_or_create if reset else _get_or_create
    model = seed(
        ModelConfig,
        {"workspace": workspace, "name": RESEARCH_MODEL},
        {
            "base_url": llm_base_url,
            "model": "demo",
            "stream": stream,
            "max_retries": 2,
            "price_input_per_million": "0.15",
            "price_output_per_million": "1.50",
            "price_cached_input_per_million": "0.03",
            # The shipped fake server answers images, files and audio (fakellm).
            "input_kinds": ["text", "image", "audio", "file"],
        },
    )
    agent = seed(
        Agent,
        {"slug": RESEARCH_AGENT},
        {
            "workspace": workspace,
            "name": "Research assistant",
            "model_config": model,
            "system_prompt": "You are the research team's assistant. Answer briefly.",
            "time_zone": "Asia/Shanghai",
            "description": "The Research workspace's own agent, on its own model config.",
        },
    )
    User = get_user_model()
    researcher = User.objects.filter(username=RESEARCHER).first()
    created = researcher is None and password is not None
    if created:
        # Made after the workspace: with two workspaces, a new account joins none by default.
        researcher = User.objects.create_user(username=RESEARCHER, password=password, is_staff=True)
    if researcher is not None and (created or reset):
        membership_set(user=researcher, workspace=workspace, role=Role.BUILDER)
    for admin in User.objects.filter(is_superuser=True):
        for place in (default_workspace_id(), workspace.pk):
            # A role an owner gave them since is theirs to keep.
            Membership.objects.get_or_create(user=admin, workspace_id=place, defaults={"role": Role.OWNER})
    return ResearchSeed(workspace=workspace, agent=agent, researcher_created=created)


def _get_or_create(model, lookup: dict, defaults: dict):
    return model.objects.get_or_create(**lookup, defaults=defaults)[0]


def _reset_or_create(model, lookup: dict, defaults: dict):
    return model.objects.update_or_create(**lookup, defaults=defaults)[0]
