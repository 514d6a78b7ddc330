"""Encryption at rest for secrets (API keys, tool credentials).

MultiFernet encrypts with the first key and decrypts with any, so keys can be rotated by
prepending a new one to AGENTRY_ENCRYPTION_KEYS and re-saving rows at leisure.
"""

import base64
import hashlib
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core import checks
from django.db import models


class SecretDecryptionError(Exception):
    pass


@lru_cache(maxsize=1)
def _fernet() -> MultiFernet:
    keys = list(settings.AGENTRY_ENCRYPTION_KEYS)
    if not keys:
        digest = hashlib.sha256(("agentry-secrets:" + settings.SECRET_KEY).encode()).digest()
        keys = [base64.urlsafe_b64encode(digest).decode()]
    return MultiFernet([Fernet(key) for key in keys])


@checks.register(checks.Tags.security, deploy=True)
def check_encryption_keys(app_configs, **kwargs) -> list[checks.CheckMessage]:
    """A deployment keeps its own keys: one derived from SECRET_KEY would make every stored
    secret unreadable when SECRET_KEY is rotated, and readable to anyone who learns it."""
    if not settings.AGENTRY_ENCRYPTION_KEYS:
        return [
            checks.Error(
                "AGENTRY_ENCRYPTION_KEYS is not set: secrets would be encrypted with a key derived from SECRET_KEY.",
                hint="Generate one with: python -c "
                "'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'",
                id="agentry.E001",
            )
        ]
    errors = []
    for position, key in enumerate(settings.AGENTRY_ENCRYPTION_KEYS, start=1):
        try:
            Fernet(key)
        except ValueError:
            errors.append(
                checks.Error(
                    f"AGENTRY_ENCRYPTION_KEYS: key {position} is not a Fernet key (32 url-safe base64-encoded bytes).",
                    id="agentry.E002",
                )
            )
    return errors


def encrypt(plaintext: str) -> str:
    return _fernet().encrypt(plaintext.encode()).decode()


def decrypt(token: str) -> str:
    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken as exc:
        raise SecretDecryptionError("secret cannot be decrypted with the configured keys") from exc


def mask(plaintext: str) -> str:
    """What an operator may see of a secret: that it is set, and its last characters."""
    if not plaintext:
        return ""
    return "•" * 8 + plaintext[-4:] if len(plaintext) > 8 else "•" * 8


class EncryptedTextField(models.TextField):
    """Stores ciphertext; Python code sees plaintext. Empty stays empty (no secret set)."""

    def from_db_value(self, value, expression, connection):
        if not value:
            return value
        return decrypt(value)

    def get_prep_value(self, value):
        value = super().get_prep_value(value)
        if not value:
            return value
        return encrypt(value)
