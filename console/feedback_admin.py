"""End users in the admin: forgetting one from their conversation, the erasures' audit rows, and
the review list of end users' feedback on runs, negative first, with Add to eval suite.

Each action asks for the permission matching its power: forgetting is
conversations.forget_end_user (it deletes content for good), making eval cases is
evals.add_evalcase; feedback and erasures are read-only rows."""

import logging

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db.models import F
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from agents.page_links import agent_column
from console.formatting import short_id, short_id_html
from conversations.end_users import end_users_of
from conversations.models import EndUserErasure, RunFeedback
from conversations.permissions import FORGET_PERMISSION
from evals.models import EvalSuite
from evals.services import eval_case_from_run
from memory.forget import EndUserBusy, EndUserUnknown, end_user_forget, end_user_reach, forget_scope
from platform_site.admin_mixins import ReadOnlyAdminMixin
from workspaces.access import in_workspace
from workspaces.admin_scope import WorkspaceScopedAdmin

log = logging.getLogger(__name__)

ADD_EVAL_CASE_PERMISSION = "evals.add_evalcase"
COMMENT_CHARS = 80


class ForgetEndUserMixin:
    """For the conversation admin: the action that forgets the end users of the selected
    conversations (memory.forget), after a confirmation page naming them."""

    actions = ["forget_end_user"]

    def has_forget_end_user_permission(self, request):
        return request.user.has_perm(FORGET_PERMISSION)

    @admin.action(description=gettext_lazy("Forget this conversation's end user…"), permissions=["forget_end_user"])
    def forget_end_user(self, request, queryset):
        end_users = end_users_of(queryset)
        if not end_users:
            self.message_user(request, _("None of the selected conversations has an end user."), messages.WARNING)
            return None
        if "apply" not in request.POST:
            return TemplateResponse(
                request,
                "admin/conversations/conversation/forget_end_user.html",
                {
                    **self.admin_site.each_context(request),
                    "title": _("Forget end users"),
                    "end_users": self._described(end_users, forget_scope(request.user)),
                    "conversations": queryset,
                    "opts": self.model._meta,
                    "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
                },
            )
        for person in end_users:
            end_user = person.end_user
            try:
                erasure = end_user_forget(
                    person=person, requested_by=request.user, channel=EndUserErasure.Channel.ADMIN
                )
            except EndUserBusy:
                self.message_user(
                    request,
                    _("End user %(end_user)s has a run in progress; nothing was forgotten.") % {"end_user": end_user},
                    messages.ERROR,
                )
            except EndUserUnknown:
                # Forgotten between the two pages (by another operator, or the application).
                self.message_user(
                    request, _("End user %(end_user)s was already forgotten.") % {"end_user": end_user}, messages.INFO
                )
            else:
                log.info("erasure %s by %s in the admin", erasure.pk, request.user.get_username())
                self.message_user(
                    request,
                    _("End user %(end_user)s forgotten: %(conversations)s conversations, %(memories)s memories.")
                    % {
                        "end_user": end_user,
                        "conversations": erasure.counts["conversations_anonymised"],
                        "memories": erasure.counts["memories_deleted"],
                    },
                    messages.SUCCESS,
                )
        return None

    def _described(self, end_users, workspace_id: int | None) -> list[dict]:
        """Each person with their owner's name and what forgetting them reaches (end_user_reach,
        as the erasure finds it, in the workspace the operator acts in): their conversations, and
        the runs holding their words, copies (delegated runs, forks, replays) included."""
        owners = dict(
            get_user_model()
            .objects.filter(pk__in={person.owner_id for person in end_users})
            .values_list("pk", "username")
        )
        described = []
        for person in end_users:
            reach = end_user_reach(person=person, workspace_id=workspace_id)
            described.append(
                {
                    # No owner: the platform's own end user (the command line, the demo, a schedule or hook).
                    "owner": owners.get(person.owner_id, "–")
                    if person.owner_id is not None
                    else _("none (the platform's own)"),
                    "end_user": person.end_user,
                    "conversations": len(reach.own_conversation_ids),
                    "runs": len(reach.run_ids),
                }
            )
        return described


