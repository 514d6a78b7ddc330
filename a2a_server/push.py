"""A2A push notifications: a task's changes POSTed to the URLs its client set, signed like
Agentry's webhooks and sent through the outbound guard.

The run's events are heard in their own transaction (conversations.batch.RunEventListener, only
for runs with a push config); each config gets one Celery task per event after commit
(a2a_server.tasks), which reads the task as it then stands and POSTs A2A's StreamResponse:
`statusUpdate` for an approval asked for (input-required), decided or expired (working), `task`
(the whole task, with its answer) for the end of the run.

Each POST carries, besides the protocol's `X-A2A-Notification-Token` (the config's token) and
its `Authorization` (the config's authentication), Agentry's signature
(platform_site.signatures): `X-Agentry-Signature: sha256=<hex>`, an HMAC-SHA256 keyed with the
config's token over `<X-Agentry-Timestamp>.<raw body>`. A network error or a 5xx is retried
with backoff up to AGENTRY_WEBHOOK_MAX_ATTEMPTS; a target on an internal address must be listed
in AGENTRY_WEBHOOK_ALLOWLIST, as a webhook's.
"""

import json
import time

import httpx
from a2a.types import StreamResponse, TaskState, TaskStatus, TaskStatusUpdateEvent
from django.conf import settings
from django.db import transaction
from google.protobuf.json_format import MessageToDict

from a2a_server.models import PushConfig
from a2a_server.runs import task_of
from conversations.batch import Is, Row, RunEventListener, exists
from conversations.events import TERMINAL_EVENT_TYPES, EventType
from conversations.models import Run, RunEvent
from conversations.selectors import run_final_answer_annotation
from platform_site import outbound
from platform_site.backoff import backoff_delay, is_retryable_status
from platform_site.celery import app
from platform_site.signatures import webhook_signature

# Sent by name: a2a_server.tasks wraps push_send.
PUSH_SEND_TASK = "a2a_server.tasks.a2a_push_send_task"
# The events that already have a listener (notifications' webhooks): hearing them costs the
# engine no read of its own.
PUSH_EVENT_TYPES = TERMINAL_EVENT_TYPES | {
    EventType.APPROVAL_REQUESTED,
    EventType.APPROVAL_DECIDED,
    EventType.APPROVAL_EXPIRED,
}


def _written(event: RunEvent) -> None:
    for config_id in PushConfig.objects.filter(run_id=event.run_id).values_list("pk", flat=True):
        transaction.on_commit(
            lambda config=str(config_id), pk=event.pk: app.tasks[PUSH_SEND_TASK].delay(config, pk), robust=True
        )


LISTENER = RunEventListener(
    event_types=PUSH_EVENT_TYPES,
    hears=exists(PushConfig, Is("run_id", Row("id"))),
    written=_written,
)


def push_body(event: RunEvent) -> dict:
    """What is POSTed for `event`, from its run as it stands now."""
    run = Run.objects.select_related("request").annotate(output=run_final_answer_annotation()).get(pk=event.run_id)
    task = task_of(run)
    if event.type in TERMINAL_EVENT_TYPES:
        return MessageToDict(StreamResponse(task=task))
    state = (
        TaskState.TASK_STATE_INPUT_REQUIRED
        if event.type == EventType.APPROVAL_REQUESTED
        else TaskState.TASK_STATE_WORKING
    )
    status = TaskStatus(state=state)
    if state == task.status.state and task.status.HasField("message"):
        status.message.CopyFrom(task.status.message)
    update = TaskStatusUpdateEvent(task_id=task.id, context_id=task.context_id, status=status)
    return MessageToDict(StreamResponse(status_update=update))


def push_send(*, config_id, event_id, attempt: int) -> float | None:
    """One POST of the event to the config's URL. Returns the seconds until the next attempt, or
    None when done (sent, refused for good, out of attempts, or the config or event is gone)."""
    config = PushConfig.objects.filter(pk=config_id).first()
    event = RunEvent.objects.filter(pk=event_id).first()
    if config is None or event is None:
        return None
    body = json.dumps(push_body(event), ensure_ascii=False, separators=(",", ":")).encode()
    timestamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "Agentry-A2A/1",
        "X-Agentry-Event": event.type,
        "X-Agentry-Delivery": f"{config.pk}:{event.seq}",
        "X-Agentry-Timestamp": timestamp,
        "X-Agentry-Signature": webhook_signature(secret=config.token, timestamp=timestamp, body=body),
        "X-A2A-Notification-Token": config.token,
    }
    if config.auth_scheme and config.auth_credentials:
        headers["Authorization"] = f"{config.auth_scheme} {config.auth_credentials}"
    try:
        fetched = outbound.guarded_request(
            "POST",
            config.url,
            content=body,
            headers=headers,
            timeout_seconds=settings.AGENTRY_WEBHOOK_TIMEOUT_SECONDS,
            max_bytes=2000,
            follow_redirects=False,
            allowlist=outbound.WEBHOOKS,
        )
        retryable = is_retryable_status(fetched.response.status_code)
        failed = not 200 <= fetched.response.status_code < 300
    except outbound.OutboundBlocked as exc:
        failed, retryable = True, exc.retryable
    except httpx.HTTPError:
        failed, retryable = True, True
    if failed and retryable and attempt < settings.AGENTRY_WEBHOOK_MAX_ATTEMPTS:
        return backoff_delay(
            attempt,
            base=settings.AGENTRY_WEBHOOK_RETRY_BASE_SECONDS,
            cap=settings.AGENTRY_WEBHOOK_RETRY_MAX_SECONDS,
        )
    return None
