"""The operator's view of long-term memory: an end user's memories with the run each came from
and its changes, a correction or a deletion (each through memory.services, so each writes its
change row), and the change rows themselves, read-only like every audit row.

Correcting takes the change permission on memories, deleting the delete permission; nobody adds
a memory here (they come from runs)."""

from django import forms
from django.contrib import admin, messages
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from memory.channels import OWNER_CHANNEL
from memory.models import Memory, MemoryChange
from memory.services import MemoryRejected, memory_correct, memory_correction_check, memory_delete
from platform_site.admin_mixins import ReadOnlyAdminMixin, ReadOnlyInline
from workspaces.admin_scope import WorkspaceScopedAdmin, WorkspaceScopedInline


def _run_link(run_id):
    if run_id is None:
        return "–"
    # The run's timeline page (console): its model calls, tools, and the memories it saw and wrote.
    return format_html('<a href="{}">{}</a>', reverse("monitoring:run", args=[run_id]), str(run_id)[:8])


class MemoryChangeInline(WorkspaceScopedInline, ReadOnlyInline):
    model = MemoryChange
    fk_name = "memory"
    show_change_link = False
    fields = ["created_at", "action", "source", "before", "after", "run_link", "changed_by", "reason"]
    readonly_fields = fields

    @admin.display(description=_("run"))
    def run_link(self, obj):
        return _run_link(obj.run_id)


class ChannelFilter(admin.AllValuesFieldListFilter):
    """The channel filter: the owner's own channel is stored empty (memory.channels), and a
    link with no text has no name for anyone, a screen reader included; it reads "owner"."""

    def choices(self, changelist):
        for choice in super().choices(changelist):
            if choice["display"] == OWNER_CHANNEL:
                choice["display"] = _("owner")
            yield choice


class MemoryForm(forms.ModelForm):
    class Meta:
        model = Memory
        fields = ["statement"]

    def clean_statement(self):
        try:
            return memory_correction_check(memory=self.instance, statement=self.cleaned_data["statement"])
        except MemoryRejected as exc:
            raise forms.ValidationError(exc.reason) from None


@admin.register(Memory)
class MemoryAdmin(WorkspaceScopedAdmin, admin.ModelAdmin):
    form = MemoryForm
    list_display = [
        "statement",
        "kind",
        "end_user",
        "owner",
        "channel",
        "scope",
        "source_run_link",
        "updated_at",
        "expires_at",
    ]
    list_filter = ["kind", "scope", ("channel", ChannelFilter)]
    # An end user's id is searched whole (it is the application's, often a number).
    search_fields = ["=end_user", "statement", "=owner__username"]
    list_select_related = ["owner"]
    show_full_result_count = False
    fields = [
        "statement",
        "kind",
        "end_user",
        "owner",
        "channel",
        "scope",
        "source_run_link",
        "source_message",
        "created_at",
        "updated_at",
        "last_used_at",
        "expires_at",
    ]
    readonly_fields = [field for field in fields if field != "statement"]
    inlines = [MemoryChangeInline]

    def has_add_permission(self, request):
        return False

    @admin.display(description=_("source run"), ordering="source_run")
    def source_run_link(self, obj):
        return _run_link(obj.source_run_id)

    def save_model(self, request, obj, form, change):
        if "statement" not in form.changed_data:
            return
        # `obj` holds the new statement already; the service compares it with the stored row's.
        try:
            memory_correct(memory=obj, statement=obj.statement, changed_by=request.user)
        except MemoryRejected as exc:  # changed meanwhile by someone else
            self.message_user(request, exc.reason, messages.ERROR)
        obj.refresh_from_db()

    def delete_model(self, request, obj):
        memory_delete(memory=obj, changed_by=request.user, source=MemoryChange.Source.OPERATOR)

    def delete_queryset(self, request, queryset):
        for memory in queryset:
            memory_delete(memory=memory, changed_by=request.user, source=MemoryChange.Source.OPERATOR)


@admin.register(MemoryChange)
class MemoryChangeAdmin(ReadOnlyAdminMixin, WorkspaceScopedAdmin, admin.ModelAdmin):
    list_display = ["created_at", "action", "source", "end_user", "owner", "scope", "before", "after", "run_link"]
    list_filter = ["action", "source", "scope"]
    search_fields = ["=end_user", "before", "after", "=owner__username"]
    list_select_related = ["owner"]
    show_full_result_count = False
    date_hierarchy = "created_at"
    fields = [
        "created_at",
        "action",
        "source",
        "memory",
        "scope",
        "owner",
        "channel",
        "end_user",
        "before",
        "after",
        "run_link",
        "llm_call",
        "changed_by",
        "reason",
    ]
    readonly_fields = fields

    @admin.display(description=_("run"), ordering="run")
    def run_link(self, obj):
        return _run_link(obj.run_id)
