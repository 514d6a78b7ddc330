import json
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from agents.models import Agent, ModelConfig
from agents.page_links import agent_column
from agents.releases import DRAFT
from agents.selectors import agents_usable_by
from conversations.models import StopReason
from conversations.permissions import FORK_PERMISSION
from evals.jsonl import CaseLineInvalid, case_to_line
from evals.models import EvalCase, EvalResult, EvalRun, EvalSuite, OnlineEvaluator, OnlineScore, ReleaseGate
from evals.replays import DEFAULT_LIMIT, MAX_LIMIT, ReplayFilter, ReplayInvalid, replay_start
from evals.services import (
    EvalNotAllowed,
    VersionNotFound,
    eval_agent_check,
    eval_cases_import,
    eval_run_collect,
    eval_run_start,
    eval_version_resolve,
)
from platform_site.admin_mixins import JSONInputAdminMixin, ReadOnlyAdminMixin, ReadOnlyInline
from workspaces.access import binding_of, in_workspace
from workspaces.admin_scope import WorkspaceScopedAdmin, WorkspaceScopedInline
from workspaces.defaults import default_workspace_id


class EvalCaseInline(JSONInputAdminMixin, WorkspaceScopedInline, admin.StackedInline):
    model = EvalCase
    extra = 0


class CasesImportForm(forms.Form):
    suite = forms.CharField(
        max_length=100,
        label=gettext_lazy("suite"),
        help_text=gettext_lazy("Created if no suite has this name; its cases of the same names are replaced."),
    )
    file = forms.FileField(label=gettext_lazy("JSONL file"), help_text=gettext_lazy("One case per line."))


IMPORT_PERMISSIONS = ("evals.add_evalsuite", "evals.add_evalcase", "evals.change_evalcase")


@admin.register(EvalCase)
class EvalCaseAdmin(JSONInputAdminMixin, WorkspaceScopedAdmin, admin.ModelAdmin):
    """A case on its own page, where one made from a run's timeline is finished (its suite's page
    edits the same cases inline)."""

    list_display = ["name", "suite", "position"]
    list_filter = ["suite"]
    search_fields = ["name", "suite__name"]
    list_select_related = ["suite"]


