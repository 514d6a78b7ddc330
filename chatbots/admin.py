"""The admin of chat-app bots: a channel's settings and callback URL, its chat users (who is
answered, and which approver account a chat user's buttons decide as) and the callbacks it took.

A channel's secrets are written, never shown: the form takes them as a JSON object by name (as
the service's module lists them); left empty, the ones stored stay. Callbacks are ledger rows:
read-only."""

import json

from django import forms
from django.contrib import admin
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from agents.page_links import agent_column
from chatbots.inbound import channel_secrets
from chatbots.models import ChatChannel, ChatEvent, ChatUser
from chatbots.services import SERVICES
from platform_site.admin_mixins import LabelledTabularInline, ReadOnlyAdminMixin
from platform_site.crypto import SecretDecryptionError
from platform_site.json_input import JSONInputError, json_loads_checked
from platform_site.public_url import public_url
from workspaces.admin_scope import WorkspaceScopedAdmin, WorkspaceScopedInline


class ChatChannelForm(forms.ModelForm):
    api_base = forms.URLField(
        label=gettext_lazy("API base URL"),
        required=False,
        max_length=200,
        assume_scheme="https",
        help_text=ChatChannel._meta.get_field("api_base").help_text,
    )
    new_secrets = forms.CharField(
        label=gettext_lazy("secrets"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "autocomplete": "off"}),
    )

    class Meta:
        model = ChatChannel
        exclude = ["secrets"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        names = "; ".join(
            f"{label}: {', '.join(SERVICES[value].secret_names)}"
            for value, label in ChatChannel._meta.get_field("service").choices
            if value in SERVICES
        )
        self.fields["new_secrets"].help_text = _(
            "A JSON object of the service's credentials by name (docs/chat-bots.md), for %(names)s. "
            "Never shown again; leave empty to keep the ones stored."
        ) % {"names": names}

    def clean(self):
        cleaned = super().clean()
        text, service = cleaned.get("new_secrets", "").strip(), SERVICES.get(cleaned.get("service", ""))
        if service is None:
            if cleaned.get("service"):
                self.add_error("service", _("This service has no module on this server yet."))
            return cleaned
        if not text:
            if self.instance._state.adding:
                self.add_error("new_secrets", _("Give the channel's credentials."))
            return cleaned
        try:
            value = json_loads_checked(text)
        except JSONInputError as exc:
            self.add_error("new_secrets", str(exc))
            return cleaned
        if not isinstance(value, dict) or not all(isinstance(v, str) and v for v in value.values()):
            self.add_error("new_secrets", _("Give a JSON object of non-empty strings."))
            return cleaned
        missing = [name for name in service.secret_names if name not in value]
        unknown = [name for name in value if name not in service.secret_names]
        if missing or unknown:
            self.add_error(
                "new_secrets",
                _("%(service)s takes exactly these names: %(names)s.")
                % {"service": service.name, "names": ", ".join(service.secret_names)},
            )
        cleaned["secrets_json"] = json.dumps(value)
        return cleaned

    def save(self, commit=True):
        if self.cleaned_data.get("secrets_json"):
            self.instance.secrets = self.cleaned_data["secrets_json"]
        return super().save(commit)


class ChatUserInline(WorkspaceScopedInline, LabelledTabularInline):
    model = ChatUser
    extra = 0
    fields = ["chat_user_id", "end_user", "account"]
    raw_id_fields = ["account"]

    def get_readonly_fields(self, request, obj=None):
        # A chat user's buttons decide approvals as their account: whoever could link any chat
        # id to any account could decide as any approver. Only a superuser links them.
        readonly = list(super().get_readonly_fields(request, obj))
        return readonly if request.user.is_superuser else [*readonly, "account"]


@admin.register(ChatChannel)
class ChatChannelAdmin(WorkspaceScopedAdmin, admin.ModelAdmin):
    form = ChatChannelForm
    inlines = [ChatUserInline]
    list_display = ["name", "agent_link", "service", "enabled", "callback_url", "owner", "created_at"]
    agent_link = agent_column()
    list_filter = ["service", "enabled", "agent"]
    list_select_related = ["agent", "owner"]
    search_fields = ["name", "agent__slug"]
    raw_id_fields = ["owner"]
    readonly_fields = ["callback_url", "secrets_status", "created_at"]

    def get_queryset(self, request):
        return super().get_queryset(request).defer("secrets")

    def get_fields(self, request, obj=None):
        fields = ["agent", "name", "service", "enabled", "new_secrets", "api_base", "auto_map_users"]
        if request.user.is_superuser:
            fields.append("owner")
        if obj is not None:
            fields += ["callback_url", "secrets_status", "created_at"]
        return fields

    def save_model(self, request, obj, form, change):
        # The creator, unless a superuser chose another; a superuser who empties the field keeps it theirs.
        if (not change and not request.user.is_superuser) or obj.owner_id is None:
            obj.owner = request.user
        super().save_model(request, obj, form, change)

    @admin.display(description=gettext_lazy("callback URL"))
    def callback_url(self, obj):
        return public_url(reverse("chat-callback", kwargs={"channel_id": obj.pk})) if obj.pk else "-"

    @admin.display(description=gettext_lazy("secrets stored"))
    def secrets_status(self, obj):
        try:
            names = sorted(channel_secrets(obj))
        except SecretDecryptionError:
            return _("Unreadable: the server's encryption keys cannot decrypt them; enter them again.")
        return ", ".join(names) or "-"


@admin.register(ChatEvent)
class ChatEventAdmin(ReadOnlyAdminMixin, WorkspaceScopedAdmin, admin.ModelAdmin):
    list_display = ["received_at", "channel", "event_id", "chat_user_id", "outcome", "run", "replied_at"]
    list_filter = ["outcome", "channel"]
    list_select_related = ["channel"]
    search_fields = ["event_id", "chat_user_id"]
    raw_id_fields = ["run"]
    show_full_result_count = False
