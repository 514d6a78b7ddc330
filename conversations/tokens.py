"""API tokens: created with a random secret, stored as a SHA-256 hash, looked up by hash."""

import hashlib
import secrets

from django.contrib.auth import get_user_model
from django.db import connection
from django.utils import timezone

from conversations.models import ApiToken
from platform_site.rows import Columns

TOKEN_PREFIX = "agt_"


def token_hash(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()


def api_token_create(*, user, name: str) -> tuple[ApiToken, str]:
    plaintext = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(user=user, name=name, prefix=plaintext[:12], key_hash=token_hash(plaintext))
    return token, plaintext


# Every API request reads its token and user: in plain SQL, since the ORM took longer to build
# the statement than the database took to answer it.
User = get_user_model()
_TOKEN = Columns(ApiToken, None, "t")
_USER = Columns(User, None, "u")


def api_token_authenticate(*, plaintext: str) -> ApiToken | None:
    with connection.cursor() as cursor:
        cursor.execute(
            f'SELECT {_TOKEN.sql}, {_USER.sql} FROM "{ApiToken._meta.db_table}" t '
            f'JOIN "{User._meta.db_table}" u ON u."id" = t."user_id" '
            'WHERE t."key_hash" = %s AND t."is_active"',
            [token_hash(plaintext)],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    token = _TOKEN.instance(row[: len(_TOKEN.fields)])
    token.user = _USER.instance(row[len(_TOKEN.fields) :])
    if not token.user.is_active:
        return None
    # At most one write a minute per token: last-used is for operators, not for every request.
    now = timezone.now()
    if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token
