"""The admin of chat widgets.

A widget's secret is shown once and then only replaced, and its conversations are its owner's
(the creator unless a superuser chooses another), as
platform_site.admin_mixins.OwnedSecretAdminMixin does for every such object. The widget's page
ends with what another site needs, every address absolute (platform_site.public_url), and a live
preview (admin/widgets/widget/change_form.html)."""

from urllib.parse import urlencode

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.urls import reverse
from django.utils.translation import gettext_lazy

from agents.page_links import agent_column
from platform_site.admin_mixins import OwnedSecretAdminMixin
from platform_site.crypto import SecretDecryptionError
from platform_site.public_url import public_url, public_url_doubt
from widgets.models import Widget
from widgets.services import widget_secret_new, widget_secret_rotate, widget_usable
from widgets.tokens import end_user_token_sign
from workspaces.admin_scope import WorkspaceScopedAdmin

SNIPPET = '<script src="{script}" data-widget="{widget}" data-token="END-USER TOKEN" data-lang="{lang}"></script>'


def embed_snippet(widget: Widget, *, request=None) -> str:
    """What another site pastes to show `widget`, its script's address absolute (the widget's page
    and its agent's page show the same)."""
    script = public_url(reverse("widget-script"), request=request)
    return SNIPPET.format(script=script, widget=widget.pk, lang=widget.language)


@admin.register(Widget)
class WidgetAdmin(OwnedSecretAdminMixin, WorkspaceScopedAdmin, admin.ModelAdmin):
    list_display = ["name", "agent_link", "enabled", "language", "owner", "created_at"]
    agent_link = agent_column()
    list_filter = ["enabled", "language", "agent"]
    list_select_related = ["agent", "owner"]
    search_fields = ["name", "agent__slug"]
    raw_id_fields = ["owner"]
    readonly_fields = ["widget_id", "secret_status", "created_at"]

    def secret_new(self) -> str:
        return widget_secret_new()

    def secret_rotate(self, obj) -> str:
        return widget_secret_rotate(widget=obj)

    def get_fields(self, request, obj=None):
        fields = ["agent", "name", "enabled", "allowed_origins", "title", "greeting", "language", "memory_shared"]
        if request.user.is_superuser:
            fields.append("owner")
        if obj is not None:
            fields += ["widget_id", "secret_status", "created_at"]
        return fields

    @admin.display(description=gettext_lazy("widget id"))
    def widget_id(self, obj):
        return str(obj.pk)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        widget = self.get_object(request, unquote(object_id))
        if widget is not None:
            extra_context = {**(extra_context or {}), **self._embedding(request, widget)}
        return super().change_view(request, object_id, form_url, extra_context)

    def _embedding(self, request, widget) -> dict:
        """The snippet and the hosted page's address, absolute, with a warning when their base is
        a guess; and a live preview, the hosted page framed in this page as an end user of the
        operator's own, for those who may change the widget (they may rotate its secret, and so
        sign any token). The hosted page is on this site, whose origin the widget's API always
        allows: the preview needs no change to the widget's allowed origins."""
        chat = reverse("widget-chat", kwargs={"widget_id": widget.pk})
        embedding = {
            "embed_snippet": embed_snippet(widget, request=request),
            "hosted_page": public_url(chat, request=request) + "?token=…",
            "public_url_doubt": public_url_doubt(request),
        }
        if self.has_change_permission(request, widget) and widget_usable(widget_id=widget.pk) is not None:
            try:
                token = end_user_token_sign(widget=widget, end_user=f"admin-preview-{request.user.pk}")
            except SecretDecryptionError:
                return embedding  # the secret's field says so
            embedding["preview_url"] = chat + "?" + urlencode({"token": token})
        return embedding
