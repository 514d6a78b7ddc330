"""API tokens: created with a random secret, stored as a SHA-256 hash, looked up by hash."""

import hashlib
import secrets

from django.utils import timezone

from conversations.models import ApiToken

TOKEN_PREFIX = "agt_"


def token_hash(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()


def api_token_create(*, user, name: str) -> tuple[ApiToken, str]:
    plaintext = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(user=user, name=name, prefix=plaintext[:12], key_hash=token_hash(plaintext))
    return token, plaintext


def api_token_authenticate(*, plaintext: str) -> ApiToken | None:
    # get(), not first(): the hash is unique, and first() would order by id, which costs more
    # to compile than the rest of this query and is read on every API request.
    try:
        token = ApiToken.objects.select_related("user").get(key_hash=token_hash(plaintext), is_active=True)
    except ApiToken.DoesNotExist:
        return None
    if not token.user.is_active:
        return None
    # At most one write a minute per token: last-used is for operators, not for every request.
    now = timezone.now()
    if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token
