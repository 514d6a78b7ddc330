import uuid

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import ValidationError
from django.db.models import Exists, F, OuterRef, Q
from django.db.models.functions import Substr
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from agents.page_links import agent_column
from console.approvals.diff import arguments_diff
from console.end_user_filters import EndUserFilter, HasEndUserFilter, RunEndUserFilter, end_user_link
from console.export_actions import export_runs_csv, export_runs_jsonl, user_may_export
from console.feedback_admin import ForgetEndUserMixin
from console.formatting import plain_amount, short_id_html
from console.monitoring.admin_actions import cancel_runs, requeue_runs, retry_runs
from console.monitoring.presenters import approval_edit, duration_text
from console.run_changelist import (
    CappedPaginator,
    RunChangeList,
    action_checkbox_html,
    choice_label,
    count_cap,
)
from console.run_list_filters import CostFilter, DurationFilter, MetaFilter, SourceFilter, TagFilter, VersionFilter
from conversations.models import (
    ApiToken,
    Approval,
    Conversation,
    GuardrailTrigger,
    LLMCall,
    Message,
    Run,
    RunEvent,
    RunPurge,
    RunStatus,
    RunTrigger,
    StopReason,
    ToolInvocation,
)
from conversations.permissions import user_may_decide
from conversations.selectors import agent_config_visible_to, run_timeline
from conversations.tokens import TokenGrantRefused, api_token_create, api_token_grant_check
from engine.approvals import ApprovalError, approval_decide
from engine.operations import user_may_operate
from knowledge.models import KnowledgeSearch
from notifications import chat_formats
from notifications.deliveries import webhook_redeliver
from notifications.models import Webhook, WebhookAttempt, WebhookDelivery
from platform_site.admin_mixins import ReadOnlyAdminMixin, ReadOnlyInline, json_html
from platform_site.crypto import mask
from platform_site.signatures import webhook_secret_generate
from tools.arguments import arguments_hash
from workspaces.admin_scope import WorkspaceScopedAdmin, WorkspaceScopedInline, chooses_workspace
from workspaces.defaults import default_workspace_id
from workspaces.models import Workspace
from workspaces.roles import Scope

# The admin is the operators' home: it carries the product's name, and its index and header
# link to the operator pages (templates/admin/base_site.html, admin/agentry_index.html).
admin.site.site_header = gettext_lazy("Agentry")
admin.site.site_title = gettext_lazy("Agentry")
admin.site.index_title = gettext_lazy("Operations")
admin.site.index_template = "admin/agentry_index.html"
# No model list down the left of every page: on a laptop's screen it and a changelist's filters
# left the table two thirds of the width, and the header, breadcrumbs and index lead everywhere.
admin.site.enable_nav_sidebar = False

QUESTION_CHARS = 80


def estimated_mark(usage_estimated: bool) -> str:
    """A mark only where the token counts were estimated: a red ✖ on every other row of a list
    read as an error."""
    if not usage_estimated:
        return ""
    return format_html('<span title="{}">≈</span>', _("tokens estimated: a model server reported no usage"))


class MessageInline(WorkspaceScopedInline, ReadOnlyInline):
    model = Message
    fields = ["order", "role", "content", "tool_calls", "tool_call_id", "name", "run"]
    readonly_fields = fields


def thread_link(conversation_id):
    """The conversation's short id, opening its thread view (every run as one chat)."""
    return format_html(
        '<a href="{}" class="thread-link" title="{}">{}</a>',
        reverse("monitoring:conversation", args=[conversation_id]),
        _("the conversation as one thread"),
        short_id_html(conversation_id),
    )


@admin.register(Conversation)
class ConversationAdmin(ForgetEndUserMixin, ReadOnlyAdminMixin, WorkspaceScopedAdmin, admin.ModelAdmin):
    list_display = [
        "short_id",
        "thread",
        "agent_link",
        "owner",
        "end_user_column",
        "title",
        "message_count",
        "created_at",
    ]
    agent_link = agent_column()
    list_filter = ["agent", HasEndUserFilter, EndUserFilter]
    list_select_related = ["agent", "owner"]
    search_fields = ["id", "title", "end_user__exact"]
    readonly_fields = ["thread"]
    inlines = [MessageInline]

    @admin.display(description=gettext_lazy("thread"))
    def thread(self, obj):
        return format_html(
            '<a href="{}" class="thread-link">{}</a>', reverse("monitoring:conversation", args=[obj.pk]), _("thread")
        )

    @admin.display(description=gettext_lazy("conversation"), ordering="id")
    def short_id(self, obj):
        return short_id_html(obj.pk)

    @admin.display(description=gettext_lazy("end user"), ordering="end_user")
    def end_user_column(self, obj):
        return end_user_link(obj.end_user)


