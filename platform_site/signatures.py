"""Agentry's request signature, one recipe for both directions: outgoing webhooks sign with it
(notifications.sending) and inbound hooks check it (triggers.hooks).

`X-Agentry-Signature: sha256=<hex>`, an HMAC-SHA256 with the secret over
`<X-Agentry-Timestamp>.<raw body>`.
"""

import hashlib
import hmac
import secrets


def webhook_secret_generate() -> str:
    return "whsec_" + secrets.token_urlsafe(32)


def webhook_signature(*, secret: str, timestamp: str, body: bytes) -> str:
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()
