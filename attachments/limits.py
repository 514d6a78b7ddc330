"""The limits on attachments (settings, with defaults in platform_site/settings.py): a file's
size, an image's pixels, a message's count and a workspace's total."""

from django.conf import settings
from django.db.models import Sum
from django.utils.translation import gettext as _

from attachments.models import Attachment
from attachments.sniff import AttachmentRefused
from workspaces.models import Workspace


def size_check(size: int) -> None:
    limit = settings.AGENTRY_ATTACHMENT_MAX_BYTES
    if size > limit:
        raise AttachmentRefused(
            "size", _("The file has %(size)s bytes; at most %(limit)s are accepted.") % {"size": size, "limit": limit}
        )


def per_message_check(count: int) -> None:
    """A message carries at most AGENTRY_ATTACHMENTS_PER_MESSAGE attachments: every way in checks
    its parts' count with this before reading them."""
    limit = settings.AGENTRY_ATTACHMENTS_PER_MESSAGE
    if count > limit:
        raise AttachmentRefused(
            "count",
            _("A message may carry at most %(limit)s attachments; this one has %(count)s.")
            % {"limit": limit, "count": count},
        )


def workspace_quota(workspace: Workspace) -> int:
    """The bytes a workspace may keep in attachments: its own limit, else the installation's."""
    own = workspace.attachment_bytes_limit
    return own if own is not None else settings.AGENTRY_ATTACHMENT_WORKSPACE_BYTES


def workspace_used(workspace_id: int) -> int:
    return Attachment.objects.filter(workspace_id=workspace_id).aggregate(total=Sum("size"))["total"] or 0


def quota_check(workspace: Workspace, size: int) -> None:
    quota = workspace_quota(workspace)
    if workspace_used(workspace.pk) + size > quota:
        raise AttachmentRefused(
            "quota",
            _("The workspace's attachments would pass its quota of %(limit)s bytes; delete some first.")
            % {"limit": quota},
        )