class HasErrorFilter(admin.SimpleListFilter):
    title = gettext_lazy("has error")
    parameter_name = "has_error"

    def lookups(self, request, model_admin):
        return [("yes", _("yes")), ("no", _("no"))]

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.exclude(error="")
        if self.value() == "no":
            return queryset.filter(error="")
        return queryset


class ForkFilter(admin.SimpleListFilter):
    """Forks (engine.forks) are investigations, not traffic: shown apart, or left out."""

    title = gettext_lazy("forks")
    parameter_name = "fork"

    def lookups(self, request, model_admin):
        return [("yes", _("forks only")), ("no", _("no forks"))]

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.filter(forked_from__isnull=False)
        if self.value() == "no":
            return queryset.filter(forked_from__isnull=True)
        return queryset


class GuardrailFilter(admin.SimpleListFilter):
    """Runs a guardrail matched on; "flagged" is the review list (the operator pages link to it)."""

    title = gettext_lazy("guardrails")
    parameter_name = "guardrail"

    def lookups(self, request, model_admin):
        return [
            (GuardrailTrigger.Action.FLAG, _("flagged for review")),
            (GuardrailTrigger.Action.BLOCK, _("blocked")),
            (GuardrailTrigger.Action.REDACT, _("redacted")),
            ("any", _("any trigger")),
        ]

    def queryset(self, request, queryset):
        if self.value() is None:
            return queryset
        if self.value() not in {key for key, _label in self.lookup_choices}:
            # The admin answers an unknown filter value as it does any bad lookup (?e=1).
            raise IncorrectLookupParameters(f"unknown guardrail filter {self.value()!r}")
        triggers = GuardrailTrigger.objects.filter(run=OuterRef("pk"))
        if self.value() != "any":
            triggers = triggers.filter(action=self.value())
        return queryset.filter(Exists(triggers))


class GuardrailTriggerInline(WorkspaceScopedInline, ReadOnlyInline):
    model = GuardrailTrigger
    fields = ["side", "kind", "rule_id", "action", "matched", "count", "samples", "created_at"]
    readonly_fields = fields
    show_change_link = False


class RunEventInline(WorkspaceScopedInline, ReadOnlyInline):
    model = RunEvent
    fields = ["seq", "type", "payload", "created_at"]
    readonly_fields = fields
    show_change_link = False


class KnowledgeSearchInline(WorkspaceScopedInline, ReadOnlyInline):
    """The run's knowledge searches: what it looked up and which passages it was given."""

    model = KnowledgeSearch
    fields = ["tool_call_id", "base", "query", "passages", "fallback", "created_at"]
    readonly_fields = fields
    show_change_link = False


