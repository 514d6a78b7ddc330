"""The A2A protocol's methods over runs (a2a-sdk's RequestHandler), for one agent and one caller:
the transport (api.a2a) authenticates the bearer token, finds the agent the token may use and
puts both in the call context's state (CALLER). Database work runs off the event loop
(platform_site.asyncdb); a waiting call holds no thread and no connection.

- SendMessage: admission (a2a_server.submit), then the task once it has ended or waits for an
  approval (A2A's terminal and interrupted states), or where it stands after
  AGENTRY_COMPLETION_TIMEOUT_SECONDS; at once with `returnImmediately`.
- SendStreamingMessage and SubscribeToTask: the task, then its run's events as A2A events (the
  answer streamed as chunks of the "answer" artifact), until it ends or waits for an approval.
- CancelTask: engine.runs.run_cancel, as the REST API's cancel allows it.
- Push notification configs: a2a_server.push sends them from the run's events.
"""

import asyncio
import contextlib
from dataclasses import dataclass

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.request_handler import RequestHandler, validate_request_params
from a2a.types import (
    AgentCard,
    Artifact,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Part,
    SendMessageRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import (
    ExtendedAgentCardNotConfiguredError,
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from a2a.utils.task import apply_history_length
from django.conf import settings
from django.utils.translation import gettext as _

from a2a_server.models import PushConfig
from a2a_server.runs import ANSWER_ARTIFACT, SETTLED_STATES, TERMINAL_STATES, RunTask, run_visible, task_read
from a2a_server.submit import message_admit, push_config_store
from agents.models import Agent
from conversations.events import TERMINAL_EVENT_TYPES, EventType
from conversations.live import run_event_batches
from conversations.selectors import run_owned_by
from conversations.wakeups import get_waker
from engine.operations import user_may_operate
from engine.runs import run_cancel
from platform_site.asyncdb import db
from workspaces.access import may_start_runs

CALLER = "agentry_caller"
# A run a worker holds stops at its next step boundary: a cancel waits this long to say so.
CANCEL_WAIT_SECONDS = 10
STREAM_UNTIL = TERMINAL_EVENT_TYPES | {EventType.RUN_AWAITING_APPROVAL}


@dataclass(frozen=True)
class Caller:
    user: object
    agent: Agent


def _caller(context: ServerCallContext) -> Caller:
    return context.state[CALLER]


def _history_checked(config) -> None:
    if config is not None and config.HasField("history_length") and config.history_length < 0:
        raise InvalidParamsError(_("historyLength must not be negative."))


def _read(caller: Caller, task_id: str) -> RunTask | None:
    return task_read(user=caller.user, agent_id=caller.agent.pk, task_id=task_id)


def _task_cancel(caller: Caller, task_id: str) -> None:
    run = run_visible(user=caller.user, agent_id=caller.agent.pk, task_id=task_id)
    if run is None:
        raise TaskNotFoundError
    owned = run_owned_by(run=run, user=caller.user)
    if not ((owned and may_start_runs(caller.user)) or user_may_operate(caller.user)):
        raise TaskNotCancelableError(_("You may read this task but not cancel it."))
    if run.is_terminal:
        raise TaskNotCancelableError(_("The task has already ended (%(status)s).") % {"status": run.status})
    run_cancel(run=run, by=caller.user)


def _push_config(row: PushConfig, *, with_token: bool = False) -> TaskPushNotificationConfig:
    """The config as A2A shows it; its token (the signing key) only in the answer that set it."""
    config = TaskPushNotificationConfig(id=row.name, task_id=str(row.run_id), url=row.url)
    if with_token:
        config.token = row.token
    if row.auth_scheme:
        config.authentication.scheme = row.auth_scheme
    return config


def _push_create(caller: Caller, params: TaskPushNotificationConfig) -> TaskPushNotificationConfig:
    run = run_visible(user=caller.user, agent_id=caller.agent.pk, task_id=params.task_id)
    if run is None:
        raise TaskNotFoundError
    return _push_config(push_config_store(run=run, user=caller.user, config=params), with_token=True)


def _push_rows(caller: Caller, task_id: str):
    run = run_visible(user=caller.user, agent_id=caller.agent.pk, task_id=task_id)
    if run is None:
        raise TaskNotFoundError
    return PushConfig.objects.filter(run=run).order_by("created_at")


def _push_get(caller: Caller, task_id: str, name: str) -> TaskPushNotificationConfig:
    row = _push_rows(caller, task_id).filter(name=name).first()
    if row is None:
        raise TaskNotFoundError(_("The task has no push notification config %(id)r.") % {"id": name[:100]})
    return _push_config(row)


def _push_list(caller: Caller, task_id: str) -> list[TaskPushNotificationConfig]:
    return [_push_config(row) for row in _push_rows(caller, task_id)]


def _push_delete(caller: Caller, task_id: str, name: str) -> None:
    _push_rows(caller, task_id).filter(name=name).delete()


def _status_event(task: Task) -> TaskStatusUpdateEvent:
    return TaskStatusUpdateEvent(task_id=task.id, context_id=task.context_id, status=task.status)


def _working(task: Task) -> TaskStatusUpdateEvent:
    status = TaskStatus(state=TaskState.TASK_STATE_WORKING)
    return TaskStatusUpdateEvent(task_id=task.id, context_id=task.context_id, status=status)


def _chunk(task: Task, text: str, *, append: bool, last: bool = False) -> TaskArtifactUpdateEvent:
    artifact = Artifact(artifact_id=ANSWER_ARTIFACT, name=ANSWER_ARTIFACT, parts=[Part(text=text)])
    return TaskArtifactUpdateEvent(
        task_id=task.id, context_id=task.context_id, artifact=artifact, append=append, last_chunk=last
    )


class RunTaskHandler(RequestHandler):
    """Each method checks the request's required fields first, as the SDK's own handler does."""

    async def _settled(self, caller: Caller, task_id: str, *, states, seconds: float) -> RunTask:
        """The task once its state is one of `states`, or as it stands when `seconds` have passed.
        Woken by the events that may settle the run (and its timed poll)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        async with get_waker().watch(task_id, settles_only=True) as wake:
            while True:
                wake.clear()
                found = await db(_read, caller, task_id)
                if found.state in states or loop.time() >= deadline:
                    return found
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout_at(deadline):
                        await wake.wait()

    async def _follow(self, caller: Caller, found: RunTask):
        """The run's events after `found` as A2A events, until it ends or waits for a person."""
        task = found.task
        working = task.status.state == TaskState.TASK_STATE_WORKING
        chunked = False
        async with run_event_batches(task.id, after=found.event_seq, until=STREAM_UNTIL) as batches:
            async for batch in batches:
                for event in batch:
                    if event["type"] == EventType.RUN_RUNNING and not working:
                        working = True
                        yield _working(task)
                    elif event["type"] == EventType.MESSAGE_DELTA:
                        yield _chunk(task, event["payload"]["text"], append=chunked)
                        chunked = True
                    elif event["type"] in STREAM_UNTIL:
                        ended = (await db(_read, caller, task.id)).task
                        if ended.artifacts:
                            # The whole answer, in place of what was streamed (which may hold the
                            # text of a step before its tool calls).
                            yield TaskArtifactUpdateEvent(
                                task_id=ended.id,
                                context_id=ended.context_id,
                                artifact=ended.artifacts[0],
                                append=False,
                                last_chunk=True,
                            )
                        yield _status_event(ended)
                        return

    @validate_request_params
    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        _history_checked(params)
        found = await db(_read, _caller(context), params.id)
        if found is None:
            raise TaskNotFoundError
        return apply_history_length(found.task, params)

    async def on_list_tasks(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        raise UnsupportedOperationError(_("Listing tasks is not supported: the REST API lists runs."))

    @validate_request_params
    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task | None:
        caller = _caller(context)
        await db(_task_cancel, caller, params.id)
        return (await self._settled(caller, params.id, states=TERMINAL_STATES, seconds=CANCEL_WAIT_SECONDS)).task

    @validate_request_params
    async def on_message_send(self, params: SendMessageRequest, context: ServerCallContext) -> Task:
        caller = _caller(context)
        _history_checked(params.configuration)
        run, _config = await db(message_admit, user=caller.user, agent=caller.agent, request=params)
        task_id = str(run.pk)
        if params.configuration.return_immediately:
            found = await db(_read, caller, task_id)
        else:
            found = await self._settled(
                caller, task_id, states=SETTLED_STATES, seconds=settings.AGENTRY_COMPLETION_TIMEOUT_SECONDS
            )
        return apply_history_length(found.task, params.configuration)

    @validate_request_params
    async def on_message_send_stream(self, params: SendMessageRequest, context: ServerCallContext):
        caller = _caller(context)
        _history_checked(params.configuration)
        run, _config = await db(message_admit, user=caller.user, agent=caller.agent, request=params)
        found = await db(_read, caller, str(run.pk))
        yield apply_history_length(found.task, params.configuration)
        if found.state not in SETTLED_STATES:
            async for event in self._follow(caller, found):
                yield event

    @validate_request_params
    async def on_subscribe_to_task(self, params, context: ServerCallContext):
        caller = _caller(context)
        found = await db(_read, caller, params.id)
        if found is None:
            raise TaskNotFoundError
        if found.state in TERMINAL_STATES:
            raise UnsupportedOperationError(_("Task %(task)s has ended: nothing more will come.") % {"task": params.id})
        yield found.task
        async for event in self._follow(caller, found):
            yield event

    @validate_request_params
    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        return await db(_push_create, _caller(context), params)

    @validate_request_params
    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        return await db(_push_get, _caller(context), params.task_id, params.id)

    @validate_request_params
    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        configs = await db(_push_list, _caller(context), params.task_id)
        return ListTaskPushNotificationConfigsResponse(configs=configs)

    @validate_request_params
    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        await db(_push_delete, _caller(context), params.task_id, params.id)

    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        raise ExtendedAgentCardNotConfiguredError
