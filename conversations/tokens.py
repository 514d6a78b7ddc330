"""API tokens: created with a random secret, stored as a SHA-256 hash, looked up by hash."""

import hashlib
import secrets

from django.contrib.auth import get_user_model
from django.db import connection
from django.utils import timezone

from conversations.models import ApiToken
from platform_site.rows import Columns
from workspaces.access import Binding
from workspaces.models import Membership, Workspace
from workspaces.roles import role_permissions, scope_permissions

TOKEN_PREFIX = "agt_"


def token_hash(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()


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
