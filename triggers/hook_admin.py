"""The admin of inbound hooks.

A hook's secret is generated when the hook is saved the first time and shown once, as a
webhook's is; afterwards it can only be replaced (the rotate action), never read. The owner a
hook's runs belong to is the creator's own unless a superuser chooses another: the runs show in
that user's API."""

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from platform_site.crypto import mask
from triggers.hooks import hook_secret_new, hook_secret_rotate, hook_templates_check
from triggers.models import Hook, HookDelivery

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
class HookAdmin(admin.ModelAdmin):
    form = HookForm
    list_display = ["name", "agent", "enabled", "hook_url", "owner", "created_at"]
    list_filter = ["enabled", "agent"]
    list_select_related = ["agent", "owner"]
    search_fields = ["name", "agent__slug"]
    raw_id_fields = ["owner"]
    readonly_fields = ["hook_url", "secret_status", "created_at", "recent_deliveries"]
    actions = ["rotate_secret"]

    def get_fields(self, request, obj=None):
        fields = ["agent", "name", "enabled", "message", "end_user"]
        if request.user.is_superuser:
            fields.append("owner")
        if obj is not None:
            fields += ["hook_url", "secret_status", "created_at", "recent_deliveries"]
        return fields

    @admin.display(description=gettext_lazy("URL"))
    def hook_url(self, obj):
        return reverse("hook", kwargs={"hook_id": obj.pk}) if obj.pk else "-"

    @admin.display(description=gettext_lazy("secret"))
    def secret_status(self, obj):
        return mask(obj.secret) if obj.pk else "-"

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

    def save_model(self, request, obj, form, change):
        if not change:
            if not request.user.is_superuser or obj.owner is None:
                obj.owner = request.user
            obj.secret = hook_secret_new()
            self.message_user(
                request,
                _("Hook secret, copy it now; it will not be shown again: %(secret)s") % {"secret": obj.secret},
                messages.WARNING,
            )
        super().save_model(request, obj, form, change)

    @admin.action(description=gettext_lazy("Rotate the secret of the selected hooks"), permissions=["change"])
    def rotate_secret(self, request, queryset):
        for hook in queryset:
            secret = hook_secret_rotate(hook=hook)
            self.message_user(
                request,
                _("New secret of hook %(hook)s, copy it now; it will not be shown again: %(secret)s")
                % {"hook": hook.name, "secret": secret},
                messages.WARNING,
            )
