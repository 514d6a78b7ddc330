"""The admin of chat widgets.

A widget's secret is shown once and then only replaced, and its conversations are its owner's
(the creator unless a superuser chooses another), as
platform_site.admin_mixins.OwnedSecretAdminMixin does for every such object. The snippet's
address is AGENTRY_PUBLIC_URL's; unset, it shows the path alone."""

from django.conf import settings
from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy

from platform_site.admin_mixins import OwnedSecretAdminMixin
from widgets.models import Widget
from widgets.services import widget_secret_new, widget_secret_rotate

SNIPPET = '<script src="{script}" data-widget="{widget}" data-token="END-USER TOKEN" data-lang="{lang}"></script>'


@admin.register(Widget)
class WidgetAdmin(OwnedSecretAdminMixin, admin.ModelAdmin):
    list_display = ["name", "agent", "enabled", "language", "owner", "created_at"]
    list_filter = ["enabled", "language", "agent"]
    list_select_related = ["agent", "owner"]
    search_fields = ["name", "agent__slug"]
    raw_id_fields = ["owner"]
    readonly_fields = ["widget_id", "secret_status", "embed_snippet", "hosted_page", "created_at"]

    def secret_new(self) -> str:
        return widget_secret_new()

    def secret_rotate(self, obj) -> str:
        return widget_secret_rotate(widget=obj)

    def get_fields(self, request, obj=None):
        fields = ["agent", "name", "enabled", "allowed_origins", "title", "greeting", "language"]
        if request.user.is_superuser:
            fields.append("owner")
        if obj is not None:
            fields += ["widget_id", "secret_status", "embed_snippet", "hosted_page", "created_at"]
        return fields

    @admin.display(description=gettext_lazy("widget id"))
    def widget_id(self, obj):
        return str(obj.pk)

    @admin.display(description=gettext_lazy("embed snippet"))
    def embed_snippet(self, obj):
        script = settings.AGENTRY_PUBLIC_URL + reverse("widget-script")
        # <code>: typed as it is, in any language of the page.
        return format_html(
            "<pre><code>{}</code></pre>", SNIPPET.format(script=script, widget=obj.pk, lang=obj.language)
        )

    @admin.display(description=gettext_lazy("hosted page"))
    def hosted_page(self, obj):
        return settings.AGENTRY_PUBLIC_URL + reverse("widget-chat", kwargs={"widget_id": obj.pk}) + "?token=…"
