from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import StreamingHttpResponse
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from agents.models import AgentVersion
from audit.diff import field_changes
from audit.export import config_change_lines
from audit.models import ConfigChange
from audit.registry import AUDITED
from audit.selectors import config_changes_of, version_origin_change
from conversations.export import CONTENT_TYPES
from platform_site.admin_mixins import ReadOnlyAdminMixin
from workspaces.admin_scope import WorkspaceScopedAdmin

VIEW_PERMISSION = "audit.view_configchange"
# The history page shows the latest changes; the rest are in the filtered list it links to.
HISTORY_ROWS = 200


def _export(changes, format: str) -> StreamingHttpResponse:
    response = StreamingHttpResponse(
        config_change_lines(changes=changes, format=format), content_type=CONTENT_TYPES[format]
    )
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    response["Content-Disposition"] = f'attachment; filename="agentry-config-changes-{stamp}.{format}"'
    response["Cache-Control"] = "no-store"
    return response


@admin.register(ConfigChange)
class ConfigChangeAdmin(WorkspaceScopedAdmin, ReadOnlyAdminMixin, admin.ModelAdmin):
    """Written by the audit's receivers only; viewing needs *Can view configuration change*."""

    list_display = ["at", "action", "source", "content_type", "object_repr", "actor_label", "changed_fields"]
    list_filter = ["action", "source", ("content_type", admin.RelatedOnlyFieldListFilter)]
    search_fields = ["object_repr", "actor_label", "object_id"]
    date_hierarchy = "at"
    list_select_related = ["content_type"]
    show_full_result_count = False
    fields = [
        "at",
        "action",
        "source",
        "content_type",
        "object_id",
        "object_repr",
        "agent_id",
        "workspace",
        "actor",
        "actor_label",
        "api_token_id",
        "diff",
    ]
    readonly_fields = fields
    actions = ["export_jsonl", "export_csv"]

    @admin.display(description=_("fields"))
    def changed_fields(self, obj):
        return ", ".join(obj.changes)

    @admin.display(description=_("changes"))
    def diff(self, obj):
        return render_to_string("admin/audit/fields.html", {"fields": field_changes(obj)})

    @admin.action(description=_("Export selected changes (JSONL)"), permissions=["view"])
    def export_jsonl(self, request, queryset):
        return _export(queryset, "jsonl")

    @admin.action(description=_("Export selected changes (CSV)"), permissions=["view"])
    def export_csv(self, request, queryset):
        return _export(queryset, "csv")


class ConfigHistoryAdminMixin:
    """An audited model's History page: its configuration changes with their diffs, for those
    who may view the object and the audit."""

    def history_view(self, request, object_id, extra_context=None):
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)
        if not self.has_view_or_change_permission(request, obj) or not request.user.has_perm(VIEW_PERMISSION):
            raise PermissionDenied
        changes = list(config_changes_of(instance=obj)[: HISTORY_ROWS + 1])
        context = {
            **self.admin_site.each_context(request),
            "title": _("Change history: %s") % obj,
            "subtitle": None,
            "object": obj,
            "opts": self.opts,
            "app_label": self.opts.app_label,
            "rows": [(change, field_changes(change)) for change in changes[:HISTORY_ROWS]],
            "more": len(changes) > HISTORY_ROWS,
            "all_url": reverse("admin:audit_configchange_changelist")
            + f"?content_type__id__exact={changes[0].content_type_id}&object_id={obj.pk}"
            if changes
            else "",
            **(extra_context or {}),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/audit/object_history.html", context)


class AgentVersionHistoryMixin(ConfigHistoryAdminMixin):
    @admin.display(description=_("made by"))
    def made_by_change(self, obj):
        change = version_origin_change(version=obj)
        if change is None:
            return _("no recorded change (the version is older than the audit)")
        return format_html(
            '<a href="{}">{}</a>',
            reverse("admin:audit_configchange_change", args=[change.pk]),
            _("%(action)s of %(object)s by %(who)s, %(at)s")
            % {
                "action": change.get_action_display(),
                "object": change.object_repr,
                "who": change.actor_label or change.get_source_display(),
                "at": timezone.localtime(change.at).strftime("%Y-%m-%d %H:%M:%S"),
            },
        )

    def get_readonly_fields(self, request, obj=None):
        return [*super().get_readonly_fields(request, obj), "made_by_change"]


def _history_wrap() -> None:
    """Give every audited model's admin the history page (and an agent version's, its origin):
    the admins stay in their apps, which do not know the audit."""
    for spec in AUDITED:
        if not admin.site.is_registered(spec.model):
            continue
        base = type(admin.site.get_model_admin(spec.model))
        mixin = AgentVersionHistoryMixin if spec.model is AgentVersion else ConfigHistoryAdminMixin
        admin.site.unregister(spec.model)
        admin.site.register(spec.model, type(base.__name__, (mixin, base), {"__module__": base.__module__}))


_history_wrap()
