"""API tokens: created with a random secret, stored as a SHA-256 hash, looked up by hash."""

import hashlib
import secrets

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import connection
from django.utils import timezone
from django.utils.translation import gettext as _

from conversations.models import ApiToken
from platform_site.rows import Columns
from workspaces.access import Binding
from workspaces.models import Membership, Workspace
from workspaces.roles import Role, role_permissions, scope_permissions, validate_scopes

TOKEN_PREFIX = "agt_"


def token_hash(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()


class TokenGrantRefused(Exception):
    """Why this token may not be minted (said to the person asking)."""


def api_token_grant_check(*, creator, user, workspace: Workspace, role: str = "", scopes=()) -> None:
    """Raises TokenGrantRefused unless `creator` may mint a token of `user` acting in `workspace`
    with `role` and `scopes`: the creator is a member there (a superuser always may), and its owner
    to mint one for another user; the token's user is a member too (else it opens nothing)."""
    if role and (role == Role.CUSTOM or role not in Role.values):
        choices = ", ".join(r for r in Role.values if r != Role.CUSTOM)
        raise TokenGrantRefused(
            _("Unknown role %(role)r; choose from: %(choices)s.") % {"role": role, "choices": choices}
        )
    try:
        validate_scopes(list(scopes))
    except ValidationError as exc:
        raise TokenGrantRefused(" ".join(exc.messages)) from None
    members = dict(Membership.objects.filter(workspace=workspace).values_list("user_id", "role"))
    if not creator.is_superuser:
        if creator.pk not in members:
            raise TokenGrantRefused(_("You are not a member of this workspace."))
        if user.pk != creator.pk and members[creator.pk] != Role.OWNER:
            raise TokenGrantRefused(_("Only an owner of the workspace mints tokens for other members."))
    if user.pk not in members and not user.is_superuser:
        raise TokenGrantRefused(_("%(user)s is not a member of this workspace.") % {"user": user.get_username()})


def api_token_create(*, user, name: str, workspace=None, role: str = "", scopes=()) -> tuple[ApiToken, str]:
    """A new token of `user` acting in `workspace` (the installation's first when None)."""
    plaintext = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken(user=user, name=name, prefix=plaintext[:12], key_hash=token_hash(plaintext))
    token.role, token.scopes = role, list(scopes)
    if workspace is not None:
        token.workspace = workspace
    token.save()
    return token, plaintext


# Every API request reads its token and user: in plain SQL, since the ORM took longer to build
# the statement than the database took to answer it.
User = get_user_model()
_TOKEN = Columns(ApiToken, None, "t")
_USER = Columns(User, None, "u")
_WORKSPACE = Columns(Workspace, None, "w")


def api_token_authenticate(*, plaintext: str) -> ApiToken | None:
    """The active token with this secret, its user, its workspace and the user's role there (one
    statement), or None. A token whose user has left its workspace no longer opens anything."""
    with connection.cursor() as cursor:
        cursor.execute(
            f'SELECT {_TOKEN.sql}, {_USER.sql}, {_WORKSPACE.sql}, m."role" FROM "{ApiToken._meta.db_table}" t '
            f'JOIN "{User._meta.db_table}" u ON u."id" = t."user_id" '
            f'JOIN "{Workspace._meta.db_table}" w ON w."id" = t."workspace_id" '
            f'LEFT JOIN "{Membership._meta.db_table}" m '
            'ON m."user_id" = t."user_id" AND m."workspace_id" = t."workspace_id" '
            'WHERE t."key_hash" = %s AND t."is_active"',
            [token_hash(plaintext)],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    ends = len(_TOKEN.fields), len(_TOKEN.fields) + len(_USER.fields), -1
    token = _TOKEN.instance(row[: ends[0]])
    token.user = _USER.instance(row[ends[0] : ends[1]])
    token.workspace = _WORKSPACE.instance(row[ends[1] : ends[2]])
    member_role = row[-1]
    if not token.user.is_active or (member_role is None and not token.user.is_superuser):
        return None
    token.binding = Binding(workspace=token.workspace, role=member_role or "owner", limit=token_ceiling(token))
    # At most one write a minute per token: last-used is for operators, not for every request.
    now = timezone.now()
    if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token


def token_ceiling(token: ApiToken) -> frozenset[str] | None:
    """What a token may do at most: its role's permissions, narrowed by its scopes (None: its
    owner's own)."""
    ceiling = role_permissions(token.role) if token.role else None
    if token.scopes:
        scoped = scope_permissions(token.scopes)
        ceiling = scoped if ceiling is None else ceiling & scoped
    return ceiling
