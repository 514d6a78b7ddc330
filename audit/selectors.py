"""Reads of the configuration audit: an object's history, the change that made an agent
version, the rows an export streams."""

from datetime import datetime

from django.contrib.contenttypes.models import ContentType
from django.db.models import Q, QuerySet

from agents.models import Agent, AgentRelease, AgentTool, AgentVersion, ModelConfig
from audit.models import ConfigChange
from tools.models import ToolDefinition
from workspaces.access import in_workspace


def config_changes_of(*, instance) -> QuerySet[ConfigChange]:
    """The object's changes, newest first; an agent's include those of what belongs to it."""
    own = Q(content_type=ContentType.objects.get_for_model(type(instance)), object_id=str(instance.pk))
    if isinstance(instance, Agent):
        own |= Q(agent_id=instance.pk)
    return ConfigChange.objects.filter(own).select_related("content_type").order_by("-at", "-id")


def version_origin_change(*, version: AgentVersion) -> ConfigChange | None:
    """The change that made this version: the last change, up to the version's writing, of its
    agent, of what belongs to the agent, or of the model configs and tools it uses. None for a
    version older than the audit."""
    agent = version.agent
    types = ContentType.objects.get_for_models(AgentVersion, AgentRelease, ModelConfig, ToolDefinition)
    model_ids = {str(pk) for pk in (agent.model_config_id, agent.fallback_model_config_id) if pk}
    tool_ids = {str(pk) for pk in AgentTool.objects.filter(agent=agent).values_list("tool_id", flat=True)}
    made = (
        # Releasing a version does not make one.
        (Q(agent_id=agent.pk) & ~Q(content_type__in=[types[AgentVersion], types[AgentRelease]]))
        | Q(content_type=types[ModelConfig], object_id__in=model_ids)
        | Q(content_type=types[ToolDefinition], object_id__in=tool_ids)
    )
    return ConfigChange.objects.filter(made, at__lte=version.created_at).order_by("-at", "-id").first()


def config_changes_visible_to(user) -> QuerySet[ConfigChange]:
    """The changes of the workspace `user` acts in (every change, for a superuser acting
    installation-wide)."""
    return in_workspace(ConfigChange.objects.all(), user)


def config_changes_for_export(
    *, user, agent: Agent | None = None, since: datetime | None = None, until: datetime | None = None
) -> QuerySet[ConfigChange]:
    """What an export streams; `user` None: the command line, which reads the whole database."""
    changes = ConfigChange.objects.all() if user is None else config_changes_visible_to(user)
    if agent is not None:
        changes = changes.filter(agent_id=agent.pk)
    if since is not None:
        changes = changes.filter(at__gte=since)
    if until is not None:
        changes = changes.filter(at__lt=until)
    return changes