@admin.register(EvalSuite)
class EvalSuiteAdmin(WorkspaceScopedAdmin, admin.ModelAdmin):
    list_display = ["name", "description", "created_at"]
    search_fields = ["name"]
    inlines = [EvalCaseInline]
    actions = ["export_jsonl"]
    change_list_template = "admin/evals/evalsuite/change_list.html"

    def get_urls(self):
        view = path("import/", self.admin_site.admin_view(self.import_view), name="evals_evalsuite_import")
        return [view, *super().get_urls()]

    def import_view(self, request):
        """Cases from a JSONL file, all or none (the command agentry_eval_cases does the same)."""
        if not request.user.has_perms(IMPORT_PERMISSIONS):
            raise PermissionDenied
        form = CasesImportForm(request.POST or None, request.FILES or None)
        if request.method == "POST" and form.is_valid():
            workspace_id = binding_of(request.user).workspace_id or default_workspace_id()
            try:
                text = form.cleaned_data["file"].read().decode("utf-8")
                count = eval_cases_import(
                    suite_name=form.cleaned_data["suite"], lines=text.splitlines(), workspace_id=workspace_id
                )
            except UnicodeDecodeError:
                form.add_error("file", _("The file is not UTF-8 text."))
            except CaseLineInvalid as exc:
                form.add_error("file", str(exc))
            else:
                self.message_user(request, _("Imported %(count)d cases.") % {"count": count}, messages.SUCCESS)
                suite = EvalSuite.objects.get(workspace_id=workspace_id, name=form.cleaned_data["suite"])
                return HttpResponseRedirect(reverse("admin:evals_evalsuite_change", args=[suite.pk]))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "form": form,
            "title": _("Import cases (JSONL)"),
        }
        return TemplateResponse(
            request, "admin/evals/evalsuite/import.html", context, status=400 if form.errors else 200
        )

    def changelist_view(self, request, extra_context=None):
        extra = {"may_import": request.user.has_perms(IMPORT_PERMISSIONS), **(extra_context or {})}
        return super().changelist_view(request, extra_context=extra)

    @admin.action(description=gettext_lazy("Export the selected suite's cases (JSONL)"), permissions=["view"])
    def export_jsonl(self, request, queryset):
        suites = list(queryset[:2])
        if len(suites) != 1:
            self.message_user(request, _("Select exactly one suite to export."), messages.ERROR)
            return None
        suite = suites[0]
        body = "".join(case_to_line(case) + "\n" for case in suite.cases.all())
        response = HttpResponse(body, content_type="application/jsonl; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="eval-suite-{suite.pk}.jsonl"'
        return response


class EvalRunStartForm(forms.ModelForm):
    """Which version runs: the agent, and its draft, its published version or a version number."""

    agent = forms.ModelChoiceField(queryset=Agent.objects.order_by("name"), label=gettext_lazy("agent"))
    version = forms.CharField(
        initial=DRAFT,
        max_length=20,
        label=gettext_lazy("version"),
        help_text=gettext_lazy('"draft", "published" or a version number of the agent.'),
    )

    # Set by EvalRunAdmin.get_form: who is starting the eval run.
    user = None

    class Meta:
        model = EvalRun
        fields = ["suite", "repetitions"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Only the agents this operator may use are offered (evals.services.eval_agent_check).
        self.fields["agent"].queryset = agents_usable_by(user=self.user).order_by("name")

    def clean(self):
        data = super().clean()
        if data.get("agent") is not None:
            try:
                eval_agent_check(user=self.user, agent=data["agent"])
            except EvalNotAllowed as exc:
                self.add_error("agent", str(exc))
                return data
        if data.get("agent") is not None and data.get("version"):
            try:
                self.instance.agent_version = eval_version_resolve(agent=data["agent"], version=data["version"])
            except VersionNotFound:
                self.add_error("version", _("The agent has no such version."))
        suite = data.get("suite")
        if suite is not None and not suite.cases.exists():
            self.add_error("suite", _("The suite has no cases."))
        return data


REPLAY_PERMISSIONS = (FORK_PERMISSION, "evals.add_evalrun")


class ReplayForm(forms.Form):
    """Which production runs are replayed on which version (evals.replays.ReplayFilter)."""

    agent = forms.ModelChoiceField(queryset=Agent.objects.none(), label=gettext_lazy("agent"))
    version = forms.CharField(
        initial=DRAFT,
        max_length=20,
        label=gettext_lazy("version"),
        help_text=gettext_lazy('The version the runs are replayed on: "draft", "published" or a version number.'),
    )
    from_version = forms.IntegerField(
        required=False, min_value=1, label=gettext_lazy("runs of version"), help_text=gettext_lazy("Empty: any.")
    )
    since = forms.DateTimeField(required=False, label=gettext_lazy("since"))
    until = forms.DateTimeField(required=False, label=gettext_lazy("until"))
    stop_reasons = forms.MultipleChoiceField(
        required=False,
        choices=StopReason.choices,
        widget=forms.CheckboxSelectMultiple,
        label=gettext_lazy("stop reasons"),
        help_text=gettext_lazy("None chosen: any."),
    )
    negative_feedback = forms.BooleanField(required=False, label=gettext_lazy("only runs rated not helpful"))
    limit = forms.IntegerField(
        initial=DEFAULT_LIMIT, min_value=1, max_value=MAX_LIMIT, label=gettext_lazy("newest runs at most")
    )
    name = forms.CharField(required=False, max_length=100, label=gettext_lazy("suite name"))
    rubric = forms.CharField(
        required=False,
        max_length=5000,
        widget=forms.Textarea(attrs={"rows": 3}),
        label=gettext_lazy("answer rubric"),
        help_text=gettext_lazy(
            "Empty: a replay passes only with exactly the original answer. Otherwise the judge model grades the "
            "answer by this rubric, with the original answer as the reference."
        ),
    )
    judge = forms.ModelChoiceField(
        required=False, queryset=ModelConfig.objects.none(), label=gettext_lazy("judge model")
    )

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.user = user
        self.fields["agent"].queryset = agents_usable_by(user=user).order_by("name")
        self.fields["judge"].queryset = in_workspace(ModelConfig.objects.order_by("name"), user)

    def clean(self):
        data = super().clean()
        agent = data.get("agent")
        if agent is not None and data.get("version"):
            try:
                self.candidate = eval_version_resolve(agent=agent, version=data["version"])
            except VersionNotFound:
                self.add_error("version", _("The agent has no such version."))
        return data

    def replay_filter(self) -> ReplayFilter:
        data = self.cleaned_data
        return ReplayFilter(
            agent=data["agent"],
            version=data["from_version"],
            since=data["since"],
            until=data["until"],
            stop_reasons=tuple(data["stop_reasons"]),
            negative_feedback_only=data["negative_feedback"],
            limit=data["limit"],
        )


class EvalResultInline(WorkspaceScopedInline, ReadOnlyInline):
    model = EvalResult
    fields = [
        "case",
        "repetition",
        "passed",
        "checks_text",
        "run_link",
        "model_turns",
        "total_tokens",
        "cost",
        "latency_ms",
    ]
    readonly_fields = fields
    show_change_link = False

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("case")

    def has_view_permission(self, request, obj=None):
        # The results are part of the eval run's record: whoever may see the run sees them.
        return request.user.has_perm("evals.view_evalrun")

    @admin.display(description=gettext_lazy("checks"))
    def checks_text(self, obj):
        return format_html_join(
            "",
            "<div>{} {}: {}</div>",
            (("✓" if c["passed"] else "✗", c["kind"], c["reason"]) for c in obj.checks),
        )

    @admin.display(description=gettext_lazy("run (timeline)"))
    def run_link(self, obj):
        if obj.run_id is None:
            return "-"
        # The run's timeline is the evidence for the checks.
        return format_html('<a href="{}">{}</a>', reverse("monitoring:run", args=[obj.run_id]), obj.run_id)


@admin.register(EvalRun)
class EvalRunAdmin(WorkspaceScopedAdmin, admin.ModelAdmin):
    list_display = [
        "id",
        "suite",
        "agent_link",
        "agent_version",
        "repetitions",
        "status",
        "completion",
        "created_by",
        "started_at",
    ]
    agent_link = agent_column("agent_version__agent")
    list_filter = ["status", "suite", "agent_version__agent"]
    list_select_related = ["suite", "agent_version__agent", "created_by"]
    readonly_fields = [
        "suite",
        "agent_version",
        "repetitions",
        "status",
        "created_by",
        "started_at",
        "finished_at",
        "error",
        "metrics_text",
    ]
    exclude = ["metrics"]
    inlines = [EvalResultInline]
    actions = ["collect", "compare"]
    change_list_template = "admin/evals/evalrun/change_list.html"

    def get_urls(self):
        view = path("replay/", self.admin_site.admin_view(self.replay_view), name="evals_evalrun_replay")
        return [view, *super().get_urls()]

    def changelist_view(self, request, extra_context=None):
        extra = {"may_replay": request.user.has_perms(REPLAY_PERMISSIONS), **(extra_context or {})}
        return super().changelist_view(request, extra_context=extra)

    def replay_view(self, request):
        """Replay production runs on a version: a new suite of them and its eval run, shown when started."""
        if not request.user.has_perms(REPLAY_PERMISSIONS):
            raise PermissionDenied
        form = ReplayForm(request.POST or None, user=request.user)
        if request.method == "POST" and form.is_valid():
            try:
                eval_run = replay_start(
                    filter=form.replay_filter(),
                    candidate=form.candidate,
                    user=request.user,
                    name=form.cleaned_data["name"] or None,
                    rubric=form.cleaned_data["rubric"],
                    judge=form.cleaned_data["judge"],
                )
            except ReplayInvalid as exc:
                form.add_error(None, str(exc))
            else:
                self.message_user(request, _("Replay started."), messages.SUCCESS)
                return HttpResponseRedirect(reverse("admin:evals_evalrun_change", args=[eval_run.pk]))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "form": form,
            "title": _("Replay production runs"),
        }
        return TemplateResponse(request, "admin/evals/evalrun/replay.html", context, status=400 if form.errors else 200)

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:
            # A subclass per request, so the user never lands on the shared form class.
            kwargs["form"] = type("EvalRunStartForm", (EvalRunStartForm,), {"user": request.user})
        return super().get_form(request, obj, change=change, **kwargs)

    def get_readonly_fields(self, request, obj=None):
        return self.readonly_fields if obj is not None else []

    def get_fields(self, request, obj=None):
        if obj is None:
            return ["suite", "agent", "version", "repetitions"]
        return self.readonly_fields

    def get_inlines(self, request, obj):
        return self.inlines if obj is not None else []

    def has_change_permission(self, request, obj=None):
        # An eval run's record is the evidence of what ran: nobody edits it.
        return False

    def save_model(self, request, obj, form, change):
        started = eval_run_start(
            suite=obj.suite, agent_version=obj.agent_version, repetitions=obj.repetitions, user=request.user
        )
        obj.pk = started.pk
        obj.refresh_from_db()

    @admin.display(description=gettext_lazy("task completion"))
    def completion(self, obj):
        rate = (obj.metrics or {}).get("task_completion_rate")
        return "-" if rate is None else f"{rate:.0%}"

    @admin.display(description=gettext_lazy("metrics"))
    def metrics_text(self, obj):
        if not obj.metrics:
            return "-"
        return format_html("<pre>{}</pre>", json.dumps(obj.metrics, indent=2))

    @admin.action(description=gettext_lazy("Compare the two selected eval runs"), permissions=["view"])
    def compare(self, request, queryset):
        runs = list(queryset.order_by("started_at")[:3])
        if len(runs) != 2:
            self.message_user(request, _("Select exactly two eval runs to compare."), messages.ERROR)
            return None
        # The older one is the baseline.
        query = urlencode({"baseline": runs[0].pk, "candidate": runs[1].pk})
        return HttpResponseRedirect(f"{reverse('evals:compare')}?{query}")

    @admin.action(description=gettext_lazy("Collect finished runs' results now"), permissions=["add"])
    def collect(self, request, queryset):
        # Collecting asks a rubric's judge model on the agent's behalf: only for agents the
        # operator may use, as starting the eval run was.
        refused, collected = [], 0
        for eval_run in queryset.select_related("agent_version__agent"):
            try:
                eval_agent_check(user=request.user, agent=eval_run.agent_version.agent)
            except EvalNotAllowed:
                refused.append(str(eval_run.pk))
                continue
            eval_run_collect(eval_run_id=eval_run.pk)
            collected += 1
        if collected:
            self.message_user(request, _("Results collected."), messages.SUCCESS)
        if refused:
            self.message_user(
                request,
                _("Not collected (you may not use their agents): eval runs %(ids)s.") % {"ids": ", ".join(refused)},
                messages.ERROR,
            )


@admin.register(ReleaseGate)
class ReleaseGateAdmin(WorkspaceScopedAdmin, admin.ModelAdmin):
    """Who may loosen the gate is who may change it (evals.change_releasegate), not who publishes."""

    list_display = [
        "agent_link",
        "suite",
        "repetitions",
        "max_rate_drop",
        "max_cost_increase",
        "max_latency_increase",
        "replay_hours",
        "online_min_runs",
        "enabled",
    ]
    list_filter = ["enabled"]
    list_select_related = ["agent", "suite"]
    agent_link = agent_column()
    autocomplete_fields = ["agent"]


@admin.register(OnlineEvaluator)
class OnlineEvaluatorAdmin(JSONInputAdminMixin, WorkspaceScopedAdmin, admin.ModelAdmin):
    """Online evaluators of an agent's production runs (evals.online); the model checks each
    kind's configuration and that a judge has a model and a rubric."""

    list_display = [
        "name",
        "agent_link",
        "kind",
        "version",
        "sample_rate",
        "on_negative_feedback",
        "on_guardrail_hit",
        "enabled",
    ]
    list_filter = ["enabled", "kind"]
    list_select_related = ["agent", "version"]
    search_fields = ["name", "agent__name"]
    agent_link = agent_column()
    autocomplete_fields = ["agent"]
    raw_id_fields = ["version"]
    fields = [
        "agent",
        "name",
        "kind",
        "version",
        "config",
        "judge_model",
        "rubric",
        "sample_rate",
        "on_negative_feedback",
        "on_guardrail_hit",
        "enabled",
    ]


@admin.register(OnlineScore)
class OnlineScoreAdmin(ReadOnlyAdminMixin, WorkspaceScopedAdmin, admin.ModelAdmin):
    """Audit rows written by the online evaluators: read-only."""

    list_display = ["evaluator", "run_link", "agent_version", "reason", "score", "passed", "created_at"]
    list_filter = ["reason", "passed", "evaluator__kind", "evaluator"]
    list_select_related = ["evaluator", "agent_version"]
    search_fields = ["evaluator__name", "explanation"]
    raw_id_fields = ["run", "llm_call", "agent_version"]
    show_full_result_count = False
    fields = [
        "evaluator",
        "run_link",
        "agent_version",
        "reason",
        "score",
        "passed",
        "explanation",
        "llm_call",
        "created_at",
    ]
    readonly_fields = fields

    @admin.display(description=gettext_lazy("run"))
    def run_link(self, obj):
        return format_html('<a href="{}">{}</a>', reverse("monitoring:run", args=[obj.run_id]), obj.run_id)
