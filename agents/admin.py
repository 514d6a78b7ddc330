from django import forms
from django.contrib import admin

from agents.models import Agent, AgentTool, AgentVersion, ModelConfig
from platform_site.admin_mixins import ReadOnlyAdminMixin
from platform_site.crypto import mask


class ModelConfigForm(forms.ModelForm):
    # The stored key is never sent to the browser; typing a new one replaces it.
    new_api_key = forms.CharField(
        required=False, widget=forms.PasswordInput(render_value=False), label="API key",
        help_text="Leave empty to keep the current key.",
    )
    clear_api_key = forms.BooleanField(required=False, label="Remove the stored key")

    class Meta:
        model = ModelConfig
        exclude = ["api_key"]

    def save(self, commit=True):
        if self.cleaned_data.get("clear_api_key"):
            self.instance.api_key = ""
        elif self.cleaned_data.get("new_api_key"):
            self.instance.api_key = self.cleaned_data["new_api_key"]
        return super().save(commit)


@admin.register(ModelConfig)
class ModelConfigAdmin(admin.ModelAdmin):
    form = ModelConfigForm
    list_display = ["name", "provider", "model", "base_url", "stream", "key_status", "updated_at"]
    list_filter = ["provider", "stream"]
    search_fields = ["name", "model", "base_url"]
    readonly_fields = ["key_status"]

    @admin.display(description="API key")
    def key_status(self, obj):
        return f"set ({mask(obj.api_key)})" if obj.api_key else "not set"


class AgentToolInline(admin.TabularInline):
    model = AgentTool
    extra = 1
    autocomplete_fields = ["tool"]


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "model_config", "max_iterations", "is_active", "updated_at"]
    list_filter = ["is_active", "model_config"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}
    list_select_related = ["model_config"]
    filter_horizontal = ["allowed_groups"]
    inlines = [AgentToolInline]


@admin.register(AgentVersion)
class AgentVersionAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["agent", "number", "config_hash", "created_at"]
    list_filter = ["agent"]
    list_select_related = ["agent"]
    readonly_fields = ["agent", "number", "config_hash", "snapshot", "created_at"]