@admin.register(Run)
class RunAdmin(ReadOnlyAdminMixin, WorkspaceScopedAdmin, admin.ModelAdmin):
    list_display = [
        "short_id",
        "question",
        "agent_link",
        "conversation_column",
        "end_user_column",
        "version",
        "status_text",
        "trigger_text",
        "tokens",
        "estimated",
        "cost_text",
        "created",
        "duration",
    ]
    list_filter = [
        "status",
        "stop_reason",
        "trigger",
        SourceFilter,
        "agent",
        VersionFilter,
        TagFilter,
        MetaFilter,
        CostFilter,
        DurationFilter,
        HasErrorFilter,
        GuardrailFilter,
        ForkFilter,
        RunEndUserFilter,
    ]
    list_select_related = ["agent"]
    agent_link = agent_column()
    # Searched by exact values only (get_search_results): a run id, a conversation id, an end user.
    search_fields = ["id", "conversation__id", "conversation__end_user"]
    search_help_text = gettext_lazy(
        "A run's id, a conversation's id (its whole id) or an end user's id. Question text is not searched."
    )
    raw_id_fields = ["conversation", "agent_version", "parent_run", "parent_tool_invocation", "forked_from"]
    show_full_result_count = False
    date_hierarchy = "created_at"
    readonly_fields = ["timeline", "timeline_without_requests"]
    fieldsets = [
        (
            None,
            {
                "fields": [
                    "conversation",
                    "agent",
                    "agent_version",
                    "status",
                    "stop_reason",
                    "trigger",
                    "tags",
                    "metadata",
                    "error",
                    "cancel_requested",
                ]
            },
        ),
        (
            gettext_lazy("Totals"),
            {
                "fields": [
                    "iterations",
                    "prompt_tokens",
                    "completion_tokens",
                    "cached_tokens",
                    "reasoning_tokens",
                    "total_tokens",
                    "usage_estimated",
                    "cost",
                ]
            },
        ),
        (
            gettext_lazy("Timing and lease"),
            {
                "fields": [
                    "created_at",
                    "started_at",
                    "finished_at",
                    "lease_owner",
                    "lease_expires_at",
                    "claims",
                    "recoveries",
                ]
            },
        ),
        (
            gettext_lazy("Agents as tools"),
            {"fields": ["parent_run", "parent_tool_invocation", "depth", "children_tokens", "children_cost"]},
        ),
        (gettext_lazy("Fork"), {"fields": ["forked_from", "fork_step", "fork_change"]}),
        # Answers in a schema (docs/quality.md): a request's own schema, and the answer parsed.
        (gettext_lazy("Answer in a schema"), {"fields": ["output_schema", "output_parsed"]}),
        (gettext_lazy("Timeline"), {"fields": ["timeline"]}),
    ]
    inlines = [GuardrailTriggerInline, RunEventInline, KnowledgeSearchInline]
    actions = [cancel_runs, requeue_runs, retry_runs, export_runs_jsonl, export_runs_csv]

    def has_operate_permission(self, request):
        return user_may_operate(request.user)

    def has_export_permission(self, request):
        return user_may_export(request.user)

    def get_changelist(self, request, **kwargs):
        return RunChangeList

    def get_paginator(self, request, queryset, per_page, orphans=0, allow_empty_first_page=True):
        # A bounded count (console.run_changelist): an exact one read the whole ledger.
        return CappedPaginator(queryset, per_page, orphans, allow_empty_first_page, cap=count_cap(request, per_page))

    def page_rows(self, rows):
        # The question and the version number come with the page's one query, without loading
        # whole messages or version snapshots; only the page's rows join their tables
        # (RunChangeList), not the count and the date hierarchy's bounds.
        return rows.annotate(
            question_start=Substr("request__content", 1, QUESTION_CHARS + 1),
            version_number=F("agent_version__number"),
            end_user=F("conversation__end_user"),
        )

    @admin.display(description=gettext_lazy("end user"), ordering="conversation__end_user")
    def end_user_column(self, obj):
        return end_user_link(getattr(obj, "end_user", ""))

    @admin.display(description=gettext_lazy("conversation"))
    def conversation_column(self, obj):
        return thread_link(obj.conversation_id)

    def get_search_results(self, request, queryset, search_term):
        """Exact matches only, each by an index: a whole id as the run's or its conversation's
        (primary key, run_conversation_idx), any other text as an end user's id
        (conversation_end_user_idx). A LIKE over ids or question text would read every run of
        the ledger (10 million rows at the scale benchmark) for each search."""
        term = search_term.strip()
        if not term:
            return queryset, False
        try:
            key = uuid.UUID(term)
        except ValueError:
            return queryset.filter(conversation__end_user=term), False
        return queryset.filter(Q(pk=key) | Q(conversation_id=key)), False

    @admin.display(description=gettext_lazy("run"), ordering="id")
    def short_id(self, obj):
        return short_id_html(obj.pk)

    @admin.display(description=gettext_lazy("question (opens the timeline)"))
    def question(self, obj):
        text = getattr(obj, "question_start", None) or ""
        text = text[:QUESTION_CHARS] + "…" if len(text) > QUESTION_CHARS else text
        return format_html(
            '<a href="{}" class="timeline-link">{}</a>', reverse("monitoring:run", args=[obj.pk]), text or _("timeline")
        )

    @admin.display(description=gettext_lazy("version"), ordering="agent_version__number")
    def version(self, obj):
        # A playground version is numbered 0 (agents.playground): named, never shown as "v0".
        number = getattr(obj, "version_number", None)
        return _("playground") if number == 0 else number

    def action_checkbox(self, obj):
        return action_checkbox_html(obj)

    @admin.display(description=gettext_lazy("status"), ordering="status")
    def status_text(self, obj):
        status = choice_label(RunStatus, obj.status)
        if obj.stop_reason and obj.stop_reason != obj.status:
            return f"{status} ({choice_label(StopReason, obj.stop_reason).lower()})"
        return status

    @admin.display(description=gettext_lazy("trigger"), ordering="trigger")
    def trigger_text(self, obj):
        return choice_label(RunTrigger, obj.trigger)

    @admin.display(description=gettext_lazy("tokens"), ordering="total_tokens")
    def tokens(self, obj):
        return obj.total_tokens

    @admin.display(description=gettext_lazy("est."), empty_value="")
    def estimated(self, obj):
        return estimated_mark(obj.usage_estimated)

    @admin.display(description=gettext_lazy("created"), ordering="created_at")
    def created(self, obj):
        # Month, day and minute keep the column narrow; the whole time is in the tooltip.
        at = timezone.localtime(obj.created_at)
        return format_html('<span title="{}">{}</span>', f"{at:%Y-%m-%d %H:%M:%S}", f"{at:%m-%d %H:%M}")

    @admin.display(description=gettext_lazy("cost"), ordering="cost")
    def cost_text(self, obj):
        return plain_amount(obj.cost)

    @admin.display(description=gettext_lazy("duration"))
    def duration(self, obj):
        return duration_text(obj.duration_ms)

    def get_fieldsets(self, request, obj=None):
        fieldsets = super().get_fieldsets(request, obj)
        if agent_config_visible_to(user=request.user):
            return fieldsets
        # A model call's request holds the agent's system prompt: only for those who may read
        # agents' configuration (the export's rule).
        hidden = {"timeline": "timeline_without_requests"}
        return [
            (name, {**options, "fields": [hidden.get(field, field) for field in options["fields"]]})
            for name, options in fieldsets
        ]

    @admin.display(description=gettext_lazy("Steps in order"))
    def timeline(self, obj):
        return self._timeline(obj, requests=True)

    @admin.display(description=gettext_lazy("Steps in order"))
    def timeline_without_requests(self, obj):
        return self._timeline(obj, requests=False)

    def _timeline(self, obj, *, requests: bool):
        steps = run_timeline(run=obj)
        for step in steps:
            if step["kind"] == "tool_invocation":
                invocation = step["obj"]
                approval = getattr(invocation, "approval", None)
                step["edit"] = approval_edit(
                    original=invocation.arguments,
                    approved=approval.arguments if approval else None,
                    approved_by=approval.decided_by.get_username() if approval and approval.decided_by else "",
                )
        return render_to_string("admin/conversations/run_timeline.html", {"steps": steps, "requests": requests})


