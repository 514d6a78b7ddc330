"""Inbound hooks: a signed request to an agent's hook starts one run per delivery id.

The signature is the one Agentry's outgoing webhooks send (platform_site.signatures), so one
recipe signs and checks both directions: `X-Agentry-Signature: sha256=<hex>`, an HMAC-SHA256
with the hook's secret over `<X-Agentry-Timestamp>.<raw body>`, the timestamp in whole seconds
since the epoch, refused when more than AGENTRY_HOOK_TOLERANCE_SECONDS from now. The delivery id
(`X-Agentry-Delivery`) is unique per hook in the database (HookDelivery), so a retried delivery
cannot start a second run. The delivery id is not under the signature (the outgoing scheme does
not sign it): the timestamp's tolerance is what bounds a captured request's replay under a new id.
"""

import hmac
import logging
import re
from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils.translation import gettext as _

from agents.prompting import prompt_text_render
from conversations.end_users import EndUserInvalid, end_user_clean
from conversations.models import Run, RunTrigger
from engine.admission import conversation_start
from memory.channels import channel_metadata
from platform_site.crypto import SecretDecryptionError
from platform_site.signatures import webhook_secret_generate, webhook_signature
from triggers.models import Hook, HookDelivery

log = logging.getLogger(__name__)

TIMESTAMP_HEADER = "X-Agentry-Timestamp"
SIGNATURE_HEADER = "X-Agentry-Signature"
DELIVERY_HEADER = "X-Agentry-Delivery"
DELIVERY_ID_MAX_CHARS = HookDelivery._meta.get_field("delivery_id").max_length
# ASCII digits only: str.isdigit() also takes other scripts' digits, which int() reads too.
_TIMESTAMP = re.compile(r"[0-9]{1,12}")


@dataclass(frozen=True)
class HookRefusal:
    """Why a request to a hook is not taken as signed by its secret."""

    MISSING_HEADERS = "missing_headers"
    BAD_TIMESTAMP = "bad_timestamp"
    STALE = "stale"
    BAD_SIGNATURE = "bad_signature"

    reason: str
    message: str


class HookPayloadRefused(ValueError):
    """The payload or delivery id cannot start a run; the message says why (a 400)."""


class HookDeliveryReplayed(Exception):
    """The delivery id was already used at this hook; `run_id` is the run it started."""

    def __init__(self, delivery: HookDelivery):
        super().__init__(f"delivery {delivery.delivery_id!r} already received")
        self.delivery = delivery


class HookSecretUnreadable(Exception):
    """The hook's secret cannot be decrypted with the configured keys (AGENTRY_ENCRYPTION_KEYS
    or SECRET_KEY changed since it was written): no request can be checked until it is rotated."""


def hook_usable(*, hook_id) -> Hook | None:
    """The hook if it takes deliveries: enabled, with an active agent; else None (one 404 for
    all). HookSecretUnreadable, logged as an error naming the hook, when its secret cannot be
    decrypted: the sender gets an answer saying so, the operator a line to act on."""
    usable = Hook.objects.select_related("agent__workspace", "owner").filter(
        pk=hook_id, enabled=True, agent__is_active=True
    )
    try:
        return usable.first()
    except SecretDecryptionError:
        log.error(
            "Hook %s refuses every request: its secret cannot be decrypted with the configured keys "
            "(AGENTRY_ENCRYPTION_KEYS). Rotate its secret in the admin and give the new one to its sender.",
            hook_id,
        )
        raise HookSecretUnreadable from None


def hook_signature(*, secret: str, timestamp: str, body: bytes) -> str:
    return webhook_signature(secret=secret, timestamp=timestamp, body=body)


def hook_secret_new() -> str:
    return webhook_secret_generate()


def hook_secret_rotate(*, hook: Hook) -> str:
    """A new secret for the hook, in force at once: requests signed with the old one are refused."""
    hook.secret = hook_secret_new()
    hook.save(update_fields=["secret"])
    return hook.secret


def hook_verify(*, hook: Hook, headers, body: bytes, now: float) -> HookRefusal | None:
    """None when the request is signed by the hook's secret within the tolerance; else why not.
    `headers` is a case-insensitive mapping (Django's request.headers)."""
    timestamp, signature = headers.get(TIMESTAMP_HEADER), headers.get(SIGNATURE_HEADER)
    missing = [name for name, value in ((TIMESTAMP_HEADER, timestamp), (SIGNATURE_HEADER, signature)) if not value]
    if missing:
        return HookRefusal(
            HookRefusal.MISSING_HEADERS,
            _("The request is not signed: it lacks %(headers)s.") % {"headers": ", ".join(missing)},
        )
    if not _TIMESTAMP.fullmatch(timestamp):
        return HookRefusal(
            HookRefusal.BAD_TIMESTAMP,
            _("%(header)s must be the signing time in whole seconds since the Unix epoch.")
            % {"header": TIMESTAMP_HEADER},
        )
    tolerance = settings.AGENTRY_HOOK_TOLERANCE_SECONDS
    if abs(now - int(timestamp)) > tolerance:
        return HookRefusal(
            HookRefusal.STALE,
            _(
                "%(header)s is %(seconds)s seconds away from this server's clock; at most %(limit)s are allowed. "
                "Sign each attempt with the current time."
            )
            % {"header": TIMESTAMP_HEADER, "seconds": int(abs(now - int(timestamp))), "limit": tolerance},
        )
    expected = hook_signature(secret=hook.secret, timestamp=timestamp, body=body)
    # Bytes on both sides: compare_digest refuses str holding non-ASCII, which a header may.
    if not hmac.compare_digest(expected.encode(), signature.encode("utf-8", "replace")):
        return HookRefusal(
            HookRefusal.BAD_SIGNATURE,
            _(
                "%(header)s does not match: it must be sha256= and the hex HMAC-SHA256, with the hook's secret, "
                "of the timestamp, a dot and the raw body."
            )
            % {"header": SIGNATURE_HEADER},
        )
    return None


