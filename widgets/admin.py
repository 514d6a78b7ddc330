"""The admin of chat widgets.

A widget's secret is generated when it is saved the first time and shown once, as a hook's is;
afterwards it can only be replaced (the rotate action, which takes the change permission), never
read. The conversations are the owner's: the creator unless a superuser chooses another. The
snippet's address is AGENTRY_PUBLIC_URL's; unset, it shows the path alone."""

from django.conf import settings
from django.contrib import admin, messages
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from platform_site.crypto import mask
from widgets.models import Widget
from widgets.services import widget_secret_new, widget_secret_rotate

SNIPPET = '<script src="{script}" data-widget="{widget}" data-token="END-USER TOKEN" data-lang="{lang}"></script>'


@admin.register(Widget)
class WidgetAdmin(admin.ModelAdmin):
    list_display = ["name", "agent", "enabled", "language", "owner", "created_at"]
    list_filter = ["enabled", "language", "agent"]
    list_select_related = ["agent", "owner"]
    search_fields = ["name", "agent__slug"]
    raw_id_fields = ["owner"]
    readonly_fields = ["widget_id", "secret_status", "embed_snippet", "hosted_page", "created_at"]
    actions = ["rotate_secret"]

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

    @admin.display(description=gettext_lazy("secret"))
    def secret_status(self, obj):
        return mask(obj.secret) if obj.pk else "-"

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

    def save_model(self, request, obj, form, change):
        if not change:
            if not request.user.is_superuser or obj.owner_id is None:
                obj.owner = request.user
            obj.secret = widget_secret_new()
            self.message_user(
                request,
                _("Widget secret, copy it now; it will not be shown again: %(secret)s") % {"secret": obj.secret},
                messages.WARNING,
            )
        super().save_model(request, obj, form, change)

    @admin.action(description=gettext_lazy("Rotate the secret of the selected widgets"), permissions=["change"])
    def rotate_secret(self, request, queryset):
        for widget in queryset:
            secret = widget_secret_rotate(widget=widget)
            self.message_user(
                request,
                _("New secret of widget %(widget)s, copy it now; it will not be shown again: %(secret)s")
                % {"widget": widget.name, "secret": secret},
                messages.WARNING,
            )