@admin.register(LLMCall)
class LLMCallAdmin(ReadOnlyAdminMixin, WorkspaceScopedAdmin, admin.ModelAdmin):
    list_display = [
        "id",
        "run",
        "iteration",
        "attempt",
        "purpose",
        "copied",
        "model_name",
        "status",
        "http_status",
        "total_tokens",
        "estimated",
        "latency_ms",
        "started_at",
    ]
    list_filter = ["status", "purpose", "copied", "model_config", "usage_estimated"]
    raw_id_fields = ["run"]
    search_fields = ["run__id"]
    show_full_result_count = False

    def lookup_allowed(self, lookup, value, request=None):
        # The agent's page links its model calls (console.agent_hub): one agent's, by id.
        return lookup == "run__agent__id__exact" or super().lookup_allowed(lookup, value, request)

    def get_fields(self, request, obj=None):
        fields = super().get_fields(request, obj)
        # The request holds the agent's rendered system prompt: the export's rule (only for
        # those who may read agents' configuration).
        return fields if agent_config_visible_to(user=request.user) else [f for f in fields if f != "request"]

    @admin.display(description=gettext_lazy("est."), empty_value="")
    def estimated(self, obj):
        return estimated_mark(obj.usage_estimated)


@admin.register(ToolInvocation)
class ToolInvocationAdmin(ReadOnlyAdminMixin, WorkspaceScopedAdmin, admin.ModelAdmin):
    list_display = ["id", "run", "tool_name", "status", "simulated", "copied", "truncated", "latency_ms", "created_at"]
    list_filter = ["status", "simulated", "copied", "tool_name"]
    raw_id_fields = ["run", "llm_call"]
    search_fields = ["run__id", "tool_call_id", "tool_name"]
    show_full_result_count = False


