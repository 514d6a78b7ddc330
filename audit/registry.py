"""What the audit records: the configuration models, each with the fields it masks and the
fields it leaves out.

Masked: the value is never written, in clear or encrypted; the row says only whether it was set
before and after (every EncryptedTextField is masked whether named here or not). Left out: what
the platform writes itself while working (learned counters, the last error, the next fire time,
a token's last use) and bulky derived data; saving only those fields reads nothing and writes no
row. Runs, messages, the ledger and memories are records, not configuration: not here.
"""

from dataclasses import dataclass, field

from django.core.exceptions import ObjectDoesNotExist
from django.db import models

from agents.models import (
    Agent,
    AgentDelegate,
    AgentRelease,
    AgentTool,
    AgentVersion,
    GuardrailRule,
    ModelConfig,
    RoutingRule,
)
from alerts.models import AlertRule
from conversations.models import ApiToken
from evals.models import EvalCase, EvalSuite, ReleaseGate
from knowledge.models import KnowledgeBase
from notifications.models import Webhook
from platform_site.crypto import EncryptedTextField
from tools.models import MCPServer, ToolDefinition
from triggers.models import Hook, Schedule
from widgets.models import Widget
from workspaces.access import obj_workspace_id
from workspaces.models import Membership, Workspace

MASK = "••••••••"


@dataclass(frozen=True)
class Audited:
    model: type[models.Model]
    masked: frozenset[str] = frozenset()
    ignored: frozenset[str] = frozenset()
    # The attribute holding the id of the agent the object belongs to ("pk" for an agent).
    agent_attr: str | None = "agent_id"
    # False: creating one is not a change of anyone's (an agent version is written by the first
    # message after a change; the version page links to that change instead).
    creates: bool = True
    # What names the object in the row, when str() would show a secret (a token's prefix).
    name_attr: str | None = None
    # The attribute holding the id of the workspace the object belongs to ("pk" for a workspace);
    # None: the model's own path to it (workspaces.access.obj_workspace_id).
    workspace_attr: str | None = None
    fields: tuple[models.Field, ...] = field(default=(), compare=False)

    def __post_init__(self):
        concrete = [f for f in self.model._meta.concrete_fields if f.name not in self.ignored and not _automatic(f)]
        object.__setattr__(self, "fields", tuple(concrete))

    def masks(self, model_field: models.Field) -> bool:
        return model_field.name in self.masked or isinstance(model_field, EncryptedTextField)

    def agent_of(self, instance) -> int | None:
        return getattr(instance, self.agent_attr) if self.agent_attr else None

    def workspace_of(self, instance) -> int | None:
        if self.workspace_attr:
            return getattr(instance, self.workspace_attr)
        try:
            return obj_workspace_id(instance)
        except ObjectDoesNotExist:
            # Its parent (an agent, a suite) went first in a cascade.
            return None

    def name_of(self, instance) -> str:
        return str(getattr(instance, self.name_attr) if self.name_attr else instance)


def _automatic(model_field: models.Field) -> bool:
    # Timestamps Django sets on every save: the row's own time says when.
    return bool(getattr(model_field, "auto_now", False) or getattr(model_field, "auto_now_add", False))


AUDITED = (
    Audited(
        ModelConfig,
        masked=frozenset({"api_key"}),
        # Learned by the engine from each call's usage (agents.providers.calibration).
        ignored=frozenset(
            {
                "calibration_calls",
                "prompt_tokens_reported",
                "prompt_tokens_estimated",
                "completion_tokens_reported",
                "completion_tokens_estimated",
            }
        ),
        agent_attr=None,
    ),
    Audited(Agent, agent_attr="pk"),
    Audited(AgentTool),
    Audited(GuardrailRule),
    Audited(RoutingRule),
    Audited(AgentDelegate, agent_attr="parent_id"),
    # The snapshot is the configuration the changes above made, hashed: the hash stands for it.
    Audited(AgentVersion, ignored=frozenset({"snapshot"}), creates=False),
    Audited(AgentRelease),
    Audited(MCPServer, ignored=frozenset({"discovered_at", "last_error"}), agent_attr=None),
    Audited(ToolDefinition, agent_attr=None),
    Audited(KnowledgeBase, ignored=frozenset({"status", "last_error"}), agent_attr=None),
    Audited(EvalSuite, agent_attr=None),
    Audited(EvalCase, agent_attr=None),
    Audited(ReleaseGate),
    # Moved by every fire (triggers.schedules), not by whoever configures the schedule.
    Audited(Schedule, ignored=frozenset({"next_fire_at", "last_fired_at", "conversation"})),
    Audited(Hook),
    Audited(Widget),
    Audited(Webhook),
    Audited(AlertRule),
    # Never the token nor its hash; its prefix is the token's first characters.
    Audited(
        ApiToken,
        masked=frozenset({"key_hash", "prefix"}),
        ignored=frozenset({"last_used_at"}),
        agent_attr=None,
        name_attr="name",
    ),
    # Who may do what where: a workspace's budgets, its members and their roles.
    Audited(Workspace, agent_attr=None, workspace_attr="pk"),
    Audited(Membership, agent_attr=None),
)

_BY_MODEL = {spec.model: spec for spec in AUDITED}


def audited(model: type[models.Model]) -> Audited | None:
    return _BY_MODEL.get(model)
