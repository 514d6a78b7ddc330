"""Who may decide approvals and who may operate runs: the permissions and the groups that carry them.

Record-level permissions on the conversations app's Approval model, so the app's post_migrate
hook can ensure the group without reaching into the engine that settles decisions.
"""

from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType

from conversations.models import Approval, Run

DECIDE_PERMISSION = "conversations.decide_approval"
APPROVERS_GROUP = "Approvers"
OPERATORS_GROUP = "Operators"


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


def operators_group_ensure() -> Group:
    """The group for on-call operators: the monitoring pages and their JSON (view_run), cancel,
    requeue and retry (operate_run), and the try-it page (add_run). Being staff grants none of
    these: an operator is made by adding them here (or by granting the permissions one by one)."""
    content_type = ContentType.objects.get_for_model(Run)
    group, _ = Group.objects.get_or_create(name=OPERATORS_GROUP)
    for codename, name in [
        ("view_run", "Can view run"),
        ("operate_run", "Can cancel, requeue and retry runs"),
        ("add_run", "Can add run"),
    ]:
        permission, _ = Permission.objects.get_or_create(
            content_type=content_type, codename=codename, defaults={"name": name}
        )
        group.permissions.add(permission)
    return group