@admin.register(Approval)
class ApprovalAdmin(ReadOnlyAdminMixin, WorkspaceScopedAdmin, admin.ModelAdmin):
    """Audit rows, read-only; approvers may still decide pending ones with the two actions."""

    list_display = [
        "id",
        "tool",
        "agent_link",
        "status",
        "kind",
        "edited",
        "decided_by",
        "decided_at",
        "channel",
        "created_at",
        "expires_at",
    ]
    list_filter = ["status", "kind", "channel", ("invocation__tool_name", admin.AllValuesFieldListFilter), "run__agent"]
    list_select_related = ["invocation", "run__agent", "decided_by"]
    search_fields = ["run__id", "tool_call_id", "invocation__tool_name"]
    raw_id_fields = ["run", "invocation"]
    show_full_result_count = False
    actions = ["approve_selected", "reject_selected"]
    fields = [
        "run",
        "invocation",
        "tool_call_id",
        "status",
        "kind",
        "request_reason",
        "original_arguments",
        "arguments",
        "arguments_diff",
        "arguments_hash",
        "decided_by",
        "decided_at",
        "channel",
        "reason",
        "expires_at",
        "created_at",
    ]
    readonly_fields = fields

    @admin.display(description=gettext_lazy("tool"), ordering="invocation__tool_name")
    def tool(self, obj):
        return obj.invocation.tool_name

    agent_link = agent_column("run__agent")

    @admin.display(description=gettext_lazy("edited"), boolean=True)
    def edited(self, obj):
        return obj.arguments_hash != arguments_hash(obj.invocation.arguments or {})

    @admin.display(description=gettext_lazy("original arguments (from the model)"))
    def original_arguments(self, obj):
        return json_html(obj.invocation.arguments)

    @admin.display(description=gettext_lazy("difference"))
    def arguments_diff(self, obj):
        if not self.edited(obj):
            return "–"
        return render_to_string(
            "approvals/_diff.html", {"diff": arguments_diff(obj.invocation.arguments or {}, obj.arguments)}
        )

    def has_decide_permission(self, request):
        return user_may_decide(request.user)

    def _decide(self, request, queryset, **decision):
        done, refused = 0, []
        for approval in queryset.filter(status=Approval.Status.PENDING).order_by("pk"):
            try:
                approval_decide(approval_id=approval.pk, user=request.user, channel=Approval.Channel.ADMIN, **decision)
                done += 1
            except ApprovalError as exc:
                refused.append(f"#{approval.pk}: {exc}")
        skipped = queryset.exclude(status=Approval.Status.PENDING).count()
        self.message_user(
            request,
            _("%(done)s decided, %(skipped)s skipped (not pending).") % {"done": done, "skipped": skipped},
            messages.SUCCESS,
        )
        for line in refused:
            self.message_user(request, line, messages.ERROR)

    @admin.action(description=gettext_lazy("Approve selected pending approvals"), permissions=["decide"])
    def approve_selected(self, request, queryset):
        self._decide(request, queryset, decision="approve")

    @admin.action(description=gettext_lazy("Reject selected pending approvals…"), permissions=["decide"])
    def reject_selected(self, request, queryset):
        reason = request.POST.get("reason", "").strip()
        if "apply" in request.POST and reason:
            self._decide(request, queryset, decision="reject", reason=reason)
            return None
        # First pass: ask for the reason the model will read.
        return TemplateResponse(
            request,
            "admin/conversations/approval/reject.html",
            {
                **self.admin_site.each_context(request),
                "title": _("Reject approvals"),
                "approvals": queryset,
                "opts": self.model._meta,
                "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
                "missing_reason": "apply" in request.POST,
            },
        )


