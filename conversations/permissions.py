"""Who may decide approvals and who may operate runs: the permissions and the groups that carry them.

Record-level permissions on the conversations app's Approval model, so the app's post_migrate
hook can ensure the group without reaching into the engine that settles decisions.
"""

from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType

from conversations.models import Approval, Run

DECIDE_PERMISSION = "conversations.decide_approval"
# Forking runs and replaying them against a version (engine.forks, evals.replays).
FORK_PERMISSION = "conversations.fork_run"
# Forgetting end users other than one's own (memory.forget): the admin's action, and through the
# API the platform's own end users (no owner), whom no application's token speaks for.
FORGET_PERMISSION = "conversations.forget_end_user"
APPROVERS_GROUP = "Approvers"
OPERATORS_GROUP = "Operators"


def user_may_decide(user) -> bool:
    return bool(user and user.is_active and user.has_perm(DECIDE_PERMISSION))


def user_may_forget(user) -> bool:
    """Staff who may forget end users that are not their own (the admin's forget action asks the
    same: the admin is staff only)."""
    return bool(user and user.is_active and user.is_staff and user.has_perm(FORGET_PERMISSION))


def _group_ensure(*, name: str, model, permissions: list[tuple[str, str]]) -> Group:
    """The group `name` holding at least these (codename, name) permissions on `model`."""
    content_type = ContentType.objects.get_for_model(model)
    group, _ = Group.objects.get_or_create(name=name)
    for codename, label in permissions:
        permission, _ = Permission.objects.get_or_create(
            content_type=content_type, codename=codename, defaults={"name": label}
        )
        group.permissions.add(permission)
    return group


def approvers_group_ensure() -> Group:
    """The group whose members may decide approvals (and read them in the admin)."""
    return _group_ensure(
        name=APPROVERS_GROUP,
        model=Approval,
        permissions=[("decide_approval", "Can approve or reject tool calls"), ("view_approval", "Can view approval")],
    )


def operators_group_ensure() -> Group:
    """The group for on-call operators: the monitoring pages and their JSON (view_run), cancel,
    requeue and retry (operate_run), and the try-it page (add_run). Being staff grants none of
    these: an operator is made by adding them here (or by granting the permissions one by one)."""
    return _group_ensure(
        name=OPERATORS_GROUP,
        model=Run,
        permissions=[
            ("view_run", "Can view run"),
            ("operate_run", "Can cancel, requeue and retry runs"),
            ("add_run", "Can add run"),
        ],
    )
