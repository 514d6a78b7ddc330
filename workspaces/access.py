"""The one question: may this person (or this token) do X, and see Y, in this workspace?

A request acts in one workspace: the one its API token belongs to, or the one the signed-in
person chose with the header's switcher (workspaces.middleware). That choice is a Binding held
on the user object for the request, because Django's permission checks see only the user:
every `user.has_perm(...)` in the admin, the operator pages, the approval queue, the API and the
CLI is answered by WorkspaceRoleBackend for the bound workspace, and every read that lists
objects goes through `in_workspace`. Superusers keep the installation-wide view (no workspace
chosen) and may choose one like anyone else."""

from dataclasses import dataclass

from django.contrib.auth.backends import BaseBackend, ModelBackend
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet

from workspaces.models import Membership, Workspace
from workspaces.roles import Role, role_permissions

_BINDING = "_workspace_binding"
_SESSION = "_workspace_session"
# The session key of the header switcher's choice.
SESSION_KEY = "workspace_id"


@dataclass(frozen=True)
class Binding:
    """Where a user acts now. workspace None: installation-wide for a superuser, nothing for
    anyone else. limit: a token's ceiling (its role and scopes); None = the member's own."""

    workspace: Workspace | None
    role: str | None
    limit: frozenset[str] | None = None

    @property
    def workspace_id(self) -> int | None:
        return None if self.workspace is None else self.workspace.pk


NOWHERE = Binding(workspace=None, role=None)


def workspace_bind(user, binding: Binding) -> None:
    """Make `user` act in `binding` for the rest of this request (or command)."""
    setattr(user, _BINDING, binding)
    # Django caches a user's permissions on the instance; a new binding answers anew.
    for cached in ("_perm_cache", "_user_perm_cache", "_group_perm_cache"):
        if hasattr(user, cached):
            delattr(user, cached)


def memberships_of(user) -> QuerySet[Membership]:
    return Membership.objects.filter(user_id=user.pk).select_related("workspace").order_by("workspace__name")


def binding_for(user, workspace_id: int | None) -> Binding:
    """The binding of `user` in this workspace (their membership's role), or the first workspace
    they belong to when none is asked for. A superuser who asks for none acts installation-wide;
    anyone else who is not a member of the workspace asked for acts nowhere."""
    if user is None or not user.is_authenticated:
        return NOWHERE
    if workspace_id is None and user.is_superuser:
        return NOWHERE
    members = memberships_of(user)
    if workspace_id is not None:
        members = members.filter(workspace_id=workspace_id)
    membership = members.first()
    if membership is not None:
        return Binding(workspace=membership.workspace, role=membership.role)
    if workspace_id is not None and user.is_superuser:
        workspace = Workspace.objects.filter(pk=workspace_id).first()
        return Binding(workspace=workspace, role=Role.OWNER if workspace else None)
    return NOWHERE


def session_attach(user, session):
    """Remember where a signed-in person's choice of workspace is kept (workspaces.middleware);
    it is read only when a permission or a list first asks."""
    if user.is_authenticated:
        setattr(user, _SESSION, session)
    return user


def binding_of(user) -> Binding:
    """The binding of this request's user: the switcher's choice if they still belong there,
    else their first workspace (a command, a task, a test: the first), read once and kept on
    the instance."""
    binding = getattr(user, _BINDING, None)
    if binding is not None:
        return binding
    if user is None or not user.is_authenticated:
        return NOWHERE
    session = getattr(user, _SESSION, None)
    chosen = session.get(SESSION_KEY) if session is not None else None
    binding = binding_for(user, chosen) if chosen is not None else NOWHERE
    if binding.workspace is None:
        binding = binding_for(user, None)
    setattr(user, _BINDING, binding)
    return binding


def current_workspace(user) -> Workspace | None:
    return binding_of(user).workspace


def workspace_lookup(model) -> str | None:
    """The path from a model to its workspace: its own `workspace` field, or the model's
    `workspace_path` (a run's is "agent__workspace"). None: an installation-wide model."""
    try:
        model._meta.get_field("workspace")
    except Exception:  # noqa: BLE001 - FieldDoesNotExist: fall back to the declared path
        return getattr(model, "workspace_path", None)
    return "workspace"


