from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from platform_site.admin_mixins import JSONInputAdminMixin
from tools.admin_forms import MCPServerForm, OpenAPIImportForm, ToolDefinitionForm, masked_mapping
from tools.approval_policy import ApprovalPolicy, effective_policy, live_approvals
from tools.mcp_sessions import MCPUnavailable
from tools.models import MCPServer, ToolDefinition
from tools.openapi import OpenAPIError
from tools.remote_agents import card_skills
from tools.services import (
    mcp_server_discover,
    tool_definitions_import_openapi,
    tool_definitions_openapi_changes,
    tool_definitions_sync_from_registry,
)
from workspaces.access import binding_of
from workspaces.admin_scope import WorkspaceScopedAdmin, WorkspaceScopedInline


def _asks(approval: dict) -> str:
    if approval["policy"] == ApprovalPolicy.RULE:
        return _("asks when %(rule)s") % {"rule": approval["rule"]}
    return _("always asks") if approval["policy"] == ApprovalPolicy.ALWAYS else _("never asks")


def _live_line(live) -> str:
    roles = {"published": _("published"), "canary": _("canary"), "draft": _("draft, never published")}
    named = {"agent": live.agent, "role": roles.get(live.role, live.role), "asks": _asks(live.effective)}
    if live.number is None:
        line = _("%(agent)s (%(role)s): %(asks)s") % named
    else:
        line = _("%(agent)s v%(number)s (%(role)s): %(asks)s") % {**named, "number": live.number}
    if live.effective != live.pinned:
        line += " — " + _("stricter than the %(pinned)s the version pinned: applies now") % {
            "pinned": _asks(live.pinned)
        }
    elif live.current is not None and live.current != live.pinned:
        line += " — " + _("the policy now (%(current)s) is looser: it applies once a release pins it") % {
            "current": _asks(live.current)
        }
    return line


class SuperuserOnlyFieldsMixin:
    """Shows the form's superuser-only fields read-only to everyone else (the form drops them)."""

    def get_form(self, request, obj=None, **kwargs):
        form = super().get_form(request, obj, **kwargs)
        form.user = request.user
        return form

    def get_readonly_fields(self, request, obj=None):
        fields = list(super().get_readonly_fields(request, obj))
        if not request.user.is_superuser:
            fields += [name for name in self.form.superuser_only if name not in self.write_only_fields]
        return fields

    def get_fieldsets(self, request, obj=None):
        fieldsets = super().get_fieldsets(request, obj)
        if request.user.is_superuser:
            return fieldsets
        hidden = set(self.write_only_fields)
        return [
            (title, {**options, "fields": [f for f in options["fields"] if f not in hidden]})
            for title, options in fieldsets
        ]


