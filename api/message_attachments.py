"""A message's attachments on the REST API.

A message names them in `attachments`: in JSON, the ids POST /api/v1/attachments/ answered; in
multipart form data, files as well (each stored as the conversation's owner and end user, through
attachments.services.attachment_store, then sent). An id is looked up with the one visibility
rule (attachments.selectors.attachment_for, narrowed to the conversation's end user): another
owner's, end user's or workspace's attachment is "not found", as a missing one, never revealed.
The count is checked (attachments.limits.per_message_check) before anything is read.

In answers, a message (and a run's input) lists its attachments as its `parts` describe them
(attachments.parts) with the `url` to download each."""

from django.core.files.uploadedfile import UploadedFile
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from attachments.limits import per_message_check
from attachments.models import Attachment, AttachmentKind
from attachments.selectors import attachment_for
from attachments.services import attachment_store
from attachments.sniff import AttachmentRefused
from conversations.models import Conversation
from platform_site.api_errors import RequestTooLarge

FIELD = "attachments"
ID_MAX_CHARS = 64


class AttachmentPartSerializer(serializers.Serializer):
    """One attachment of a message, as its parts describe it, and where to download it."""

    type = serializers.ChoiceField(choices=AttachmentKind.choices)
    attachment = serializers.UUIDField(help_text="Its id (GET /api/v1/attachments/{id}/).")
    media_type = serializers.CharField(help_text="Read from its bytes.")
    name = serializers.CharField()
    size = serializers.IntegerField(help_text="In bytes.")
    width = serializers.IntegerField(required=False, help_text="An image's, in pixels.")
    height = serializers.IntegerField(required=False, help_text="An image's, in pixels.")
    duration_ms = serializers.IntegerField(required=False, help_text="An audio clip's, where known.")
    url = serializers.URLField(help_text="Its bytes, as a download (GET /api/v1/attachments/{id}/content/).")


def parts_out(parts: list[dict] | None, request) -> list[dict]:
    """A message's parts as answers show them: each with its download URL."""
    return [
        {
            **part,
            "url": request.build_absolute_uri(
                reverse("attachment-content", kwargs={"attachment_id": part["attachment"]})
            ),
        }
        for part in parts or ()
    ]


class _AttachmentItem(serializers.Field):
    default_error_messages = {
        "invalid": gettext_lazy(
            "Each item must be the id of an uploaded attachment (POST /api/v1/attachments/) or, in form data, a file."
        )
    }

    def to_internal_value(self, data):
        if isinstance(data, UploadedFile) or (isinstance(data, str) and 0 < len(data) <= ID_MAX_CHARS):
            return data
        self.fail("invalid")

    def to_representation(self, value):
        return value


@extend_schema_field(serializers.ListField(child=serializers.UUIDField()))
class AttachmentsField(serializers.ListField):
    """Ids of uploaded attachments, or (multipart form data) files, in the order they are sent."""

    child = _AttachmentItem()

    def to_internal_value(self, data):
        if isinstance(data, list | tuple):
            try:
                per_message_check(len(data))
            except AttachmentRefused as exc:
                raise serializers.ValidationError(str(exc), code=exc.code) from None
        return super().to_internal_value(data)


def _refused(exc: AttachmentRefused, name: str) -> Exception:
    if exc.code == "size":
        return RequestTooLarge(f"{name}: {exc}" if name else str(exc))
    message = f"{name}: {exc}" if name else str(exc)
    return serializers.ValidationError({FIELD: [message]}, code=exc.code)


def message_attachments(*, user, conversation: Conversation, items) -> list[Attachment]:
    """The attachments a message names (ids) or carries (files), in order; a 400 naming the
    first id not found or the first file refused (413 for one too large). Ids are resolved
    first, so no file is stored for a message an id would refuse."""
    found: dict[int, Attachment] = {}
    for index, item in enumerate(items):
        if isinstance(item, str):
            attachment = attachment_for(user=user, attachment_id=item, end_user=conversation.end_user)
            if attachment is None:
                raise serializers.ValidationError(
                    {
                        FIELD: [
                            _(
                                "There is no attachment %(id)s for this conversation's end user; upload it first "
                                "(POST /api/v1/attachments/ with the same end_user)."
                            )
                            % {"id": item}
                        ]
                    },
                    code="not_found",
                )
            found[index] = attachment
    for index, item in enumerate(items):
        if isinstance(item, str):
            continue
        try:
            found[index] = attachment_store(
                workspace=conversation.agent.workspace,
                uploaded_by=user,
                owner=conversation.owner_id,
                end_user=conversation.end_user,
                data=item,
                name=item.name or "",
            )
        except AttachmentRefused as exc:
            raise _refused(exc, item.name or "") from None
    return [found[index] for index in range(len(items))]