def hook_delivery_id_clean(value: str | None) -> str:
    """The sender's delivery id, taken exactly as sent (it is what a retry is matched by)."""
    if not value:
        raise HookPayloadRefused(_("The %(header)s header is required.") % {"header": DELIVERY_HEADER})
    if len(value) > DELIVERY_ID_MAX_CHARS:
        raise HookPayloadRefused(
            _("%(header)s must be at most %(count)s characters.")
            % {"header": DELIVERY_HEADER, "count": DELIVERY_ID_MAX_CHARS}
        )
    if not value.isprintable():
        raise HookPayloadRefused(
            _("%(header)s must hold only printable characters, no control characters.") % {"header": DELIVERY_HEADER}
        )
    return value


def _render(template: str, payload: dict) -> str:
    return prompt_text_render(template, {"payload": payload})


def hook_templates_check(*, message: str, end_user: str) -> None:
    """ValidationError (per field) if a template cannot compile. Rendered over an empty payload
    too, so an unknown tag or a filter that raises on nothing is refused when saved; a reference
    to a payload key only renders empty, which is what a payload without it gets."""
    errors = {}
    for field, template in (("message", message), ("end_user", end_user)):
        try:
            _render(template, {})
        except Exception as exc:  # noqa: BLE001 - whatever a template raises, every delivery would raise it too
            errors[field] = ValidationError(
                _("The template cannot be rendered: %(error)s"),
                code="invalid_template",
                params={"error": str(exc) or type(exc).__name__},
            )
    if errors:
        raise ValidationError(errors)


def _render_for(template: str, payload: dict, what: str) -> str:
    try:
        return _render(template, payload)
    except Exception as exc:  # noqa: BLE001 - a filter may raise on this payload's values
        raise HookPayloadRefused(
            _("The hook's %(what)s template fails on this payload: %(error)s")
            % {"what": what, "error": str(exc) or type(exc).__name__}
        ) from None


def hook_message(*, hook: Hook, payload: dict) -> str:
    """The user message the hook's template makes of the payload (`payload` in the template)."""
    content = _render_for(hook.message, payload, _("message"))
    limit = settings.AGENTRY_MESSAGE_MAX_CHARS
    if len(content) > limit:
        raise HookPayloadRefused(
            _("The message made from this payload is %(size)s characters; at most %(limit)s are allowed.")
            % {"size": len(content), "limit": limit}
        )
    if not content.strip():
        raise HookPayloadRefused(_("The message made from this payload is empty."))
    if "\x00" in content:
        raise HookPayloadRefused(_("The message made from this payload contains the NUL character (U+0000)."))
    return content


def hook_end_user(*, hook: Hook, payload: dict) -> str:
    """The end user the run serves: the hook's end user template over the payload, checked as
    an application's end user id is (empty: none)."""
    try:
        return end_user_clean(_render_for(hook.end_user, payload, _("end user")))
    except EndUserInvalid as exc:
        message = _("The end user made from this payload is refused: %(error)s") % {"error": exc}
        raise HookPayloadRefused(message) from None


def hook_deliver(*, hook: Hook, delivery_id: str, signature: str, content: str, end_user: str) -> Run:
    """The run a delivery starts with `content` (hook_message) for `end_user` (hook_end_user),
    in a new conversation of the hook's agent owned by the hook's owner; handed to a worker
    after commit (engine.admission). HookDeliveryReplayed when the delivery id, or the signed
    request itself (`signature`, under another delivery id), was received before; AdmissionRefused
    (nothing recorded: the delivery may be sent again) when the agent's limits per end user refuse it;
    AgentOutsideWorkspace (nothing recorded) when the hook's agent is another workspace's.

    The delivery's row is written first: a second request with the id or the signature (at the
    same time, or later) fails on a unique constraint before it creates anything, and its
    savepoint rolls back only its own writes, never a caller's."""
    try:
        with transaction.atomic():
            delivery = HookDelivery.objects.create(hook=hook, delivery_id=delivery_id, signature=signature)
            # conversation_start is message_submit's path for a conversation nobody else sees yet.
            run = conversation_start(
                agent=hook.agent,
                user=hook.owner,
                content=content,
                title=hook.name,
                end_user=end_user,
                # Its end user is the hook's, not the owner's (memory.channels).
                metadata=channel_metadata(hook_id=hook.pk, shared=hook.memory_shared),
                trigger=RunTrigger.HOOK,
                workspace_id=hook.workspace_id,
            )
            HookDelivery.objects.filter(pk=delivery.pk).update(run=run)
    except IntegrityError:
        earlier = HookDelivery.objects.filter(Q(delivery_id=delivery_id) | Q(signature=signature), hook=hook).first()
        if earlier is None:
            raise  # neither the delivery id nor the request: a fault of its own
        raise HookDeliveryReplayed(earlier) from None
    return run
