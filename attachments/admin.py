"""The operator's read-only view of attachments: what was uploaded, by whom, for which end user,
and the runs that sent it. Rows are written by attachments.services only; the bytes are
downloaded from the console's route (attachments are never shown inline)."""

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from attachments.models import Attachment, AttachmentUse
from platform_site.admin_mixins import ReadOnlyAdminMixin, ReadOnlyInline
from workspaces.admin_scope import WorkspaceScopedAdmin, WorkspaceScopedInline


class AttachmentUseInline(WorkspaceScopedInline, ReadOnlyInline):
    model = AttachmentUse
    fk_name = "attachment"
    show_change_link = False
    fields = ["created_at", "run_link", "position"]
    readonly_fields = fields

    @admin.display(description=_("run"))
    def run_link(self, obj):
        return format_html('<a href="{}">{}</a>', reverse("monitoring:run", args=[obj.run_id]), str(obj.run_id)[:8])


@admin.register(Attachment)
class AttachmentAdmin(WorkspaceScopedAdmin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["name", "kind", "media_type", "size", "dimensions", "owner", "end_user", "created_at"]
    list_filter = ["kind", "media_type"]
    search_fields = ["=end_user", "name", "=sha256", "=owner__username"]
    list_select_related = ["owner"]
    raw_id_fields = ["owner", "uploaded_by"]
    show_full_result_count = False
    inlines = [AttachmentUseInline]
    fields = [
        "download",
        "name",
        "kind",
        "media_type",
        "size",
        "sha256",
        "width",
        "height",
        "duration_ms",
        "owner",
        "end_user",
        "uploaded_by",
        "created_at",
    ]
    readonly_fields = fields

    @admin.display(description=_("dimensions"))
    def dimensions(self, obj):
        if obj.width and obj.height:
            return f"{obj.width}×{obj.height}"
        return "–"

    @admin.display(description=_("download"))
    def download(self, obj):
        url = reverse("monitoring:attachment-download", args=[obj.pk])
        return format_html('<a href="{}" download>{}</a>', url, _("Download"))
