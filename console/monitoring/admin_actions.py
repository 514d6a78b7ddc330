"""Run admin actions: the operator actions of engine/operations.py on selected runs.
Each needs the "operate" permission: the run admin's `has_operate_permission` (operate_run)."""

from django.contrib import admin, messages
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from engine.operations import RunActionRefused, run_cancel_by_operator, run_requeue, run_retry


def _apply(modeladmin, request, queryset, action, done_text) -> None:
    """`done_text` says how many runs the action took, with %(count)s for the number."""
    done, refused = 0, []
    for run_id in queryset.values_list("pk", flat=True):
        try:
            action(run_id=run_id, user=request.user)
            done += 1
        except RunActionRefused as exc:
            refused.append(f"{run_id}: {exc}")
    if done:
        modeladmin.message_user(request, done_text % {"count": done}, messages.SUCCESS)
    for line in refused:
        modeladmin.message_user(request, line, messages.WARNING)


@admin.action(description=gettext_lazy("Cancel selected runs"), permissions=["operate"])
def cancel_runs(modeladmin, request, queryset):
    _apply(modeladmin, request, queryset, run_cancel_by_operator, _("Cancelled %(count)s run(s)."))


@admin.action(description=gettext_lazy("Requeue selected runs (stuck)"), permissions=["operate"])
def requeue_runs(modeladmin, request, queryset):
    _apply(modeladmin, request, queryset, run_requeue, _("Requeued %(count)s run(s)."))


@admin.action(description=gettext_lazy("Retry selected failed runs from their last good step"), permissions=["operate"])
def retry_runs(modeladmin, request, queryset):
    _apply(modeladmin, request, queryset, run_retry, _("Retried %(count)s run(s)."))