@admin.register(EndUserErasure)
class EndUserErasureAdmin(ReadOnlyAdminMixin, WorkspaceScopedAdmin, admin.ModelAdmin):
    """Audit rows of forgotten end users: who asked, how, what went. Never edited.

    Each is its workspace's (where the end user was forgotten); one with no workspace, made by a
    superuser acting installation-wide, is a superuser's only. It holds a keyed hash and counts,
    never the id."""

    list_display = ["created_at", "digest", "channel", "requested_by_username", "conversations", "memories"]
    list_filter = ["channel"]
    search_fields = ["end_user_digest", "requested_by_username"]
    date_hierarchy = "created_at"
    fields = ["end_user_digest", "requested_by", "requested_by_username", "channel", "counts", "created_at"]
    readonly_fields = fields

    @admin.display(description=gettext_lazy("end user digest"), ordering="end_user_digest")
    def digest(self, obj):
        return short_id_html(obj.end_user_digest)

    @admin.display(description=gettext_lazy("conversations"))
    def conversations(self, obj):
        return obj.counts.get("conversations_anonymised", 0)

    @admin.display(description=gettext_lazy("memories"))
    def memories(self, obj):
        return obj.counts.get("memories_deleted", 0)


class EvalSuiteChoiceForm(forms.Form):
    suite = forms.ModelChoiceField(queryset=EvalSuite.objects.order_by("name"), label=gettext_lazy("Suite"))


@admin.register(RunFeedback)
class RunFeedbackAdmin(ReadOnlyAdminMixin, WorkspaceScopedAdmin, admin.ModelAdmin):
    """End users' ratings of runs: the review list reads the negative ones first, newest first
    (the (rating, created_at) index), each a click away from its run's timeline."""

    list_display = ["rating_text", "comment_start", "run_link", "agent_link", "version", "created_at"]
    list_filter = ["rating", "run__agent", ("created_at", admin.DateFieldListFilter)]
    list_select_related = ["run__agent"]
    search_fields = ["run__id", "comment"]
    ordering = ["rating", "-created_at"]
    show_full_result_count = False
    fields = ["run", "rating", "comment", "created_by", "created_at", "updated_at"]
    readonly_fields = fields
    actions = ["add_to_eval_suite"]

    def get_queryset(self, request):
        # The version's number without loading its snapshot (the whole agent configuration).
        return super().get_queryset(request).annotate(version_number=F("run__agent_version__number"))

    def has_add_eval_case_permission(self, request):
        return request.user.has_perm(ADD_EVAL_CASE_PERMISSION)

    @admin.display(description=gettext_lazy("rating"), ordering="rating")
    def rating_text(self, obj):
        return obj.get_rating_display()

    @admin.display(description=gettext_lazy("comment"))
    def comment_start(self, obj):
        return obj.comment[:COMMENT_CHARS] + "…" if len(obj.comment) > COMMENT_CHARS else obj.comment

    @admin.display(description=gettext_lazy("run (opens the timeline)"))
    def run_link(self, obj):
        return format_html(
            '<a href="{}" class="timeline-link">{}</a>',
            reverse("monitoring:run", args=[obj.run_id]),
            short_id(obj.run_id),
        )

    agent_link = agent_column("run__agent")

    @admin.display(description=gettext_lazy("version"), ordering="run__agent_version__number")
    def version(self, obj):
        return getattr(obj, "version_number", None)

    @admin.action(description=gettext_lazy("Add to eval suite…"), permissions=["add_eval_case"])
    def add_to_eval_suite(self, request, queryset):
        """Each selected feedback's run as a new case of the chosen suite (evals'
        eval_case_from_run), named after the run; the operator then writes its expectations."""
        form = EvalSuiteChoiceForm(request.POST if "apply" in request.POST else None)
        form.fields["suite"].queryset = in_workspace(form.fields["suite"].queryset, request.user)
        if not form.is_valid():
            return TemplateResponse(
                request,
                "admin/conversations/runfeedback/add_to_eval_suite.html",
                {
                    **self.admin_site.each_context(request),
                    "title": _("Add to eval suite"),
                    "feedback": queryset.select_related("run"),
                    "form": form,
                    "opts": self.model._meta,
                    "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
                },
            )
        suite = form.cleaned_data["suite"]
        added = 0
        for feedback in queryset.select_related("run"):
            name = _("feedback %(run)s") % {"run": short_id(feedback.run_id)}
            try:
                eval_case_from_run(run=feedback.run, suite=suite, name=name)
            except ValidationError as exc:
                self.message_user(request, f"{name}: {'; '.join(exc.messages)}", messages.ERROR)
            else:
                added += 1
        self.message_user(
            request,
            _("%(count)s cases added to suite %(suite)s; write their expectations on each case's page.")
            % {"count": added, "suite": suite},
            messages.SUCCESS if added else messages.WARNING,
        )
        return None
