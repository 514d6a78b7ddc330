"""Writes on attachments: storing an upload, linking it to the message that sends it, deleting
it with its bytes. Every way in (the REST API, /v1, the widget, the try page, the CLI) stores
through attachment_store and links through attachments_use, so the limits and the sniffing
(attachments.sniff) are checked in one place."""

import hashlib
import uuid
from collections.abc import Sequence

from django.conf import settings
from django.core.files.base import ContentFile, File
from django.db import IntegrityError, transaction
from django.utils.translation import gettext as _

from attachments.limits import quota_check, size_check
from attachments.models import Attachment, AttachmentUse
from attachments.selectors import attachment_identical
from attachments.sniff import AttachmentRefused, name_clean, sniff
from attachments.storage import attachment_storage
from conversations.models import Run
from workspaces.models import Workspace

READ_CHUNK = 1024 * 1024


class AttachmentMissing(Exception):
    """The row is there but its bytes are not, or they are not the bytes stored."""


def _read_limited(data: bytes | File) -> bytes:
    """The upload's bytes, reading at most one past the size limit: a larger upload is refused
    without being held whole."""
    limit = settings.AGENTRY_ATTACHMENT_MAX_BYTES
    if isinstance(data, bytes | bytearray | memoryview):
        raw = bytes(data)
    else:
        size = getattr(data, "size", None)
        if size is not None:
            size_check(size)
        data.seek(0)
        parts, total = [], 0
        while total <= limit and (chunk := data.read(min(READ_CHUNK, limit + 1 - total))):
            parts.append(chunk)
            total += len(chunk)
        raw = b"".join(parts)
    size_check(len(raw))
    return raw


def attachment_store(
    *, workspace: Workspace, uploaded_by, owner, end_user: str = "", data: bytes | File, name: str = ""
) -> Attachment:
    """Store an upload for (workspace, owner, end user) and return its row, or AttachmentRefused.

    The size is checked before the bytes are read whole, the type sniffed from the bytes (an
    image decoded under the pixel limit and re-encoded without its metadata), the name cleaned.
    Bytes identical to an attachment the same identity already has are not stored again: that
    one is returned (and a concurrent upload of the same bytes finds the other's row through the
    unique constraint). The workspace's quota is checked under its row's lock, so two uploads
    cannot both pass it."""
    raw = _read_limited(data)
    clean_name = name_clean(name)
    sniffed = sniff(raw, clean_name, max_pixels=settings.AGENTRY_ATTACHMENT_MAX_PIXELS)
    size_check(len(sniffed.data))
    digest = hashlib.sha256(sniffed.data).hexdigest()
    identity = {"workspace_id": workspace.pk, "owner_id": getattr(owner, "pk", owner), "end_user": end_user}
    existing = attachment_identical(sha256=digest, **identity)
    if existing is not None:
        return existing
    quota_check(workspace, len(sniffed.data))
    attachment_id = uuid.uuid4()
    storage = attachment_storage()
    # Written before the row, so no row ever names missing bytes; removed again if the row is
    # not written.
    key = storage.save(f"{workspace.pk}/{attachment_id.hex[:2]}/{attachment_id.hex}", ContentFile(sniffed.data))
    try:
        with transaction.atomic():
            Workspace.objects.select_for_update().filter(pk=workspace.pk).values_list("pk", flat=True).get()
            quota_check(workspace, len(sniffed.data))
            return Attachment.objects.create(
                id=attachment_id,
                kind=sniffed.kind,
                media_type=sniffed.media_type,
                size=len(sniffed.data),
                sha256=digest,
                width=sniffed.width,
                height=sniffed.height,
                duration_ms=sniffed.duration_ms,
                name=clean_name,
                storage_key=key,
                uploaded_by=uploaded_by,
                **identity,
            )
    except IntegrityError:
        storage.delete(key)
        # The same bytes, stored by a concurrent upload of the same identity in the meantime.
        existing = attachment_identical(sha256=digest, **identity)
        if existing is None:
            raise
        return existing
    except BaseException:
        storage.delete(key)
        raise


def attachment_open(*, attachment: Attachment) -> File:
    """The stored bytes as a file to stream (a download), opened for reading."""
    try:
        return attachment_storage().open(attachment.storage_key, "rb")
    except (FileNotFoundError, OSError) as exc:
        raise AttachmentMissing(str(attachment.pk)) from exc


def attachment_read(*, attachment: Attachment) -> bytes:
    """The stored bytes for a model call, checked against the digest recorded: a provider is never
    sent bytes the row does not describe."""
    with attachment_open(attachment=attachment) as handle:
        data = handle.read()
    if hashlib.sha256(data).hexdigest() != attachment.sha256:
        raise AttachmentMissing(str(attachment.pk))
    return data


def attachments_bytes_delete(keys: Sequence[str]) -> None:
    """Delete these bytes once the transaction that deleted their rows commits: a rollback
    keeps both."""
    keys = list(keys)
    if not keys:
        return

    def delete():
        storage = attachment_storage()
        for key in keys:
            storage.delete(key)

    transaction.on_commit(delete)


def attachment_delete(*, attachment: Attachment) -> None:
    """Delete the attachment, its uses and (after commit) its bytes."""
    with transaction.atomic():
        Attachment.objects.filter(pk=attachment.pk).delete()
        attachments_bytes_delete([attachment.storage_key])


def attachment_uses(*, run: Run, workspace_id: int, owner_id: int | None, end_user: str, attachments) -> list:
    """The rows recording that `run` sends these attachments, in this order, unsaved: the caller
    writes them with the run (engine.admission). Refused for an attachment that is not of the
    run's workspace, owner and end user: a reference never reaches someone else's. (Each way in
    checks a message's count with limits.per_message_check before it reads the parts.)"""
    for attachment in attachments:
        if (attachment.workspace_id, attachment.owner_id, attachment.end_user) != (workspace_id, owner_id, end_user):
            raise AttachmentRefused("identity", _("Attachment %(id)s is not found.") % {"id": attachment.pk})
    return [
        AttachmentUse(attachment=attachment, run=run, position=position)
        for position, attachment in enumerate(attachments)
    ]
