"""Who may decide approvals: the permission and the Approvers group that carries it.

Record-level permissions on the conversations app's Approval model, so the app's post_migrate
hook can ensure the group without reaching into the engine that settles decisions.
"""

from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType

from conversations.models import Approval

DECIDE_PERMISSION = "conversations.decide_approval"
APPROVERS_GROUP = "Approvers"


def user_may_decide(user) -> bool:
    return bool(user and user.is_active and user.has_perm(DECIDE_PERMISSION))


def approvers_group_ensure() -> Group:
    """The group whose members may decide approvals (and read them in the admin)."""
    content_type = ContentType.objects.get_for_model(Approval)
    group, _ = Group.objects.get_or_create(name=APPROVERS_GROUP)
    for codename, name in [
        ("decide_approval", "Can approve or reject tool calls"),
        ("view_approval", "Can view approval"),
    ]:
        permission, _ = Permission.objects.get_or_create(
            content_type=content_type, codename=codename, defaults={"name": name}
        )
        group.permissions.add(permission)
    return group
