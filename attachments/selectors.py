"""Reads on attachments, and the one rule of who may read one.

An attachment is read as the conversations of its identity are (conversations.selectors): in
the workspace the reader acts in, the owner's own, and every one of the workspace to staff who
may read every conversation. A reader acting for one end user (the widget's end-user token)
reads only that end user's. Every way in (the API's download, the console's, the ways that take
a reference to an uploaded attachment) asks attachments_visible_to; anything else is a 404."""

from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.utils.translation import gettext as _

from attachments.limits import per_message_check
from attachments.models import Attachment
from attachments.sniff import AttachmentRefused
from conversations.selectors import sees_everyones_conversations
from workspaces.access import in_workspace


def attachments_visible_to(*, user, end_user: str | None = None) -> QuerySet[Attachment]:
    """The attachments `user` may read: see the module's docstring. `end_user`: only that end
    user's of the user's own (the widget); None: any the user may read."""
    attachments = in_workspace(Attachment.objects.all(), user)
    if end_user is not None:
        return attachments.filter(owner=user, end_user=end_user)
    return attachments if sees_everyones_conversations(user=user) else attachments.filter(owner=user)


def attachment_for(*, user, attachment_id, end_user: str | None = None) -> Attachment | None:
    """The attachment of this id if `user` may read it (attachments_visible_to), else None (a 404:
    another workspace's, another owner's or another end user's is not found, as a missing one)."""
    try:
        pk = Attachment._meta.pk.to_python(attachment_id)
    except ValidationError:
        return None
    return attachments_visible_to(user=user, end_user=end_user).filter(pk=pk).first()


def attachment_identical(*, workspace_id: int, owner_id: int | None, end_user: str, sha256: str) -> Attachment | None:
    """The attachment of these bytes this identity already has, if any."""
    owner = {"owner__isnull": True} if owner_id is None else {"owner_id": owner_id}
    return Attachment.objects.filter(workspace_id=workspace_id, end_user=end_user, sha256=sha256, **owner).first()


def attachments_named(*, user, attachment_ids, end_user: str | None = None) -> list[Attachment]:
    """The attachments a message names by id, in its order, each one `user` may read
    (attachments_visible_to, for `end_user` when given): AttachmentRefused("count") past the
    per-message limit before anything is read, AttachmentRefused("missing") naming the first id
    that is not found (another workspace's, owner's or end user's is not found either)."""
    ids = list(attachment_ids)
    per_message_check(len(ids))
    found = {}
    pks = []
    for attachment_id in ids:
        try:
            pks.append(Attachment._meta.pk.to_python(attachment_id))
        except ValidationError:
            pks.append(None)
    if any(pk is not None for pk in pks):
        found = {a.pk: a for a in attachments_visible_to(user=user, end_user=end_user).filter(pk__in=set(pks) - {None})}
    named = []
    for attachment_id, pk in zip(ids, pks, strict=True):
        if pk not in found:
            raise AttachmentRefused("missing", _("Attachment %(id)s is not found.") % {"id": attachment_id})
        named.append(found[pk])
    return named
