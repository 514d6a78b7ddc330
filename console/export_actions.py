"""Run admin actions: the selected runs with their audit rows as a JSONL or CSV download.

Each needs the "export" permission (the run admin's `has_export_permission`: export_run). The
file is streamed from the database on a thread of its own (platform_site/thread_stream.py), so
selecting every run of a large ledger ("select all") holds one batch in memory at a time.
"""

from django.contrib import admin
from django.http import StreamingHttpResponse
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from conversations.export import CONTENT_TYPES, ledger_export_lines
from conversations.models import Run
from conversations.selectors import agent_config_visible_to
from platform_site.thread_stream import thread_stream
from workspaces.access import in_workspace

EXPORT_PERMISSION = "conversations.export_run"


def user_may_export(user) -> bool:
    return bool(user and user.is_active and user.has_perm(EXPORT_PERMISSION))


def _download(request, queryset, format: str) -> StreamingHttpResponse:
    # By id: the changelist's queryset carries its own annotations and ordering.
    # Of the workspace the user acts in, whatever the changelist was given.
    runs = in_workspace(Run.objects.filter(pk__in=queryset.values("pk")), request.user)
    requests = agent_config_visible_to(user=request.user)  # the system prompts in model calls' requests
    response = StreamingHttpResponse(
        thread_stream(lambda: ledger_export_lines(runs=runs, format=format, requests=requests)),
        content_type=CONTENT_TYPES[format],
    )
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    response["Content-Disposition"] = f'attachment; filename="agentry-runs-{stamp}.{format}"'
    response["Cache-Control"] = "no-store"
    return response


@admin.action(description=_("Export selected runs with their audit rows (JSONL)"), permissions=["export"])
def export_runs_jsonl(modeladmin, request, queryset):
    return _download(request, queryset, "jsonl")


@admin.action(description=_("Export selected runs with their audit rows (CSV)"), permissions=["export"])
def export_runs_csv(modeladmin, request, queryset):
    return _download(request, queryset, "csv")
