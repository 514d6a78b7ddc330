"""Attachments: the images, files and audio clips sent with messages.

A row describes bytes kept in the "attachments" storage (settings.STORAGES): what they are, as
sniffed from the bytes themselves (attachments.sniff), their size and SHA-256, an image's
dimensions and an audio clip's duration, and whose they are. An attachment belongs to a
workspace and to the same identity a conversation has, its owner (the token's user, None for the
platform's own) and end user, so that an end user's files are theirs only and are forgotten with
them. The bytes of identical uploads by the same identity are stored once (the digest is unique
per workspace, owner and end user). AttachmentUse records which run sent it to a model; the
message that carries it describes it in its own `parts` (attachments.parts)."""

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from workspaces.defaults import InWorkspace


class AttachmentKind(models.TextChoices):
    IMAGE = "image", _("image")
    FILE = "file", _("file")
    AUDIO = "audio", _("audio")


class Attachment(InWorkspace):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    kind = models.CharField(_("kind"), max_length=10, choices=AttachmentKind.choices)
    # Sniffed from the bytes, never the client's Content-Type nor the name's extension.
    media_type = models.CharField(_("media type"), max_length=100)
    size = models.PositiveBigIntegerField(_("size in bytes"))
    # Of the bytes stored (for an image, its re-encoded copy without metadata).
    sha256 = models.CharField(_("SHA-256"), max_length=64)
    width = models.PositiveIntegerField(_("width"), null=True, blank=True)
    height = models.PositiveIntegerField(_("height"), null=True, blank=True)
    duration_ms = models.PositiveIntegerField(_("duration (ms)"), null=True, blank=True)
    name = models.CharField(_("file name"), max_length=200, blank=True, default="")
    # The storage's name for the bytes: one per row, so deleting one identity's copy never
    # touches another's.
    storage_key = models.CharField(_("storage key"), max_length=300, unique=True, editable=False)
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("uploaded by"),
    )
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="attachments",
        verbose_name=_("owner"),
    )
    end_user = models.CharField(_("end user"), max_length=200, blank=True, default="")
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("attachment")
        verbose_name_plural = _("attachments")
        ordering = ["-created_at"]
        constraints = [
            # Two partial constraints rather than one: NULL owners are distinct in a plain
            # unique constraint, and the platform's own end users have none.
            models.UniqueConstraint(
                fields=["workspace", "owner", "end_user", "sha256"],
                condition=Q(owner__isnull=False),
                name="attachment_digest_owner_uniq",
            ),
            models.UniqueConstraint(
                fields=["workspace", "end_user", "sha256"],
                condition=Q(owner__isnull=True),
                name="attachment_digest_platform_uniq",
            ),
        ]
        indexes = [
            # The workspace's quota sums its sizes; the unused sweep reads by age.
            models.Index(fields=["workspace", "created_at"], name="attachment_ws_created_idx"),
            models.Index(fields=["owner", "end_user"], name="attachment_owner_end_user_idx"),
        ]

    def __str__(self):
        return self.name or str(self.pk)


class AttachmentUse(models.Model):
    """An attachment sent by a run, at its place among the parts the run's messages carry (its
    user message's, and for a chat completion the earlier messages it was posted with). Cascades
    with the run: the ledger's purge deletes rows pointing at what it deletes
    (conversations.retention._dependants_release), and an attachment left unused goes on the
    daily sweep (attachments.retention). Which message carries it is that message's `parts`
    (attachments.parts): the user message of a run that waits its turn is written only when the
    run is admitted, after this row."""

    workspace_path = "attachment__workspace"
    attachment = models.ForeignKey(
        Attachment, on_delete=models.CASCADE, related_name="uses", verbose_name=_("attachment")
    )
    run = models.ForeignKey("conversations.Run", on_delete=models.CASCADE, related_name="+", verbose_name=_("run"))
    position = models.PositiveSmallIntegerField(_("position"))
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("attachment use")
        verbose_name_plural = _("attachment uses")
        # Leads with the run: also the index the run's purge and erasure read by.
        constraints = [models.UniqueConstraint(fields=["run", "position"], name="attachment_use_run_position_uniq")]


class PartTextMethod(models.TextChoices):
    TRANSCRIPTION = "transcription", _("transcription")
    OCR = "ocr", _("OCR")
    DESCRIPTION = "description", _("description")
    # A file's text read by knowledge's parsers (PDF, Word, Excel, PowerPoint, CSV, text).
    EXTRACTION = "extraction", _("extraction")


class PartText(models.Model):
    """An attachment turned into text for a model that does not take its kind: an audio clip
    transcribed, an image read by OCR or described by a model, a file's text extracted. Made once per attachment and
    method, by the first run that needed it (its ledger: the model call that made it, if a model
    did); later steps and runs send this text in the part's place."""

    workspace_path = "attachment__workspace"
    attachment = models.ForeignKey(
        Attachment, on_delete=models.CASCADE, related_name="texts", verbose_name=_("attachment")
    )
    method = models.CharField(_("method"), max_length=20, choices=PartTextMethod.choices)
    text = models.TextField(_("text"), blank=True, default="")
    run = models.ForeignKey(
        "conversations.Run", on_delete=models.SET_NULL, null=True, blank=True, related_name="+", verbose_name=_("run")
    )
    llm_call = models.ForeignKey(
        "conversations.LLMCall",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("LLM call"),
    )
    duration_ms = models.PositiveIntegerField(_("duration (ms)"), null=True, blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("attachment text")
        verbose_name_plural = _("attachment texts")
        constraints = [models.UniqueConstraint(fields=["attachment", "method"], name="part_text_method_uniq")]
