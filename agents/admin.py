import re
from dataclasses import asdict

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import models
from django.db.models import F
from django.http import Http404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from agents.connection_check import SAVE_CHECK_TIMEOUT_SECONDS, model_config_test
from agents.delegation import access_problem
from agents.models import (
    Agent,
    AgentDelegate,
    AgentRelease,
    AgentTool,
    AgentUsageDay,
    AgentVersion,
    AudioParts,
    FileParts,
    GuardrailRule,
    ImageParts,
    ModelConfig,
    ModelPurpose,
    PromptCaching,
    RoutingRule,
    input_kinds_default,
)
from agents.page_links import agent_column
from agents.prompting import system_prompt_check
from agents.providers.calibration import Calibration
from agents.release_admin import AgentReleaseAdminMixin
from agents.snapshot import callable_tool_names
from platform_site.admin_mixins import JSONInputAdminMixin, LabelledTabularInline, ReadOnlyAdminMixin
from platform_site.crypto import mask
from platform_site.http_methods import require_POST
from workspaces.admin_scope import WorkspaceScopedAdmin, WorkspaceScopedInline

RETENTION_PERMISSION = "conversations.delete_run"
RELEASE_FIELDS = {"id", "published_version", "canary_version", "canary_percent"}


class ModelConfigForm(forms.ModelForm):
    # The stored key is never sent to the browser; typing a new one replaces it.
    new_api_key = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        label=_("API key"),
    )
    clear_api_key = forms.BooleanField(required=False, label=_("Remove the stored key"))
    base_url = forms.URLField(max_length=500, assume_scheme="https", help_text=_("e.g. https://api.openai.com/v1"))
    # Left empty (or absent from a form posted by a script): a chat model that takes text.
    purpose = ModelConfig._meta.get_field("purpose").formfield(required=False)
    price_audio_per_minute = ModelConfig._meta.get_field("price_audio_per_minute").formfield(required=False)
    # Left empty (or absent from a form posted by a script): auto.
    prompt_caching = ModelConfig._meta.get_field("prompt_caching").formfield(required=False)

    def clean_purpose(self):
        return self.cleaned_data["purpose"] or ModelPurpose.CHAT

    def clean_prompt_caching(self):
        return self.cleaned_data["prompt_caching"] or PromptCaching.AUTO

    def clean_price_audio_per_minute(self):
        price = self.cleaned_data["price_audio_per_minute"]
        return 0 if price is None else price

    class Meta:
        model = ModelConfig
        exclude = ["api_key"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # One sentence that fits the config's state: a new config has no key to keep.
        if self.instance.pk is None:
            help_text = _("Stored encrypted and never shown again. Leave empty for a server that needs no key.")
        elif self.instance.api_key:
            help_text = _("Leave empty to keep the current key.")
        else:
            help_text = _("No key is stored. Type one to set it, or leave empty for a server that needs none.")
        self.fields["new_api_key"].help_text = help_text
        # Left empty: a model that takes text only, audio and cache writes priced as input (the defaults).
        for name in ("input_kinds", "price_audio_input_per_million", "price_cache_write_per_million"):
            if name in self.fields:
                self.fields[name].required = False

    def clean_input_kinds(self):
        return self.cleaned_data.get("input_kinds") or input_kinds_default()

    def clean_price_audio_input_per_million(self):
        return self.cleaned_data.get("price_audio_input_per_million") or 0

    def clean_price_cache_write_per_million(self):
        return self.cleaned_data.get("price_cache_write_per_million") or 0

    def clean_base_url(self):
        # URLField would quietly put https:// before a bare host, and a plain-HTTP server (llama.cpp,
        # vLLM on a LAN) then fails at run time with an SSL error far from this form.
        typed = (self.data.get(self.add_prefix("base_url")) or "").strip()
        if not re.match(r"https?://", typed, re.IGNORECASE):
            raise ValidationError(_("Include the scheme: http://… or https://…, e.g. http://10.0.0.5:8080/v1."))
        return self.cleaned_data["base_url"]

    def save(self, commit=True):
        if self.cleaned_data.get("clear_api_key"):
            self.instance.api_key = ""
        elif self.cleaned_data.get("new_api_key"):
            self.instance.api_key = self.cleaned_data["new_api_key"]
        if self.instance.pk and {"provider", "base_url", "model"} & set(self.changed_data):
            # Another model or server may count tokens its own way: what was learned is forgotten.
            for name, value in asdict(Calibration()).items():
                setattr(self.instance, name, value)
        return super().save(commit)


# The fields whose change is checked against the server on save (ModelConfigAdmin.save_model).
CONNECTION_FIELDS = {"provider", "base_url", "model", "new_api_key", "clear_api_key"}


@admin.register(ModelConfig)
class ModelConfigAdmin(JSONInputAdminMixin, WorkspaceScopedAdmin, admin.ModelAdmin):
    form = ModelConfigForm
    list_display = [
        "name",
        "provider",
        "model",
        "base_url",
        "stream",
        "stream_tools_unsupported",
        "context_window",
        "key_status",
        "updated_at",
    ]
    list_filter = ["purpose", "provider", "stream", "stream_tools_unsupported"]
    search_fields = ["name", "model", "base_url"]
    readonly_fields = ["key_status", "estimate_calibration"]
    fieldsets = [
        (
            None,
            {
                "fields": [
                    "name",
                    "purpose",
                    "provider",
                    "base_url",
                    "model",
                    "input_kinds",
                    "key_status",
                    "new_api_key",
                    "clear_api_key",
                ]
            },
        ),
        (
            _("Parameters"),
            {
                "description": _(
                    "Empty means the provider's default. A parameter the provider lacks is refused on save."
                ),
                "fields": [
                    "temperature",
                    "top_p",
                    "max_tokens",
                    "context_window",
                    "frequency_penalty",
                    "presence_penalty",
                    "seed",
                    "stop",
                    "response_format",
                    "response_schema",
                    "structured_output",
                    "thinking",
                    "thinking_budget_tokens",
                    "reasoning_effort",
                    "stream",
                    "stream_tools_unsupported",
                    "prompt_caching",
                    "extra_params",
                ],
            },
        ),
        (_("Timeouts and retries"), {"fields": ["connect_timeout_seconds", "read_timeout_seconds", "max_retries"]}),
        (
            _("Prices per million tokens"),
            {
                "fields": [
                    "price_input_per_million",
                    "price_cached_input_per_million",
                    "price_cache_write_per_million",
                    "price_output_per_million",
                    "price_audio_input_per_million",
                    "price_audio_per_minute",
                ]
            },
        ),
        (
            _("Token estimates"),
            {
                "description": _(
                    "When the server reports no usage for a call, its tokens are estimated, then scaled by "
                    "what this config's calls that did report usage showed: their reported tokens divided by "
                    "the estimate for the same text."
                ),
                "fields": ["estimate_calibration"],
            },
        ),
    ]

    def get_fieldsets(self, request, obj=None):
        # The stored key's status and its removal only mean something for a saved config that has one.
        fieldsets = super().get_fieldsets(request, obj)
        hidden = set() if obj is not None and obj.api_key else {"clear_api_key"}
        if obj is None:
            hidden.add("key_status")
        first, *rest = fieldsets
        name, options = first
        return [(name, {**options, "fields": [f for f in options["fields"] if f not in hidden]}), *rest]

    @admin.display(description=_("learned scaling"))
    def estimate_calibration(self, obj):
        calibration = Calibration.of(obj)
        if not calibration.calibration_calls:
            return _("Not learned yet: no call of this config has reported usage.")
        return ngettext(
            "prompt × %(prompt).2f, completion × %(completion).2f, from %(calls)d call that reported usage",
            "prompt × %(prompt).2f, completion × %(completion).2f, from %(calls)d calls that reported usage",
            calibration.calibration_calls,
        ) % {
            "prompt": calibration.prompt_ratio,
            "completion": calibration.completion_ratio,
            "calls": calibration.calibration_calls,
        }

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        # A new config, or a changed address, model, provider or key, is tried at once (one tiny
        # chat request, capped at SAVE_CHECK_TIMEOUT_SECONDS): a typo shows now, not in the first
        # run that fails. The save stands either way; "Test connection" on the page asks again.
        if change and not set(form.changed_data) & CONNECTION_FIELDS:
            return
        report = model_config_test(config=obj, list_models=False, chat_timeout=SAVE_CHECK_TIMEOUT_SECONDS)
        if report.ok:
            messages.success(
                request,
                _("Connection checked: %(model)s answered in %(ms)s ms.")
                % {"model": report.model, "ms": report.latency_ms},
            )
        else:
            messages.warning(
                request,
                _("Saved, but the connection check failed: %(error)s Test it again from the config's page.")
                % {"error": report.error},
            )

    @admin.display(description=_("stored key"))
    def key_status(self, obj):
        return _("set (%(masked)s)") % {"masked": mask(obj.api_key)} if obj.api_key else _("not set")

    def get_urls(self):
        test = path(
            "<path:object_id>/test-connection/",
            # POST only, with the admin's CSRF check: the test makes a request that may cost tokens.
            self.admin_site.admin_view(require_POST(self.test_connection_view)),
            name="agents_modelconfig_test_connection",
        )
        return [test, *super().get_urls()]

    def test_connection_view(self, request, object_id):
        """For those who may change the config: they could point it anywhere anyway, and the page
        shows no more of the server's answers than a failed run's error does."""
        config = self.get_object(request, unquote(object_id))
        if config is None:
            raise Http404(_("No such model config."))
        if not self.has_change_permission(request, config):
            raise PermissionDenied
        report = model_config_test(config=config)
        context = {
            **self.admin_site.each_context(request),
            "title": _("Test connection: %(name)s") % {"name": config.name},
            "opts": self.opts,
            "original": config,
            "report": report,
        }
        return TemplateResponse(request, "admin/agents/modelconfig/test_connection.html", context)


class AgentForm(forms.ModelForm):
    # Left empty (or absent from a form posted by a script), the default, as for a new agent.
    memory_shown = Agent._meta.get_field("memory_shown").formfield(required=False)

    audio_parts = Agent._meta.get_field("audio_parts").formfield(required=False)
    image_parts = Agent._meta.get_field("image_parts").formfield(required=False)
    file_parts = Agent._meta.get_field("file_parts").formfield(required=False)
    output_repair_turns = Agent._meta.get_field("output_repair_turns").formfield(required=False)

    def clean_memory_shown(self):
        shown = self.cleaned_data["memory_shown"]
        return Agent._meta.get_field("memory_shown").default if shown is None else shown

    def clean_output_repair_turns(self):
        turns = self.cleaned_data["output_repair_turns"]
        return Agent._meta.get_field("output_repair_turns").default if turns is None else turns

    def clean_audio_parts(self):
        return self.cleaned_data["audio_parts"] or AudioParts.REFUSE

    def clean_image_parts(self):
        return self.cleaned_data["image_parts"] or ImageParts.REFUSE

    def clean_file_parts(self):
        return self.cleaned_data["file_parts"] or FileParts.REFUSE

    def clean_memory_kinds(self):
        # An empty box is no kind named (every kind kept), not JSON null; Agent.clean checks the rest.
        kinds = self.cleaned_data["memory_kinds"]
        return [] if kinds is None else kinds

    class Meta:
        model = Agent
        fields = "__all__"

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("system_prompt"):
            try:
                system_prompt_check(
                    template=cleaned["system_prompt"],
                    time_zone=cleaned.get("time_zone") or "UTC",
                    agent_name=cleaned.get("name") or "",
                )
            except ValidationError as exc:
                self.add_error("system_prompt", exc)
        return cleaned


class AgentInlineFormSet(forms.BaseInlineFormSet):
    """An inline of the agent admin that knows the other inlines' formsets of its request
    (`request_formsets`, given by AgentAdmin.get_formsets_with_inlines), for checks that span
    them: a forced tool choice may name a tool link or a delegate."""

    request_formsets: list | None = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.request_formsets is not None:
            self.request_formsets.append(self)

    def sibling(self, formset_class: type) -> "AgentInlineFormSet | None":
        return next((f for f in self.request_formsets or () if isinstance(f, formset_class)), None)

    def kept_rows(self) -> list:
        """The rows this formset would leave saved, unsaved ones included: each valid form's
        instance (its fields set from the form), without the deleted rows and the blank extra ones."""
        self.is_valid()
        return [
            form.instance
            for form in self.forms
            if form.is_valid() and form.cleaned_data and not form.cleaned_data.get("DELETE")
        ]


class AgentToolFormSet(AgentInlineFormSet):
    def clean(self):
        super().clean()
        agent = self.instance
        if agent.tool_choice != "tool" or not agent.tool_choice_name:
            return
        # The names the engine takes (agents.snapshot.callable_tools), delegates included.
        delegates = self.sibling(AgentDelegateFormSet)
        if delegates is not None:
            delegate_rows = delegates.kept_rows()
        else:  # the delegates inline is not shown to this user: the saved ones count
            delegate_rows = AgentDelegate.objects.filter(parent=agent).select_related("child") if agent.pk else []
        if agent.tool_choice_name not in callable_tool_names(links=self.kept_rows(), delegates=delegate_rows):
            raise ValidationError(
                _("Tool choice names %(name)r, which is not among this agent's enabled tools.")
                % {"name": agent.tool_choice_name}
            )


# The agent page's inlines show one row per tool, delegate or rule: full-size text boxes in
# them made the page two screens wide.
COMPACT_INLINE_WIDGETS = {
    models.TextField: {"widget": forms.Textarea(attrs={"rows": 2, "cols": 24})},
    models.CharField: {"widget": forms.TextInput(attrs={"size": 14})},
}


class AgentToolInline(WorkspaceScopedInline, LabelledTabularInline):
    model = AgentTool
    formfield_overrides = COMPACT_INLINE_WIDGETS
    formset = AgentToolFormSet
    extra = 1
    autocomplete_fields = ["tool"]


class GuardrailRuleInline(WorkspaceScopedInline, admin.StackedInline):
    """Checks on the user's message and the model's answer; the model's clean() validates a
    pattern (compiles, bounded, not catastrophic) before it is saved. Stacked: eight fields in a
    row did not fit a laptop's screen."""

    model = GuardrailRule
    extra = 0
    fields = [("side", "kind", "action", "enabled"), "terms", "pattern", "model_config", "rubric"]


class RoutingRuleInline(WorkspaceScopedInline, admin.StackedInline):
    """Which model a run uses, by its user message (engine.routing): tried in order of position,
    the first that matches wins. The model configs offered are the workspace's chat ones (the
    field's limit_choices_to, then the scoped inline); RoutingRule.clean checks each condition's
    settings."""

    model = RoutingRule
    extra = 0
    fields = [
        ("position", "name", "condition", "enabled"),
        "model_config",
        ("length_unit", "length_over", "length_under"),
        "attachment_kind",
        "tiers",
        ("time_start", "time_end", "time_zone"),
        "classifier_model",
        "classifier_prompt",
        "labels",
    ]


class AgentDelegateFormSet(AgentInlineFormSet):
    def clean(self):
        super().clean()
        # Delegation never widens access (docs/delegation.md); the groups are those saved.
        agent = self.instance
        parent_groups = set(agent.allowed_groups.values_list("pk", flat=True)) if agent.pk else set()
        for form in self.forms:
            delegate = form.instance
            if not (form.is_valid() and form.cleaned_data) or form.cleaned_data.get("DELETE") or not delegate.enabled:
                continue
            child_groups = set(delegate.child.allowed_groups.values_list("pk", flat=True))
            problem = access_problem(parent_groups=parent_groups, child_groups=child_groups)
            if problem:
                form.add_error("child", problem)


class AgentDelegateInline(WorkspaceScopedInline, LabelledTabularInline):
    """Agents as tools: other agents this one may hand a task to (cycles and over-deep chains
    are refused by AgentDelegate.clean)."""

    model = AgentDelegate
    formset = AgentDelegateFormSet
    fk_name = "parent"
    formfield_overrides = COMPACT_INLINE_WIDGETS
    extra = 0
    autocomplete_fields = ["child"]
    fields = ["tool_name", "child", "description", "enabled"]


@admin.register(Agent)
class AgentAdmin(AgentReleaseAdminMixin, WorkspaceScopedAdmin, admin.ModelAdmin):
    form = AgentForm
    list_display = ["name", "slug", "model_config", "max_iterations", "is_active", "updated_at", "hub_link"]
    list_filter = ["is_active", "model_config"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}
    list_select_related = ["model_config"]
    filter_horizontal = ["allowed_groups"]
    inlines = [AgentToolInline, AgentDelegateInline, GuardrailRuleInline, RoutingRuleInline]
    fieldsets = [
        (
            None,
            {
                "fields": [
                    "name",
                    "slug",
                    "description",
                    "is_active",
                    "system_prompt",
                    "time_zone",
                    "language",
                    "model_config",
                    "fallback_model_config",
                ]
            },
        ),
        (
            _("Loop"),
            {
                "fields": [
                    "max_iterations",
                    "max_same_tool_streak",
                    "tool_choice",
                    "tool_choice_name",
                    "parallel_tool_calls",
                ]
            },
        ),
        (
            _("Context policy"),
            {"fields": ["context_max_turns", "context_tool_result_max_chars", "context_token_budget"]},
        ),
        (
            _("Answers in a schema"),
            {
                "description": _(
                    "A JSON Schema the final answer must match (docs/quality.md). An answer that does not is sent "
                    "back to the model with the errors, at most the repair turns; then the run ends with stop "
                    "reason schema_invalid."
                ),
                "fields": ["output_schema", "output_repair_turns"],
            },
        ),
        (
            _("Budgets"),
            {
                "description": _("Reaching a budget ends the run with stop reason budget (or timeout) and says why."),
                "fields": [
                    "run_token_budget",
                    "run_cost_budget",
                    "run_timeout_seconds",
                    "daily_token_budget",
                    "daily_cost_budget",
                ],
            },
        ),
        (
            _("Approvals"),
            {
                "description": _(
                    "An approval still pending after this time is escalated once: the webhooks marked as "
                    "escalation channels (chat groups, email addresses) are told, with a link to the approval's page."
                ),
                "fields": ["approval_escalate_after_minutes"],
            },
        ),
        (
            _("Reach"),
            {
                "description": _(
                    "Other ways in: an MCP client, another agent over A2A. Who may call the agent is decided by the "
                    "caller's API token, as on every way in."
                ),
                "fields": ["mcp_exposed", "a2a_exposed"],
            },
        ),
        (
            _("End users"),
            {
                "description": _(
                    "Limits for each end user of an application (the id it gives a conversation): over either, a "
                    "new message is refused with 429 and Retry-After. Empty: no limit."
                ),
                "fields": ["end_user_messages_per_minute", "end_user_tokens_per_day"],
            },
        ),
        (
            _("Retention"),
            {
                "description": _(
                    "Finished runs older than this are deleted daily with all their audit rows; each purge leaves "
                    "a tombstone (Run purges) naming who set the policy. Export what must be kept first."
                ),
                "fields": ["retention_days", "retention_set_by", "retention_set_at"],
            },
        ),
        (
            _("Guardrails"),
            {
                "description": _(
                    "The rules are listed below (Guardrail rules). Block ends the run with a fixed message, "
                    "redact replaces matches with a placeholder, flag lists the run for review."
                ),
                "fields": ["guardrail_redact_stored"],
            },
        ),
        (
            _("Memory"),
            {
                "description": _(
                    "Long-term memory of each end user across conversations: what is kept, how much a run is "
                    "shown, and for how long. The memories are listed under Long-term memory → Memories."
                ),
                "fields": [
                    "memory_enabled",
                    "memory_space",
                    "memory_kinds",
                    "memory_shown",
                    "memory_ttl_days",
                    "memory_embedding_model",
                    "memory_daily_tokens",
                ],
            },
        ),
        (
            _("Attachments the model does not take"),
            {
                "description": _(
                    "A part of a kind the model (and its fallback) does not take, per its input kinds: refused "
                    "with 400 when posted, or turned into text before the model is called. The text is kept "
                    "with the attachment and screened by the input guardrails like typed text."
                ),
                "fields": [
                    "audio_parts",
                    "transcription_model_config",
                    "image_parts",
                    "description_model_config",
                    "file_parts",
                ],
            },
        ),
    ]

    @admin.display(description=_("agent's page"))
    def hub_link(self, obj):
        # By name: the page is the console's, which this app does not import.
        return format_html(
            '<a href="{}" class="agent-hub-link">{}</a>', reverse("monitoring:agent", args=[obj.slug]), _("Open")
        )

    def get_formsets_with_inlines(self, request, obj=None):
        # This request's inline formsets, each told of the others (AgentInlineFormSet).
        formsets = []
        for formset, inline in super().get_formsets_with_inlines(request, obj):
            if issubclass(formset, AgentInlineFormSet):
                formset = type(formset.__name__, (formset,), {"request_formsets": formsets})
            yield formset, inline

    def get_readonly_fields(self, request, obj=None):
        # A retention policy deletes runs: setting it takes the power to delete them.
        readonly = [*super().get_readonly_fields(request, obj), "retention_set_by", "retention_set_at"]
        if not request.user.has_perm(RETENTION_PERMISSION):
            readonly.append("retention_days")
        return readonly

    def save_model(self, request, obj, form, change):
        # Who set the policy is recorded on the agent and copied into every purge's tombstone.
        if "retention_days" in form.changed_data:
            obj.retention_set_by = request.user
            obj.retention_set_at = timezone.now()
        if change:
            # The release columns are written only by agents.releases: saving the draft must not
            # put back what this request read if a publish landed meanwhile.
            obj.save(update_fields=[f.name for f in Agent._meta.concrete_fields if f.name not in RELEASE_FIELDS])
        else:
            super().save_model(request, obj, form, change)


@admin.register(AgentVersion)
class AgentVersionAdmin(ReadOnlyAdminMixin, WorkspaceScopedAdmin, admin.ModelAdmin):
    # Playground versions (the runs of the prompt playground point at them) are listed marked
    # as such, so a run's version can always be opened, never mistaken for a numbered one.
    list_display = ["agent_link", "number", "playground", "config_hash", "created_at", "published_at", "published_by"]
    agent_link = agent_column()
    list_filter = ["agent", "playground"]
    list_select_related = ["agent", "published_by"]
    readonly_fields = [
        "agent",
        "number",
        "playground",
        "config_hash",
        "snapshot",
        "created_at",
        "published_at",
        "published_by",
        "note",
    ]


@admin.register(AgentRelease)
class AgentReleaseAdmin(ReadOnlyAdminMixin, WorkspaceScopedAdmin, admin.ModelAdmin):
    """The audit trail of release actions: written only by agents.releases, never edited."""

    list_display = ["at", "agent_link", "action", "version_number", "previous_number", "canary_percent", "user", "note"]
    agent_link = agent_column()
    list_filter = ["action", "agent"]
    list_select_related = ["agent", "user"]
    search_fields = ["agent__name", "agent__slug", "note"]
    date_hierarchy = "at"
    readonly_fields = ["agent", "action", "version", "previous_version", "canary_percent", "user", "note", "at"]

    def get_queryset(self, request):
        # The versions' numbers only: their snapshots are large and the list shows none of them.
        return (
            super()
            .get_queryset(request)
            .annotate(version_no=F("version__number"), previous_no=F("previous_version__number"))
        )

    @admin.display(description=_("version"), ordering="version_no")
    def version_number(self, obj):
        return obj.version_no

    @admin.display(description=_("previous version"), ordering="previous_no")
    def previous_number(self, obj):
        return obj.previous_no


@admin.register(AgentUsageDay)
class AgentUsageDayAdmin(ReadOnlyAdminMixin, WorkspaceScopedAdmin, admin.ModelAdmin):
    list_display = ["agent_link", "day", "shard", "total_tokens", "cost", "calls"]
    agent_link = agent_column()
    list_filter = ["agent"]
    list_select_related = ["agent"]
    date_hierarchy = "day"
