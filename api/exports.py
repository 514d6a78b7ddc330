"""GET /api/v1/runs/export/: the runs the caller may see, with their audit rows, as a file.

Query: `format` (jsonl or csv, default jsonl), `agent` (a slug), `since` and `until` (ISO 8601;
runs created in [since, until)). Staff with the view permission on runs export everyone's runs,
others their own conversations' runs (the same rule as GET /runs/). Model calls come with their
`request` (the agent's system prompt and tools) only for staff who may view agents. The body is
streamed from the database (conversations/export.py), so its size is bounded by nothing but the
filters.
"""

from django.http import StreamingHttpResponse
from django.utils import timezone

from api.async_auth import AsyncApiError, authenticate, throttle
from api.throttles import ApiUserThrottle
from conversations.export import CONTENT_TYPES, ExportFilterError, export_filters_parse, ledger_export_lines
from conversations.selectors import agent_config_visible_to, agents_exportable_by, runs_for_export
from platform_site.asyncdb import db
from platform_site.http_methods import require_GET
from platform_site.thread_stream import thread_stream


@require_GET
async def runs_export(request):
    try:
        user = await authenticate(request, allow_session=True)
        await throttle(request, user, [ApiUserThrottle])
        query = request.GET
        filters = await db(
            lambda: export_filters_parse(
                format=query.get("format", "jsonl"),
                agent=query.get("agent", ""),
                since=query.get("since", ""),
                until=query.get("until", ""),
                agents=agents_exportable_by(user=user),
            )
        )
    except ExportFilterError as exc:
        return AsyncApiError(400, exc.message, param=exc.param).response()
    except AsyncApiError as exc:
        return exc.response()
    # Whether the user sees everyone's runs is read from the database (their permissions).
    runs = await db(runs_for_export, user=user, agent=filters.agent, since=filters.since, until=filters.until)
    # Model calls' requests hold the agents' system prompts: only for those who may read them.
    requests = await db(agent_config_visible_to, user=user)
    response = StreamingHttpResponse(
        thread_stream(lambda: ledger_export_lines(runs=runs, format=filters.format, requests=requests)),
        content_type=CONTENT_TYPES[filters.format],
    )
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    response["Content-Disposition"] = f'attachment; filename="agentry-runs-{stamp}.{filters.format}"'
    response["Cache-Control"] = "no-store"
    response["X-Accel-Buffering"] = "no"
    return response
