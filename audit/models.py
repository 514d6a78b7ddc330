from django.conf import settings
from django.contrib.contenttypes.models import ContentType
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from audit import context
from workspaces.models import Workspace


class Action(models.TextChoices):
    CREATE = "create", _("create")
    CHANGE = "change", _("change")
    DELETE = "delete", _("delete")


class Source(models.TextChoices):
    ADMIN = context.SOURCE_ADMIN, _("admin")
    API = context.SOURCE_API, _("API")
    CONSOLE = context.SOURCE_CONSOLE, _("operator pages")
    CLI = context.SOURCE_CLI, _("command line")
    SYSTEM = context.SOURCE_SYSTEM, _("system")


class ConfigChange(models.Model):
    """One create, change or delete of a configuration object: who, when, from where, and the
    fields it changed as {field: [before, after]}, secrets masked (audit.registry).

    Nothing points here and it points at nothing it could lose: the object, its agent and the
    API token are kept by id, so deleting any of them (or a retention purge) leaves the row; its
    workspace is a key without a constraint, kept when the workspace goes.
    """

    at = models.DateTimeField(_("at"), default=timezone.now)
    action = models.CharField(_("action"), max_length=8, choices=Action.choices)
    source = models.CharField(_("source"), max_length=8, choices=Source.choices)
    content_type = models.ForeignKey(
        ContentType, on_delete=models.PROTECT, related_name="+", verbose_name=_("object type")
    )
    # Text: widgets and hooks have UUID keys.
    object_id = models.CharField(_("object id"), max_length=64)
    object_repr = models.CharField(_("object"), max_length=200)
    # The agent the object belongs to (itself, for an agent), so an agent's history holds its
    # tools, guardrails, delegates, schedules, hooks, widgets and webhooks too.
    agent_id = models.BigIntegerField(_("agent id"), null=True, blank=True)
    # The object's workspace (a workspace's own, for a workspace): what narrows the list and the
    # export to the current workspace (workspaces.access.in_workspace). No database constraint:
    # deleting a workspace writes its own delete row and leaves its history (a superuser's to read).
    workspace = models.ForeignKey(
        Workspace,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("workspace"),
    )
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("user"),
    )
    # The user's name when the change was made (kept if the user goes), or the terminal's account.
    actor_label = models.CharField(_("who"), max_length=150, blank=True, default="")
    api_token_id = models.BigIntegerField(_("API token id"), null=True, blank=True)
    changes = models.JSONField(_("changes"), default=dict)

    class Meta:
        verbose_name = _("configuration change")
        verbose_name_plural = _("configuration changes")
        # Rows are written by the receivers only: no one adds, edits or deletes one.
        default_permissions = ("view",)
        indexes = [
            models.Index(fields=["content_type", "object_id", "-at"], name="config_change_object"),
            models.Index(fields=["agent_id", "-at"], name="config_change_agent"),
            models.Index(fields=["-at"], name="config_change_at"),
            models.Index(fields=["workspace", "-at"], name="config_change_workspace"),
        ]

    def __str__(self):
        return f"{self.get_action_display()} {self.object_repr}"
