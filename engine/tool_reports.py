"""What a tool reports while it runs, recorded from the tool pool's thread.

A remote agent's call (tools.remote_agents) can last minutes: its remote task's id is recorded
on the invocation as soon as it is known (an operator can find the task, even if this worker
dies), each change is a `tool.progress` event for the run's streams, and the call looks now
and then whether the run was cancelled, to cancel the remote task in turn. These writes and
reads run on the tool's thread, which gives its connection back after each one.
"""

from collections.abc import Callable

from conversations import events
from conversations.batch import Batch, Update, event_add, run_guard
from conversations.events import EventType
from conversations.models import Run, ToolInvocation
from platform_site.dbpool import release_connection


def tool_reporter(*, run_id, owner: str, invocation: ToolInvocation) -> Callable[[dict], None]:
    """Record `details` on the running call, with its event, under the run's lease (nothing is
    written once the lease is lost or the call has ended)."""

    def report(details: dict) -> None:
        batch = Batch()
        run_guard(batch, run_id=run_id, lease_owner=owner)
        running = Update(ToolInvocation).set(details=details)
        batch.add("invocation", running.where(id=invocation.pk, status=ToolInvocation.Status.RUNNING))
        payload = events.tool_progress(tool_invocation_id=invocation.pk, tool=invocation.tool_name, details=details)
        event_add(batch, run_id=run_id, type=EventType.TOOL_PROGRESS, payload=payload)
        try:
            batch.execute()
        finally:
            release_connection()

    return report


def cancel_watch(*, run_id) -> Callable[[], bool]:
    """Whether a cancel of the run was accepted since the call began."""

    def cancelled() -> bool:
        try:
            return Run.objects.filter(pk=run_id, cancel_requested=True).exists()
        finally:
            release_connection()

    return cancelled