def in_workspace(queryset: QuerySet, user) -> QuerySet:
    """`queryset` narrowed to the workspace `user` acts in: every list, filter, dashboard,
    export and count of a workspace's objects is built on this. A superuser acting
    installation-wide sees everything; a model with no workspace path is a superuser's only."""
    binding = binding_of(user)
    if binding.workspace is None:
        return queryset if (user is not None and user.is_superuser) else queryset.none()
    if workspace_lookup(queryset.model) is None:
        return queryset if user.is_superuser else queryset.none()
    return of_workspace(queryset, binding.workspace.pk)


def of_workspace(queryset: QuerySet, workspace_id: int) -> QuerySet:
    """`queryset` narrowed to one workspace's rows, by the model's path to its workspace: what
    `in_workspace` does for a user, for work that knows its workspace but has no user (an alert
    rule's evaluation, a command given --workspace). A model with no workspace path has no rows
    of any workspace."""
    path = workspace_lookup(queryset.model)
    if path is None:
        return queryset.none()
    return queryset.filter(**{f"{path}_id": workspace_id})


def in_workspace_of(user, obj) -> bool:
    """Whether `obj` belongs to the workspace `user` acts in (always, installation-wide)."""
    binding = binding_of(user)
    if binding.workspace is None:
        return bool(user is not None and user.is_superuser)
    return obj_workspace_id(obj) == binding.workspace.pk


def obj_workspace_id(obj) -> int | None:
    path = workspace_lookup(type(obj))
    if path is None:
        return None
    *hops, last = path.split("__")
    for hop in hops:
        obj = getattr(obj, hop)
        if obj is None:
            return None
    return getattr(obj, f"{last}_id")


def may(user, perm: str) -> bool:
    """Whether `user` may do `perm` in the workspace they act in (Django's has_perm, answered by
    WorkspaceRoleBackend below and the permissions given to the person directly)."""
    return bool(user is not None and user.is_active and user.has_perm(perm))


def may_act_on_own(user, perm: str) -> bool:
    """Whether `user` may do `perm` on what is their own (talking to an agent, their end users'
    memories, deciding their runs' approvals): an account with the custom role may, as every
    account could before workspaces, and so may a superuser acting installation-wide; a role
    needs `perm` in its workspace; a token's ceiling applies either way."""
    if user is None or not user.is_active:
        return False
    binding = binding_of(user)
    if binding.limit is not None and perm not in binding.limit:
        return False
    if binding.role == Role.CUSTOM or (binding.workspace is None and user.is_superuser):
        return True
    return user.has_perm(perm)


def may_start_runs(user) -> bool:
    """Talking to an agent (new conversations and messages): `conversations.add_run` on one's own
    (owner, builder, operator; the custom role as before workspaces)."""
    return may_act_on_own(user, "conversations.add_run")


class WorkspaceRoleBackend(BaseBackend):
    """Django permissions from the member's role in the workspace the request acts in.

    Listed before ModelBackend, and exact: a member with a role holds that role's permissions
    there and no others (PermissionDenied stops Django asking the other backends), so Django
    groups and permissions given to a person apply only where their role is custom. A token's
    ceiling (its role or scopes) refuses alike, so a narrow token cannot borrow its owner's
    wider permissions."""

    def authenticate(self, request, **credentials):
        return None

    def get_user(self, user_id):
        # A session names the backend that logged it in; Django's force_login (tests) and some
        # libraries pick the first listed, which is this one.
        return ModelBackend().get_user(user_id)

    def _granted(self, user_obj) -> frozenset[str]:
        if not user_obj.is_active or user_obj.is_anonymous:
            return frozenset()
        binding = binding_of(user_obj)
        granted = role_permissions(binding.role)
        if binding.limit is not None:
            granted = granted & binding.limit
        return granted

    def _exact(self, user_obj) -> bool:
        # A role answers alone; custom (or no workspace) leaves the rest to ModelBackend.
        return binding_of(user_obj).role not in (None, Role.CUSTOM)

    def has_perm(self, user_obj, perm, obj=None):
        if user_obj.is_anonymous:
            return False
        binding = binding_of(user_obj)
        if binding.limit is not None and perm not in binding.limit:
            raise PermissionDenied
        if perm in self._granted(user_obj):
            return True
        if self._exact(user_obj):
            raise PermissionDenied
        return False

    def has_module_perms(self, user_obj, app_label):
        if any(perm.startswith(app_label + ".") for perm in self._granted(user_obj)):
            return True
        if self._exact(user_obj) or binding_of(user_obj).limit is not None:
            raise PermissionDenied
        return False

    def get_all_permissions(self, user_obj, obj=None):
        return set(self._granted(user_obj))
