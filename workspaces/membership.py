"""Joining workspaces: new accounts of a one-workspace installation, and the members' list."""

from django.conf import settings
from django.db.models.signals import post_save

from workspaces.defaults import default_workspace_id
from workspaces.models import Membership, Workspace
from workspaces.roles import Role


def membership_set(*, user, workspace: Workspace, role: str, from_sso: bool = False) -> Membership:
    membership, created = Membership.objects.get_or_create(
        user=user, workspace=workspace, defaults={"role": role, "from_sso": from_sso}
    )
    if not created and membership.role != role:
        membership.role = role
        membership.from_sso = from_sso
        membership.save(update_fields=["role", "from_sso"])
    return membership


def _first_workspace_join(sender, instance, created, raw=False, **kwargs):
    if not created or raw:
        return
    # Once an installation has a second workspace, accounts join workspaces by an owner's hand
    # or single sign-on's mapping, never by default.
    if Workspace.objects.count() > 1:
        return
    Membership.objects.get_or_create(user=instance, workspace_id=default_workspace_id(), defaults={"role": Role.CUSTOM})


def first_workspace_join_connect() -> None:
    post_save.connect(_first_workspace_join, sender=settings.AUTH_USER_MODEL, dispatch_uid="first_workspace_join")
