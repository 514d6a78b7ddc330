"""Attachments leave with what used them, and with the end user they belong to.

Registered by AttachmentsConfig.ready: with the ledger's purge and daily sweep
(conversations.retention), and with forgetting an end user (memory.forget).

- A purge deletes the runs and messages that used attachments; their uses go with them (the
  purge deletes what points at its rows: conversations.retention._dependants_release). The
  daily sweep then deletes every attachment that no message uses and that is older than
  AGENTRY_ATTACHMENT_UNUSED_HOURS (an upload never sent goes the same way), bytes included.
- Forgetting an end user deletes the attachments their runs used and every attachment of their
  identity (workspace, owner, end user) in the conversations reached, bytes included.

Bytes are deleted once the rows' transaction commits (attachments.services)."""

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from attachments.models import Attachment, AttachmentUse
from attachments.services import attachments_bytes_delete
from conversations.models import Conversation
from conversations.retention import EXPIRY_BATCH_ROWS, EventRecords
from memory.forget import RunCopies


def attachments_unused_expire(*, hours: float | None = None, now=None, batch_size: int = EXPIRY_BATCH_ROWS) -> dict:
    """Delete the attachments no message uses that are older than `hours`, with their bytes."""
    hours = settings.AGENTRY_ATTACHMENT_UNUSED_HOURS if hours is None else hours
    cutoff = (now or timezone.now()) - timedelta(hours=hours)
    unused = Attachment.objects.filter(created_at__lt=cutoff).exclude(
        Exists(AttachmentUse.objects.filter(attachment=OuterRef("pk")))
    )
    deleted = 0
    while True:
        with transaction.atomic():
            rows = list(unused.select_for_update(skip_locked=True).values_list("pk", "storage_key")[:batch_size])
            if not rows:
                return {"attachments": deleted}
            deleted += (
                Attachment.objects.filter(pk__in=[pk for pk, _ in rows]).delete()[1].get(Attachment._meta.label, 0)
            )
            attachments_bytes_delete([key for _, key in rows])


def attachments_erase(*, run_ids) -> dict[str, int]:
    """Forgetting an end user: the attachments of their runs' messages and of their identity in
    the conversations reached go, bytes included."""
    used = AttachmentUse.objects.filter(run_id__in=run_ids).values("attachment_id")
    people = (
        Conversation.objects.filter(runs__in=run_ids)
        .exclude(end_user="")
        .values_list("agent__workspace_id", "owner_id", "end_user")
        .distinct()
    )
    theirs = Q(pk__in=used)
    for workspace_id, owner_id, end_user in people:
        owner = Q(owner__isnull=True) if owner_id is None else Q(owner_id=owner_id)
        theirs |= Q(workspace_id=workspace_id, end_user=end_user) & owner
    rows = list(Attachment.objects.filter(theirs).values_list("pk", "storage_key"))
    if not rows:
        return {"attachments_deleted": 0}
    Attachment.objects.filter(pk__in=[pk for pk, _ in rows]).delete()
    attachments_bytes_delete([key for _, key in rows])
    return {"attachments_deleted": len(rows)}


def _keeps_nothing(conversation: OuterRef) -> Exists:
    # An attachment keeps no conversation: its uses go with the conversation's runs.
    return Exists(AttachmentUse.objects.filter(pk__isnull=True))


RECORDS = EventRecords(
    kinds=(),
    delete=lambda **kwargs: {},
    count=lambda **kwargs: {},
    keeps=_keeps_nothing,
    expire=attachments_unused_expire,
)
# No run is made from an attachment.
COPIES = RunCopies(runs=lambda run_ids: set(), erase=attachments_erase)
