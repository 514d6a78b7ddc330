from django.contrib import admin, messages
from django.shortcuts import redirect
from django.urls import path

from tools.models import ToolDefinition
from tools.services import tool_definitions_sync_from_registry


@admin.register(ToolDefinition)
class ToolDefinitionAdmin(admin.ModelAdmin):
    list_display = ["name", "kind", "side_effect", "approval_policy", "timeout_seconds", "is_active", "updated_at"]
    list_filter = ["kind", "side_effect", "approval_policy", "is_active"]
    search_fields = ["name", "description"]
    change_list_template = "admin/tools/tooldefinition/change_list.html"

    def get_urls(self):
        sync = self.admin_site.admin_view(self.sync_registry_view)
        return [path("sync-registry/", sync, name="tools_tooldefinition_sync")] + super().get_urls()

    def sync_registry_view(self, request):
        # A state change, so only on POST (the button's form carries the CSRF token).
        if request.method == "POST" and self.has_add_permission(request):
            created, updated = tool_definitions_sync_from_registry()
            self.message_user(request, f"Built-in tools synced: {created} created, {updated} updated.", messages.SUCCESS)
        return redirect("admin:tools_tooldefinition_changelist")