@admin.register(RunEvent)
class RunEventAdmin(ReadOnlyAdminMixin, WorkspaceScopedAdmin, admin.ModelAdmin):
    list_display = ["id", "run", "seq", "type", "created_at"]
    list_filter = ["type"]
    raw_id_fields = ["run"]
    search_fields = ["run__id"]
    show_full_result_count = False


class ApiTokenForm(forms.ModelForm):
    """A new token is refused unless `creator` may mint it (conversations.tokens's one rule, the
    command's too): a token whose user is not a member of its workspace would open nothing."""

    creator = None  # the signed-in person (ApiTokenAdmin.get_form)

    def clean(self):
        cleaned = super().clean()
        if self.instance.pk is not None or self.creator is None:
            return cleaned
        # The workspace the person acts in (set on the instance), a superuser's choice, or the first.
        workspace = cleaned.get("workspace") or (self.instance.workspace if self.instance.workspace_id else None)
        try:
            api_token_grant_check(
                creator=self.creator,
                user=cleaned.get("user") or self.creator,
                workspace=workspace or Workspace.objects.get(pk=default_workspace_id()),
                role=cleaned.get("role", ""),
                scopes=cleaned.get("scopes") or [],
            )
        except TokenGrantRefused as exc:
            raise ValidationError(str(exc)) from None
        return cleaned


@admin.register(ApiToken)
class ApiTokenAdmin(WorkspaceScopedAdmin, admin.ModelAdmin):
    """A token acts as its user, so only a superuser may mint one, or reopen a revoked one, for
    someone else; anyone else manages their own tokens."""

    form = ApiTokenForm

    list_display = ["name", "user", "role", "prefix", "is_active", "created_at", "last_used_at"]
    list_filter = ["is_active", "role"]
    list_select_related = ["user"]
    search_fields = ["name", "user__username", "prefix"]
    raw_id_fields = ["user"]
    readonly_fields = ["prefix", "created_at", "last_used_at"]

    def get_fields(self, request, obj=None):
        # The secret is generated on save; afterwards a token can only be renamed or revoked: what
        # it may do (its workspace, role and scopes) is chosen once, at creation.
        if obj is None:
            fields = ["user", "name"] if request.user.is_superuser else ["name"]
            fields += ["role", "scopes"]
            return ["workspace", *fields] if chooses_workspace(request) else fields
        return ["user", "name", "workspace", "role", "scopes", "prefix", "is_active", "created_at", "last_used_at"]

    def get_readonly_fields(self, request, obj=None):
        return self.readonly_fields + (["user", "workspace", "role", "scopes"] if obj else [])

    def get_form(self, request, obj=None, **kwargs):
        form = super().get_form(request, obj, **kwargs)
        return type(form.__name__, (form,), {"creator": request.user})

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        if db_field.name == "scopes":
            # Ticked from the known scopes (the model's validator checks them again).
            return forms.TypedMultipleChoiceField(
                choices=Scope.choices,
                required=False,
                widget=forms.CheckboxSelectMultiple,
                label=db_field.verbose_name,
                help_text=_("None ticked: everything the role allows."),
            )
        return super().formfield_for_dbfield(db_field, request, **kwargs)

    def has_change_permission(self, request, obj=None):
        if obj is not None and obj.user_id != request.user.pk and not request.user.is_superuser:
            return False
        return super().has_change_permission(request, obj)

    def save_model(self, request, obj, form, change):
        if change:
            return super().save_model(request, obj, form, change)
        user = obj.user if request.user.is_superuser else request.user
        token, plaintext = api_token_create(
            user=user,
            name=obj.name,
            workspace=obj.workspace if obj.workspace_id is not None else None,
            role=obj.role,
            scopes=obj.scopes,
        )
        obj.pk, obj.user, obj.prefix, obj.key_hash = token.pk, user, token.prefix, token.key_hash
        self.message_user(
            request,
            _("Token created. Copy it now; it will not be shown again: %(token)s") % {"token": plaintext},
            messages.WARNING,
        )


# Which formats use which secret: Agentry's signs its JSON with the webhook's own secret; of the
# chat apps only Feishu/Lark and DingTalk bots check a signature. The form shows each secret's
# fields for those formats alone (WebhookAdmin.get_fieldsets, and webhook_form.js on a change).
SECRET_FORMATS = {
    "secret": (Webhook.Format.AGENTRY,),
    "bot_secret": (Webhook.Format.FEISHU, Webhook.Format.DINGTALK),
}


