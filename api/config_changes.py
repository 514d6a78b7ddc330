"""GET /api/v1/config-changes/export/: the configuration audit as a file, for holders of *Can
view configuration change* (audit.view_configchange); others get a 403.

Query: `format` (jsonl or csv, default jsonl), `agent` (a slug: the changes of that agent and of
what belongs to it), `since` and `until` (ISO 8601; changes made in [since, until)). Streamed
from the database (audit/export.py); secrets were masked when each row was written.
"""

from django.http import StreamingHttpResponse
from django.utils import timezone
from django.utils.translation import gettext as _

from agents.models import Agent
from api.async_auth import AsyncApiError, authenticate, throttle
from api.throttles import ApiUserThrottle
from audit.admin import VIEW_PERMISSION
from audit.export import config_change_lines
from audit.selectors import config_changes_for_export
from conversations.export import CONTENT_TYPES, ExportFilterError, export_filters_parse
from platform_site.asyncdb import db
from platform_site.http_methods import require_GET
from platform_site.thread_stream import thread_stream
from workspaces.access import in_workspace


@require_GET
async def config_changes_export(request):
    try:
        user = await authenticate(request, allow_session=True)
        await throttle(request, user, [ApiUserThrottle])
        if not await db(user.has_perm, VIEW_PERMISSION):
            raise AsyncApiError(403, _("You do not have permission to perform this action."))
        query = request.GET
        filters = await db(
            lambda: export_filters_parse(
                format=query.get("format", "jsonl"),
                agent=query.get("agent", ""),
                since=query.get("since", ""),
                until=query.get("until", ""),
                # Another workspace's slug is "no agent has the slug", as a missing one is.
                agents=in_workspace(Agent.objects.all(), user),
            )
        )
    except ExportFilterError as exc:
        return AsyncApiError(400, exc.message, param=exc.param).response()
    except AsyncApiError as exc:
        return exc.response()
    changes = config_changes_for_export(agent=filters.agent, since=filters.since, until=filters.until)
    response = StreamingHttpResponse(
        thread_stream(lambda: config_change_lines(changes=changes, format=filters.format)),
        content_type=CONTENT_TYPES[filters.format],
    )
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    response["Content-Disposition"] = f'attachment; filename="agentry-config-changes-{stamp}.{filters.format}"'
    response["Cache-Control"] = "no-store"
    response["X-Accel-Buffering"] = "no"
    return response
