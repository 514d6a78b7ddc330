"""GET /api/v1/runs/{id}/events/: the run's events as Server-Sent Events.

Each event is sent as `id: <seq>`, `event: <type>`, `data: <json>`; a client that reconnects
with `Last-Event-ID` (or `?last_event_id=`) gets exactly the events after that one. The stream
ends after the run's terminal event; asked again after it, it answers 204, which tells an
EventSource to stop reconnecting.
"""

import json
import re

from django.core.serializers.json import DjangoJSONEncoder
from django.http import HttpResponse, StreamingHttpResponse
from django.utils.translation import gettext as _

from api.async_auth import AsyncApiError, authenticate, throttle
from api.throttles import ApiUserThrottle
from conversations.live import run_event_batches
from conversations.models import TERMINAL_STATUSES
from conversations.selectors import runs_visible_to
from platform_site.asyncdb import db
from platform_site.http_methods import require_GET

RECONNECT_MS = 2000
# ASCII digits only (str.isdigit() also takes "²", which int() refuses), and few enough for int().
LAST_EVENT_ID = re.compile(r"[0-9]{1,18}")


def last_event_id(request) -> int:
    raw = request.headers.get("Last-Event-ID") or request.GET.get("last_event_id") or "0"
    if not LAST_EVENT_ID.fullmatch(raw):
        raise AsyncApiError(
            400,
            "Last-Event-ID must be the id (a non-negative integer) of an event of this stream.",
            param="Last-Event-ID",
        )
    return int(raw)


def _visible_run(user, run_id):
    return runs_visible_to(user=user).filter(pk=run_id).values("pk", "status", "event_seq").first()


def _format(run_id, event: dict) -> str:
    data = json.dumps({"run": str(run_id), **event}, cls=DjangoJSONEncoder, ensure_ascii=False)
    return f"id: {event['seq']}\nevent: {event['type']}\ndata: {data}\n\n"


async def _stream(run_id, after: int):
    yield f"retry: {RECONNECT_MS}\n\n"
    async with run_event_batches(run_id, after=after) as batches:
        async for batch in batches:
            yield "".join(_format(run_id, event) for event in batch) if batch else ": keepalive\n\n"


@require_GET
async def run_events(request, run_id):
    try:
        user = await authenticate(request, allow_session=True)
        await throttle(request, user, [ApiUserThrottle])
        after = last_event_id(request)
    except AsyncApiError as exc:
        return exc.response()
    run = await db(_visible_run, user, run_id)
    if run is None:
        return AsyncApiError(404, _("Not found.")).response()
    return run_events_response(run, after=after)


def run_events_response(run: dict, *, after: int) -> HttpResponse:
    """The stream of a run the caller may see (`run`: its pk, status and event_seq), after the
    event `after`; the API's and the chat widget's (api.widget) event routes both answer with it."""
    if run["status"] in TERMINAL_STATUSES and after >= run["event_seq"]:
        return HttpResponse(status=204)
    response = StreamingHttpResponse(_stream(run["pk"], after), content_type="text/event-stream; charset=utf-8")
    response["Cache-Control"] = "no-cache"
    # Proxies such as nginx would otherwise buffer the stream.
    response["X-Accel-Buffering"] = "no"
    return response
