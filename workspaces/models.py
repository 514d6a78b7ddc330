"""Workspaces: who owns a configuration object, and who may do what with it.

Every configuration object (model configs and their keys, agents, tools, MCP servers, knowledge
bases, guardrails, eval suites, schedules, hooks, widgets, webhooks, alert rules, API tokens)
has a `workspace`; runs, conversations, memories and the ledger belong to their agent's. A person
belongs to workspaces through a Membership with a role (workspaces.roles)."""

from django.conf import settings
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models, transaction
from django.dispatch import Signal
from django.utils.translation import gettext_lazy as _

from workspaces.roles import Role

workspace_slug_validator = RegexValidator(r"^[a-z0-9][a-z0-9-]{0,48}$", _("Use lowercase letters, digits and '-'."))

# Asks for the rows a workspace has from its creation, which an app above this one gives it (the
# built-in tools: tools.services): each receiver returns a queryset of them, or None. They go
# with the workspace, so they never keep an otherwise empty workspace from being deleted.
workspace_built_ins = Signal()


def built_ins_of(workspace) -> list[models.QuerySet]:
    replies = workspace_built_ins.send(sender=Workspace, workspace=workspace)
    return [rows for _receiver, rows in replies if rows is not None]


class Workspace(models.Model):
    name = models.CharField(_("name"), max_length=100, unique=True)
    slug = models.CharField(_("slug"), max_length=49, unique=True, validators=[workspace_slug_validator])
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    # Budgets and quotas for the whole workspace (every agent, every way in); empty = no limit.
    daily_token_limit = models.PositiveBigIntegerField(
        _("daily token limit"), null=True, blank=True, validators=[MinValueValidator(1)]
    )
    monthly_token_limit = models.PositiveBigIntegerField(
        _("monthly token limit"), null=True, blank=True, validators=[MinValueValidator(1)]
    )
    daily_cost_limit = models.DecimalField(
        _("daily cost limit"), max_digits=14, decimal_places=6, null=True, blank=True, validators=[MinValueValidator(0)]
    )
    monthly_cost_limit = models.DecimalField(
        _("monthly cost limit"),
        max_digits=14,
        decimal_places=6,
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
    )
    max_runs_in_flight = models.PositiveIntegerField(
        _("max runs in flight"), null=True, blank=True, validators=[MinValueValidator(1)]
    )
    # The bytes its attachments may take together; empty = AGENTRY_ATTACHMENT_WORKSPACE_BYTES.
    attachment_bytes_limit = models.PositiveBigIntegerField(
        _("attachment storage limit (bytes)"), null=True, blank=True, validators=[MinValueValidator(1)]
    )

    class Meta:
        verbose_name = _("workspace")
        verbose_name_plural = _("workspaces")
        ordering = ["name"]
        permissions = [("manage_members", _("Can manage a workspace's members and their roles"))]

    def __str__(self):
        return self.name

    def delete(self, *args, **kwargs):
        # Its built-in rows first, in the same transaction: the delete of a workspace that still
        # has anything else is refused (every workspace column protects) and undoes theirs.
        with transaction.atomic():
            for rows in built_ins_of(self):
                rows.delete()
            return super().delete(*args, **kwargs)


class Membership(models.Model):
    """A person in a workspace, with one role."""

    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="memberships", verbose_name=_("workspace")
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships", verbose_name=_("user")
    )
    role = models.CharField(_("role"), max_length=16, choices=Role.choices)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    # Set when single sign-on made or last changed this membership from the provider's claims,
    # so the next login may change it again; a membership an owner set by hand is left alone.
    from_sso = models.BooleanField(_("from single sign-on"), default=False)

    class Meta:
        verbose_name = _("membership")
        verbose_name_plural = _("memberships")
        ordering = ["workspace", "user"]
        constraints = [models.UniqueConstraint(fields=["workspace", "user"], name="membership_unique")]

    def __str__(self):
        return f"{self.user} in {self.workspace} ({self.role})"


class SignOnIdentity(models.Model):
    """A person's account at the single sign-on provider: its issuer and stable subject, so a
    returning person is found again whatever their name or email became (workspaces.sso). An
    email is never enough to take over an account."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sign_on_identities", verbose_name=_("user")
    )
    issuer = models.CharField(_("issuer"), max_length=255)
    subject = models.CharField(_("subject"), max_length=255)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("single sign-on identity")
        verbose_name_plural = _("single sign-on identities")
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="sign_on_identity_unique")]

    def __str__(self):
        return f"{self.user} ({self.issuer})"
