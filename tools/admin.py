from django.contrib import admin, messages
from django.db.models import Count
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path

from tools.admin_forms import MCPServerForm, OpenAPIImportForm, ToolDefinitionForm, masked_mapping
from tools.mcp_sessions import MCPUnavailable
from tools.models import MCPServer, ToolDefinition
from tools.openapi import OpenAPIError
from tools.services import (
    mcp_server_discover,
    tool_definitions_import_openapi,
    tool_definitions_sync_from_registry,
)


@admin.register(ToolDefinition)
class ToolDefinitionAdmin(admin.ModelAdmin):
    form = ToolDefinitionForm
    list_display = ["name", "kind", "side_effect", "approval_policy", "mcp_server", "timeout_seconds", "is_active", "updated_at"]
    list_filter = ["kind", "side_effect", "approval_policy", "is_active", "mcp_server"]
    list_select_related = ["mcp_server"]
    search_fields = ["name", "description"]
    readonly_fields = ["secret_headers_status"]
    change_list_template = "admin/tools/tooldefinition/change_list.html"
    fieldsets = [
        (None, {"fields": ["name", "description", "kind", "parameters", "side_effect", "idempotent",
                           "timeout_seconds", "max_result_chars", "allowed_roles", "is_active"]}),
        ("Approval", {"fields": ["approval_policy", "approval_rule", "approval_timeout_seconds", "approval_on_expiry"]}),
        ("Python tool", {"classes": ["collapse"], "fields": ["python_callable"]}),
        ("HTTP tool", {"classes": ["collapse"], "fields": [
            "http_method", "http_url", "http_query_params", "http_body_argument", "http_headers",
            "secret_headers_status", "new_http_secret_headers", "clear_http_secret_headers",
            "http_response_pointer", "http_max_response_bytes",
        ]}),
        ("MCP tool", {"classes": ["collapse"], "fields": ["mcp_server", "mcp_tool_name"]}),
    ]

    @admin.display(description="Secret headers")
    def secret_headers_status(self, obj):
        return masked_mapping(obj.http_secret_headers) if obj and obj.pk else "none"

    def get_urls(self):
        sync = self.admin_site.admin_view(self.sync_registry_view)
        import_openapi = self.admin_site.admin_view(self.import_openapi_view)
        return [
            path("sync-registry/", sync, name="tools_tooldefinition_sync"),
            path("import-openapi/", import_openapi, name="tools_tooldefinition_import_openapi"),
        ] + super().get_urls()

    def sync_registry_view(self, request):
        # A state change, so only on POST (the button's form carries the CSRF token).
        if request.method == "POST" and self.has_add_permission(request):
            created, updated = tool_definitions_sync_from_registry()
            self.message_user(request, f"Built-in tools synced: {created} created, {updated} updated.", messages.SUCCESS)
        return redirect("admin:tools_tooldefinition_changelist")

    def import_openapi_view(self, request):
        if not self.has_add_permission(request):
            return redirect("admin:tools_tooldefinition_changelist")
        form = OpenAPIImportForm(request.POST or None, request.FILES or None)
        if request.method == "POST" and form.is_valid():
            try:
                report = tool_definitions_import_openapi(
                    document=form.cleaned_data["document"], base_url=form.cleaned_data["base_url"],
                    prefix=form.cleaned_data["prefix"],
                )
            except OpenAPIError as exc:
                form.add_error(None, str(exc))
            else:
                level = messages.SUCCESS if report.created or report.updated else messages.WARNING
                self.message_user(request, f"OpenAPI import: {report.summary()}.", level)
                return redirect("admin:tools_tooldefinition_changelist")
        context = {**self.admin_site.each_context(request), "opts": self.model._meta, "form": form,
                   "title": "Import tools from an OpenAPI document"}
        return TemplateResponse(request, "admin/tools/tooldefinition/import_openapi.html", context)


class MCPToolInline(admin.TabularInline):
    model = ToolDefinition
    fields = ["name", "mcp_tool_name", "side_effect", "approval_policy", "is_active"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True
    verbose_name_plural = "Discovered tools (edit each to change its side effect or approval)"

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(MCPServer)
class MCPServerAdmin(admin.ModelAdmin):
    form = MCPServerForm
    list_display = ["name", "transport", "trusted", "is_active", "tool_count", "discovered_at", "last_error"]
    list_filter = ["transport", "trusted", "is_active"]
    search_fields = ["name", "description", "command", "url"]
    readonly_fields = ["env_status", "headers_status", "discovered_at", "last_error"]
    actions = ["discover_tools"]
    inlines = [MCPToolInline]
    fieldsets = [
        (None, {"fields": ["name", "description", "transport", "trusted", "connect_timeout_seconds", "is_active"]}),
        ("stdio", {"fields": ["command", "args", "env_status", "new_env", "clear_env"]}),
        ("Streamable HTTP", {"fields": ["url", "headers_status", "new_headers", "clear_headers"]}),
        ("Discovery", {"fields": ["discovered_at", "last_error"]}),
    ]

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(tool_total=Count("tools"))

    def get_form(self, request, obj=None, **kwargs):
        form = super().get_form(request, obj, **kwargs)
        form.user = request.user
        return form

    @admin.display(description="tools", ordering="tool_total")
    def tool_count(self, obj):
        return obj.tool_total

    @admin.display(description="Environment")
    def env_status(self, obj):
        return masked_mapping(obj.env) if obj and obj.pk else "none"

    @admin.display(description="Headers")
    def headers_status(self, obj):
        return masked_mapping(obj.headers) if obj and obj.pk else "none"

    @admin.action(description="Discover tools (create or update one tool per server tool)", permissions=["change"])
    def discover_tools(self, request, queryset):
        for server in queryset:
            try:
                report = mcp_server_discover(server=server)
            except MCPUnavailable as exc:
                self.message_user(request, f"{server.name}: {exc}", messages.ERROR)
            else:
                self.message_user(request, f"{server.name}: {report.summary()}.", messages.SUCCESS)