@admin.register(ToolDefinition)
class ToolDefinitionAdmin(JSONInputAdminMixin, SuperuserOnlyFieldsMixin, WorkspaceScopedAdmin, admin.ModelAdmin):
    form = ToolDefinitionForm
    list_display = [
        "name",
        "kind",
        "side_effect",
        "approval_policy",
        "effective_approval",
        "mcp_server",
        "timeout_seconds",
        "is_active",
        "updated_at",
    ]
    list_filter = ["kind", "side_effect", "approval_policy", "is_active", "mcp_server"]
    list_select_related = ["mcp_server"]
    search_fields = ["name", "description"]
    readonly_fields = [
        "secret_headers_status",
        "effective_approval",
        "live_approval",
        "a2a_card_summary",
        "a2a_card_fetched_at",
        "a2a_secret_headers_status",
    ]
    write_only_fields = ()
    change_list_template = "admin/tools/tooldefinition/change_list.html"

    # Opens the section of the kind chosen (the sections' classes name their kind).
    class Media:
        js = ["tools/tool_kind.js"]

    fieldsets = [
        (
            None,
            {
                "fields": [
                    "name",
                    "description",
                    "kind",
                    "parameters",
                    "side_effect",
                    "idempotent",
                    "timeout_seconds",
                    "max_result_chars",
                    "is_active",
                ]
            },
        ),
        (
            gettext_lazy("Approval"),
            {
                "fields": [
                    "approval_policy",
                    "effective_approval",
                    "live_approval",
                    "approval_rule",
                    "approval_timeout_seconds",
                    "approval_on_expiry",
                ]
            },
        ),
        (gettext_lazy("Python tool"), {"classes": ["collapse", "kind-python"], "fields": ["python_callable"]}),
        (
            gettext_lazy("HTTP tool"),
            {
                "classes": ["collapse", "kind-http"],
                "fields": [
                    "http_method",
                    "http_url",
                    "http_query_params",
                    "http_body_argument",
                    "http_headers",
                    "secret_headers_status",
                    "new_http_secret_headers",
                    "clear_http_secret_headers",
                    "http_response_pointer",
                    "http_max_response_bytes",
                ],
            },
        ),
        (gettext_lazy("MCP tool"), {"classes": ["collapse", "kind-mcp"], "fields": ["mcp_server", "mcp_tool_name"]}),
        (
            gettext_lazy("Remote agent (A2A)"),
            {
                "classes": ["collapse", "kind-a2a"],
                "fields": [
                    "a2a_card_url",
                    "a2a_skill",
                    "refresh_a2a_card",
                    "a2a_card_summary",
                    "a2a_card_fetched_at",
                    "a2a_secret_headers_status",
                    "new_a2a_secret_headers",
                    "clear_a2a_secret_headers",
                ],
            },
        ),
    ]

    @admin.display(description=gettext_lazy("effective approval"))
    def effective_approval(self, obj):
        # What "auto" means for this tool, so a write that asks for approval is visible in the list.
        if obj is None or not obj.pk:
            return _("decided when saved: writes (and HTTP methods other than GET) ask for approval")
        policy, rule = effective_policy(
            tool_policy=obj.approval_policy, tool_rule=obj.approval_rule, side_effect=obj.side_effect
        )
        return _asks({"policy": policy, "rule": rule})

    @admin.display(description=gettext_lazy("approval in live versions"))
    def live_approval(self, obj):
        # What live traffic gets: a version keeps the policy it pinned unless the tool's (or the
        # agent's override) is stricter now, so a tightening shows here at once, a loosening only
        # once a release pins it.
        if obj is None or not obj.pk:
            return "-"
        found = live_approvals(tool=obj)
        if not found:
            return _("no live version uses this tool") if found is not None else "-"
        return format_html_join(mark_safe("<br>"), "{}", ((_live_line(live),) for live in found))

    @admin.display(description=gettext_lazy("Secret headers"))
    def secret_headers_status(self, obj):
        return masked_mapping(obj.http_secret_headers) if obj and obj.pk else _("none")

    @admin.display(description=gettext_lazy("Remote agent secret headers"))
    def a2a_secret_headers_status(self, obj):
        return masked_mapping(obj.a2a_secret_headers) if obj and obj.pk else _("none")

    @admin.display(description=gettext_lazy("Agent card"))
    def a2a_card_summary(self, obj):
        if obj is None or not obj.a2a_card:
            return _("not fetched")
        skills = card_skills(obj.a2a_card)
        return format_html(
            "{} — {}<br>{}",
            obj.a2a_card.get("name", ""),
            obj.a2a_card.get("description", ""),
            format_html_join(
                mark_safe("<br>"), "<code>{}</code> {}: {}", ((s.id, s.name, s.description) for s in skills)
            ),
        )

    def get_urls(self):
        sync = self.admin_site.admin_view(self.sync_registry_view)
        import_openapi = self.admin_site.admin_view(self.import_openapi_view)
        return [
            path("sync-registry/", sync, name="tools_tooldefinition_sync"),
            path("import-openapi/", import_openapi, name="tools_tooldefinition_import_openapi"),
        ] + super().get_urls()

    def sync_registry_view(self, request):
        # Sync creates the built-in tools and resets the ones that exist.
        if not (self.has_add_permission(request) and self.has_change_permission(request)):
            raise PermissionDenied
        # A state change, so only on POST (the button's form carries the CSRF token).
        if request.method == "POST":
            # The workspace the person acts in; a superuser acting installation-wide, every one.
            workspace = binding_of(request.user).workspace
            created, updated = tool_definitions_sync_from_registry(
                workspace_ids=None if workspace is None else [workspace.pk]
            )
            self.message_user(
                request,
                _("Built-in tools synced: %(created)s created, %(updated)s updated.")
                % {"created": created, "updated": updated},
                messages.SUCCESS,
            )
        return redirect("admin:tools_tooldefinition_changelist")

    def import_openapi_view(self, request):
        if not self.has_add_permission(request):
            raise PermissionDenied
        form = OpenAPIImportForm(request.POST or None, request.FILES or None)
        changes = []
        if request.method == "POST" and form.is_valid():
            source = {key: form.cleaned_data[key] for key in ("document", "base_url", "prefix")}
            workspace_id = binding_of(request.user).workspace_id
            try:
                changes = tool_definitions_openapi_changes(**source, workspace_id=workspace_id)
                if changes and not self.has_change_permission(request):
                    form.add_error(
                        None,
                        _(
                            "This import would change existing tools (%(names)s); only someone "
                            "allowed to change tools can replace them."
                        )
                        % {"names": ", ".join(changes)},
                    )
                elif changes and not set(changes) <= form.confirmed_names():
                    # Asked again with the document in the text box: an upload is not sent twice.
                    form = OpenAPIImportForm({**source, "confirmed": ",".join(changes)})
                else:
                    report = tool_definitions_import_openapi(**source, may_replace=changes, workspace_id=workspace_id)
                    level = messages.SUCCESS if report.created or report.updated else messages.WARNING
                    self.message_user(request, _("OpenAPI import: %(summary)s.") % {"summary": report.summary()}, level)
                    return redirect("admin:tools_tooldefinition_changelist")
            except OpenAPIError as exc:
                form.add_error(None, str(exc))
                changes = []
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "form": form,
            "title": _("Import tools from an OpenAPI document"),
            "changes": changes if form.is_bound and not form.errors else [],
        }
        return TemplateResponse(request, "admin/tools/tooldefinition/import_openapi.html", context)


