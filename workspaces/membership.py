"""Joining workspaces: new accounts of a one-workspace installation, the members' list, and who
of them hears a workspace's approvals."""

from django.conf import settings
from django.db.models import Q
from django.db.models.signals import post_save

from workspaces.defaults import default_workspace_id
from workspaces.models import Membership, Workspace
from workspaces.roles import Role, role_permissions


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


def last_owner(membership: Membership) -> bool:
    """Whether this membership, as saved, is its workspace's only owner: a workspace keeps one
    person who can manage its members."""
    if membership.pk is None:
        return False
    saved = Membership.objects.filter(pk=membership.pk).values_list("role", flat=True).first()
    others = Membership.objects.filter(workspace_id=membership.workspace_id, role=Role.OWNER).exclude(pk=membership.pk)
    return saved == Role.OWNER and not others.exists()


# Deciding approvals; named here as a string: the conversations app sits above this one.
DECIDE_APPROVAL = "conversations.decide_approval"


def approver_emails(*, workspace_id: int) -> set[str]:
    """The addresses (lower case) of the active members of this workspace who may decide its
    approvals: by their role (owner, operator, approver), or with the custom role by the Django
    permission given to them or their groups (or as a superuser)."""
    app_label, codename = DECIDE_APPROVAL.split(".")
    roles = [role for role in Role.values if DECIDE_APPROVAL in role_permissions(role)]
    own = Q(user__user_permissions__codename=codename, user__user_permissions__content_type__app_label=app_label)
    grouped = Q(
        user__groups__permissions__codename=codename, user__groups__permissions__content_type__app_label=app_label
    )
    members = Membership.objects.filter(workspace_id=workspace_id, user__is_active=True).filter(
        Q(role__in=roles) | (Q(role=Role.CUSTOM) & (own | grouped | Q(user__is_superuser=True)))
    )
    return {email.lower() for email in members.values_list("user__email", flat=True).distinct() if email}
