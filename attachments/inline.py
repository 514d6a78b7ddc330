"""The body a model call sends, from the body its ledger row keeps: every attachment reference
(agents.providers.media) replaced with the attachment's bytes, as base64, a data: URL or text.

The row keeps the references (the ledger holds no user's bytes and stays small); this runs just
before the request leaves (engine.model_call), and only for a request whose messages carry parts.
All the attachments a body names are read in one query, each file once, its digest checked
(attachment_read): a provider is never sent bytes the row does not describe."""

import base64
import copy

from django.utils.translation import gettext as _

from agents.providers.media import DATA_URL_PREFIX, PREFIXES, REF_PREFIX, TEXT_PREFIX
from attachments.models import Attachment
from attachments.services import AttachmentMissing, attachment_read


class AttachmentUnavailable(Exception):
    """An attachment the request names is gone (deleted, forgotten, its bytes lost or altered)."""


# Where adapters put a reference, by wire block: (the block's key, the key inside it). Text is
# never read as a reference, whatever it says.
_PLACES = {
    "image_url": ("image_url", "url"),
    "input_audio": ("input_audio", "data"),
    "file": ("file", "file_data"),
    "image": ("source", "data"),
    "document": ("source", "data"),
}


def _blocks(body: dict):
    """Each (holder, key) of the body's messages where a reference stands."""
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for block in content:
            place = _PLACES.get(block.get("type")) if isinstance(block, dict) else None
            holder = block.get(place[0]) if place else None
            if isinstance(holder, dict) and isinstance(holder.get(place[1]), str):
                if holder[place[1]].startswith(PREFIXES):
                    yield holder, place[1]


def _attachment_id(reference: str) -> str:
    return reference.split(":", 1)[1]


def _value(reference: str, attachment: Attachment, data: bytes) -> str:
    if reference.startswith(DATA_URL_PREFIX):
        return f"data:{attachment.media_type};base64,{base64.b64encode(data).decode('ascii')}"
    if reference.startswith(TEXT_PREFIX):
        return data.decode("utf-8", errors="replace")
    assert reference.startswith(REF_PREFIX)
    return base64.b64encode(data).decode("ascii")


def inlined(body: dict, *, attachment_ids: set[str]) -> dict:
    """`body` with its references replaced by the bytes they stand for (a new body; `body` as it
    was if it names none). Only the attachments of the request's own parts (`attachment_ids`,
    checked by admission against the run's identity) are read; AttachmentUnavailable if a
    reference names another, or one is gone."""
    places = list(_blocks(body))
    if not places:
        return body
    ids = {_attachment_id(holder[key]) for holder, key in places}
    if not ids <= attachment_ids:
        raise AttachmentUnavailable(_("The request names an attachment its messages do not carry."))
    rows = {str(row.pk): row for row in Attachment.objects.filter(pk__in=ids)}
    data: dict[str, bytes] = {}
    for attachment_id in ids:
        row = rows.get(attachment_id)
        if row is None:
            raise AttachmentUnavailable(_("Attachment %(id)s is no longer available.") % {"id": attachment_id})
        try:
            data[attachment_id] = attachment_read(attachment=row)
        except AttachmentMissing as exc:
            raise AttachmentUnavailable(
                _("The bytes of attachment %(id)s are missing or altered.") % {"id": attachment_id}
            ) from exc
    sent = copy.deepcopy(body)
    for holder, key in _blocks(sent):
        attachment_id = _attachment_id(holder[key])
        holder[key] = _value(holder[key], rows[attachment_id], data[attachment_id])
    return sent