class MCPToolInline(WorkspaceScopedInline, admin.TabularInline):
    model = ToolDefinition
    fields = ["name", "mcp_tool_name", "side_effect", "approval_policy", "is_active"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True
    verbose_name_plural = gettext_lazy("Discovered tools (edit each to change its side effect or approval)")

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(MCPServer)
class MCPServerAdmin(JSONInputAdminMixin, SuperuserOnlyFieldsMixin, WorkspaceScopedAdmin, admin.ModelAdmin):
    form = MCPServerForm
    list_display = ["name", "transport", "trusted", "is_active", "tool_count", "discovered_at", "last_error"]
    list_filter = ["transport", "trusted", "is_active"]
    search_fields = ["name", "description", "command", "url"]
    readonly_fields = ["env_status", "headers_status", "discovered_at", "last_error"]
    write_only_fields = ("new_env", "clear_env")
    actions = ["discover_tools"]
    inlines = [MCPToolInline]
    fieldsets = [
        (None, {"fields": ["name", "description", "transport", "trusted", "connect_timeout_seconds", "is_active"]}),
        ("stdio", {"fields": ["command", "args", "env_status", "new_env", "clear_env"]}),
        (gettext_lazy("Streamable HTTP"), {"fields": ["url", "headers_status", "new_headers", "clear_headers"]}),
        (gettext_lazy("Discovery"), {"fields": ["discovered_at", "last_error"]}),
    ]

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(tool_total=Count("tools"))

    def get_readonly_fields(self, request, obj=None):
        fields = super().get_readonly_fields(request, obj)
        # Only a superuser may turn a server into a command, or change the command's server.
        if not request.user.is_superuser and obj is not None and obj.transport == MCPServer.Transport.STDIO:
            fields.append("transport")
        return fields

    @admin.display(description=gettext_lazy("tools"), ordering="tool_total")
    def tool_count(self, obj):
        return obj.tool_total

    @admin.display(description=gettext_lazy("Environment"))
    def env_status(self, obj):
        return masked_mapping(obj.env) if obj and obj.pk else _("none")

    @admin.display(description=gettext_lazy("Headers"))
    def headers_status(self, obj):
        return masked_mapping(obj.headers) if obj and obj.pk else _("none")

    @admin.action(
        description=gettext_lazy("Discover tools (create or update one tool per server tool)"), permissions=["change"]
    )
    def discover_tools(self, request, queryset):
        for server in queryset:
            # Discovering a stdio server starts its command in this process.
            if server.transport == MCPServer.Transport.STDIO and not request.user.is_superuser:
                self.message_user(
                    request,
                    _("%(server)s: only a superuser can start a stdio server.") % {"server": server.name},
                    messages.ERROR,
                )
                continue
            try:
                report = mcp_server_discover(server=server)
            except MCPUnavailable as exc:
                self.message_user(request, f"{server.name}: {exc}", messages.ERROR)
            else:
                self.message_user(request, f"{server.name}: {report.summary()}.", messages.SUCCESS)
