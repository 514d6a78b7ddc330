"""Who may choose what a run runs, beyond what live traffic gets: one rule for every way in that
lets a caller choose (a posted message's `version`, a fork's version or model config).

- A version named on purpose ("draft", "published", a number) takes the permission to test agent
  versions: the live version is what a run gets when none is named.
- A run that repeats another run's version (a fork with no version named) repeats a version that
  has served live traffic freely: one that was published, or any of an agent never published
  (its draft was live). Another one (a draft a tester ran) takes that permission too.
- An edited draft of the prompt playground (a playground version) takes it always.
- A model config other than one the agent uses (its model, its fallback, or one of its versions'
  models or fallbacks) takes the permission to change model configs: that permission is what
  lets an operator point a config anywhere and test its connection, billing its key.
"""

from django.db.models import Q
from django.utils.translation import gettext as _

from agents.models import Agent, AgentVersion, ModelConfig
from agents.releases import TEST_VERSION_PERMISSION

RUN_MODEL_PERMISSION = "agents.change_modelconfig"


class RunChoiceRefused(PermissionError):
    """The user may not choose this for a run (a 403): the message says which permission it takes."""


def run_choice_check(
    *,
    user,
    agent_id: int,
    version: str | int | AgentVersion | None = None,
    model_config: ModelConfig | None = None,
) -> None:
    """Raises RunChoiceRefused unless `user` may run agent `agent_id` with these choices.
    `version`: what the caller named (a str or int), or the AgentVersion a run repeats; None:
    the live one. `model_config`: a config the run uses instead of its version's; None: its own.
    Nothing is read when nothing is chosen."""
    if isinstance(version, AgentVersion) and version.playground:
        # An edited draft of the prompt playground has served no traffic, whatever the agent's
        # history: trying it is testing a version.
        if not user.has_perm(TEST_VERSION_PERMISSION):
            raise RunChoiceRefused(_("Trying an edited draft takes the permission to test agent versions."))
    elif isinstance(version, AgentVersion):
        # An agent never published runs its draft live: any of its versions served live traffic.
        if (
            version.published_at is None
            and not user.has_perm(TEST_VERSION_PERMISSION)
            and Agent.objects.filter(pk=agent_id, published_version__isnull=False).exists()
        ):
            raise RunChoiceRefused(
                _(
                    "This run ran version %(number)s, which was never published; running it again takes the "
                    "permission to test agent versions."
                )
                % {"number": version.number}
            )
    elif version is not None and not user.has_perm(TEST_VERSION_PERMISSION):
        raise RunChoiceRefused(_("Choosing the version to run takes the permission to test agent versions."))
    if model_config is not None and not user.has_perm(RUN_MODEL_PERMISSION):
        if not _agent_uses(agent_id=agent_id, config_id=model_config.pk):
            raise RunChoiceRefused(
                _(
                    "Running the agent on a model config it does not use (%(name)s) takes the permission to "
                    "change model configs."
                )
                % {"name": model_config.name}
            )


def _agent_uses(*, agent_id: int, config_id: int) -> bool:
    """Whether the agent runs on this config now or ran on it in one of its versions."""
    if Agent.objects.filter(Q(model_config_id=config_id) | Q(fallback_model_config_id=config_id), pk=agent_id).exists():
        return True
    return (
        AgentVersion.objects.filter(agent_id=agent_id, playground=False)
        .filter(Q(snapshot__model__id=config_id) | Q(snapshot__fallback_model__id=config_id))
        .exists()
    )
