"""The admin of inbound hooks.

A hook's secret is shown once and then only replaced, and its runs belong to its owner (the
creator unless a superuser chooses another: the runs show in that user's API), as
platform_site.admin_mixins.OwnedSecretAdminMixin does for every such object."""

from django import forms
from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from agents.page_links import agent_column
from platform_site.admin_mixins import OwnedSecretAdminMixin
from platform_site.public_url import public_url, public_url_doubt
from triggers.hooks import hook_secret_new, hook_secret_rotate, hook_templates_check
from triggers.models import Hook, HookDelivery
from workspaces.admin_scope import WorkspaceScopedAdmin

RECENT_DELIVERIES = 20


class HookForm(forms.ModelForm):
    class Meta:
        model = Hook
        exclude = ["secret"]

    def clean(self):
        cleaned = super().clean()
        try:
            hook_templates_check(message=cleaned.get("message", ""), end_user=cleaned.get("end_user", ""))
        except ValidationError as exc:
            for field, errors in exc.error_dict.items():
                if field in self.fields:
                    self.add_error(field, errors)
        return cleaned


@admin.register(Hook)
class HookAdmin(OwnedSecretAdminMixin, WorkspaceScopedAdmin, admin.ModelAdmin):
    form = HookForm
    list_display = ["name", "agent_link", "enabled", "hook_url", "owner", "created_at"]
    agent_link = agent_column()
    list_filter = ["enabled", "agent"]
    list_select_related = ["agent", "owner"]
    search_fields = ["name", "agent__slug"]
    raw_id_fields = ["owner"]
    readonly_fields = ["secret_status", "created_at", "recent_deliveries"]

    def secret_new(self) -> str:
        return hook_secret_new()

    def secret_rotate(self, obj) -> str:
        return hook_secret_rotate(hook=obj)

    def get_fields(self, request, obj=None):
        fields = ["agent", "name", "enabled", "message", "end_user", "memory_shared"]
        if request.user.is_superuser:
            fields.append("owner")
        if obj is not None:
            fields += ["secret_status", "created_at", "recent_deliveries"]
        return fields

    def change_view(self, request, object_id, form_url="", extra_context=None):
        # The URL the other system posts to, absolute (admin/triggers/hook/change_form.html).
        hook = self.get_object(request, unquote(object_id))
        if hook is not None:
            path = reverse("hook", kwargs={"hook_id": hook.pk})
            extra_context = {
                **(extra_context or {}),
                "hook_public_url": public_url(path, request=request),
                "public_url_doubt": public_url_doubt(request),
            }
        return super().change_view(request, object_id, form_url, extra_context)

    @admin.display(description=gettext_lazy("URL"))
    def hook_url(self, obj):
        return public_url(reverse("hook", kwargs={"hook_id": obj.pk})) if obj.pk else "-"

    @admin.display(description=gettext_lazy("recent deliveries"))
    def recent_deliveries(self, obj):
        deliveries = HookDelivery.objects.filter(hook=obj).order_by("-received_at")[:RECENT_DELIVERIES]
        if not deliveries:
            return _("None yet.")
        return format_html(
            "<ul>{}</ul>",
            format_html_join(
                "",
                "<li>{} · {} · {}</li>",
                ((d.received_at, d.delivery_id, self._run_link(d.run_id)) for d in deliveries),
            ),
        )

    @staticmethod
    def _run_link(run_id):
        if run_id is None:
            return _("no run")
        url = reverse("monitoring:run", kwargs={"run_id": run_id})
        return format_html('<a href="{}">{}</a>', url, _("run %(run)s") % {"run": str(run_id)[:8]})
