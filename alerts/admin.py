"""Alert rules are configured here (the usual add/change/delete permissions); firings are
read-only rows written by the evaluation."""

from django.contrib import admin
from django.utils.translation import gettext_lazy

from alerts.models import AlertFiring, AlertRule
from platform_site.admin_mixins import ReadOnlyAdminMixin
from workspaces.admin_scope import WorkspaceScopedAdmin


@admin.register(AlertRule)
class AlertRuleAdmin(WorkspaceScopedAdmin, admin.ModelAdmin):
    list_display = ["name", "kind", "scope", "window", "threshold", "enabled", "send_webhooks"]
    list_filter = ["enabled", "kind", "window"]
    list_select_related = ["agent", "model_config"]
    search_fields = ["name"]
    fields = [
        "name",
        "kind",
        "agent",
        "model_config",
        "window",
        "threshold",
        "min_runs",
        "enabled",
        "email_to",
        "send_webhooks",
    ]

    @admin.display(description=gettext_lazy("scope"))
    def scope(self, obj):
        return obj.scope_text()


class OpenFilter(admin.SimpleListFilter):
    title = gettext_lazy("state")
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return [("open", gettext_lazy("Open")), ("resolved", gettext_lazy("Resolved"))]

    def queryset(self, request, queryset):
        if self.value() == "open":
            return queryset.filter(resolved_at__isnull=True)
        if self.value() == "resolved":
            return queryset.filter(resolved_at__isnull=False)
        return queryset


@admin.register(AlertFiring)
class AlertFiringAdmin(ReadOnlyAdminMixin, WorkspaceScopedAdmin, admin.ModelAdmin):
    list_display = ["rule", "summary", "value", "threshold", "started_at", "resolved_at", "resolved_value"]
    list_filter = [OpenFilter, "rule__kind", "rule"]
    list_select_related = ["rule"]
    search_fields = ["summary", "rule__name"]
    show_full_result_count = False

    def lookup_allowed(self, lookup, value, request=None):
        # The agent's page links the firings of the rules on one agent, by its id.
        return lookup == "rule__agent__id__exact" or super().lookup_allowed(lookup, value, request)