class WebhookForm(forms.ModelForm):
    # The stored secret is never sent to the browser; typing a new one replaces it.
    new_secret = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        label=gettext_lazy("Secret"),
        help_text=gettext_lazy(
            "Leave empty to keep the current secret (a new webhook gets a generated one, shown once)."
        ),
    )
    # The same for a chat bot's signing secret, which the chat app shows when signing is on.
    new_bot_secret = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        label=gettext_lazy("Bot signing secret"),
        help_text=gettext_lazy(
            "Feishu/Lark and DingTalk: the secret shown where the bot's signature check is switched on. "
            "Leave empty to keep the current one."
        ),
    )
    clear_bot_secret = forms.BooleanField(
        required=False,
        label=gettext_lazy("Remove the bot signing secret"),
        help_text=gettext_lazy("Messages are then sent unsigned."),
    )
    # Not required here: the email format has none (Webhook.clean asks every other format for one).
    url = forms.URLField(
        max_length=500,
        required=False,
        assume_scheme="https",
        help_text=gettext_lazy(
            "A chat app's URL must be on its host: <code>open.feishu.cn</code> or <code>open.larksuite.com</code>, "
            "<code>oapi.dingtalk.com</code>, <code>qyapi.weixin.qq.com</code>, <code>hooks.slack.com</code> "
            "(another host only if it is in AGENTRY_WEBHOOK_ALLOWLIST)."
        ),
    )

    class Meta:
        model = Webhook
        exclude = ["secret", "bot_secret"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # A form posted without a format (as before formats existed) keeps Agentry's.
        if "format" in self.fields:  # absent for someone who may only view the webhook
            self.fields["format"].required = False

    def clean_format(self):
        return self.cleaned_data.get("format") or Webhook.Format.AGENTRY

    def clean(self):
        cleaned = super().clean()
        fmt, url = cleaned.get("format"), cleaned.get("url")
        if fmt and fmt not in (Webhook.Format.AGENTRY, Webhook.Format.EMAIL) and url:
            if not chat_formats.host_allowed(fmt=fmt, url=url, allowlist=settings.AGENTRY_WEBHOOK_ALLOWLIST):
                hosts = ", ".join(chat_formats.SERVICE_HOSTS[fmt])
                self.add_error(
                    "url",
                    _(
                        "A %(format)s webhook must post over https to %(hosts)s, "
                        "or to a host in AGENTRY_WEBHOOK_ALLOWLIST."
                    )
                    % {"format": Webhook.Format(fmt).label, "hosts": hosts},
                )
        if cleaned.get("new_bot_secret") and fmt not in SECRET_FORMATS["bot_secret"]:
            self.add_error("new_bot_secret", _("Only Feishu/Lark and DingTalk bots sign their messages."))
        if cleaned.get("new_secret") and fmt not in SECRET_FORMATS["secret"]:
            self.add_error("new_secret", _("Only webhooks in Agentry's format are signed with this secret."))
        return cleaned


class WebhookAttemptInline(WorkspaceScopedInline, ReadOnlyInline):
    model = WebhookAttempt
    fields = ["number", "http_status", "error", "will_retry", "duration_ms", "response_body", "created_at"]
    readonly_fields = fields
    show_change_link = False


@admin.register(Webhook)
class WebhookAdmin(WorkspaceScopedAdmin, admin.ModelAdmin):
    form = WebhookForm
    list_display = [
        "target",
        "format",
        "agent_link",
        "conversation",
        "is_active",
        "receives_alerts",
        "escalation",
        "secret_status",
        "created_at",
    ]
    list_filter = ["format", "is_active", "receives_alerts", "escalation", "agent"]
    list_select_related = ["agent"]
    agent_link = agent_column()
    raw_id_fields = ["conversation"]
    readonly_fields = ["secret_status"]

    class Media:
        js = ["console/webhook_form.js"]

    def get_fieldsets(self, request, obj=None):
        """The secrets in fieldsets of their own, hidden for a format that does not use them
        (the format posted, else the webhook's); the page's script follows a change of format."""
        fmt = request.POST.get("format") if request.method == "POST" else None
        fmt = fmt or (obj.format if obj else Webhook.Format.AGENTRY)

        def classes(secret: str) -> list[str]:
            # "webhook-secret formats-feishu formats-dingtalk", and "hidden" for another format.
            formats = SECRET_FORMATS[secret]
            return ["webhook-secret", *(f"formats-{f}" for f in formats), *([] if fmt in formats else ["hidden"])]

        main = ["agent", "conversation", "format", "url", "email_to", "is_active", "receives_alerts", "escalation"]
        return [
            (None, {"fields": main}),
            (
                gettext_lazy("Agentry signature"),
                {"fields": ["new_secret", "secret_status"], "classes": classes("secret")},
            ),
            (
                gettext_lazy("Chat bot signature"),
                {"fields": ["new_bot_secret", "clear_bot_secret"], "classes": classes("bot_secret")},
            ),
        ]

    @admin.display(description=gettext_lazy("URL or addresses"))
    def target(self, obj):
        return obj.target

    @admin.display(description=gettext_lazy("secret"))
    def secret_status(self, obj):
        return mask(obj.secret) if obj.pk else "-"

    def save_model(self, request, obj, form, change):
        if form.cleaned_data.get("clear_bot_secret"):
            obj.bot_secret = ""
        elif form.cleaned_data.get("new_bot_secret"):
            obj.bot_secret = form.cleaned_data["new_bot_secret"]
        typed = form.cleaned_data.get("new_secret")
        signs = obj.format in SECRET_FORMATS["secret"]
        if typed:
            obj.secret = typed
        elif not change or (signs and "format" in form.changed_data):
            # Every webhook has a secret (a chat webhook switched to Agentry's format later needs
            # one); it is shown once to whoever configures a webhook that signs with it.
            obj.secret = webhook_secret_generate()
        if signs and not typed and (not change or "format" in form.changed_data):
            self.message_user(
                request,
                _("Webhook secret, copy it now; it will not be shown again: %(secret)s") % {"secret": obj.secret},
                messages.WARNING,
            )
        super().save_model(request, obj, form, change)


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyAdminMixin, WorkspaceScopedAdmin, admin.ModelAdmin):
    list_display = ["short_id", "event_type", "webhook", "status", "attempts", "created_at", "finished_at"]
    list_filter = ["status", "event_type"]
    list_select_related = ["webhook"]
    search_fields = ["id", "run_event__run__id"]
    raw_id_fields = ["webhook", "run_event"]
    show_full_result_count = False
    inlines = [WebhookAttemptInline]
    actions = ["redeliver"]

    def has_redeliver_permission(self, request):
        # Sending an event again to where a webhook points is within the power to change the webhook.
        return request.user.has_perm("notifications.change_webhook")

    @admin.action(description=gettext_lazy("Redeliver the selected failed deliveries"), permissions=["redeliver"])
    def redeliver(self, request, queryset):
        count = webhook_redeliver(delivery_ids=list(queryset.values_list("pk", flat=True)))
        skipped = queryset.count() - count
        self.message_user(
            request,
            _("%(count)s failed deliveries queued for another attempt.") % {"count": count},
            messages.SUCCESS if count else messages.WARNING,
        )
        if skipped:
            self.message_user(
                request,
                _("%(count)s selected deliveries had not failed and were left as they are.") % {"count": skipped},
                messages.WARNING,
            )

    @admin.display(description=gettext_lazy("delivery"), ordering="id")
    def short_id(self, obj):
        return short_id_html(obj.pk)


@admin.register(RunPurge)
class RunPurgeAdmin(ReadOnlyAdminMixin, WorkspaceScopedAdmin, admin.ModelAdmin):
    """Tombstones of retention purges: what was removed, by whose policy. Never edited."""

    list_display = ["created_at", "agent_slug", "retention_days", "cutoff", "runs", "policy_set_by_username"]
    list_filter = ["agent_slug"]
    search_fields = ["agent_slug", "policy_set_by_username"]
    date_hierarchy = "created_at"
    fields = [
        "agent",
        "agent_slug",
        "retention_days",
        "cutoff",
        "counts",
        "policy_set_by",
        "policy_set_by_username",
        "policy_set_at",
        "created_at",
        "finished_at",
    ]
    readonly_fields = fields

    @admin.display(description=gettext_lazy("runs removed"))
    def runs(self, obj):
        return obj.counts.get("runs", 0)
