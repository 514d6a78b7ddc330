"""A run as an A2A task: the task's id is the run's, its contextId the conversation's, and its
state the run's status (STATES). What the protocol shows of a run is read here, in one query
for the run and one for its pending approvals when it waits for them.

| run status                         | task state     |
| ---------------------------------- | -------------- |
| queued (not started yet)           | submitted      |
| queued again, running, delegating  | working        |
| awaiting_approval                  | input-required |
| completed                          | completed      |
| failed, expired                    | failed         |
| cancelled                          | canceled       |
"""

from dataclasses import dataclass

from a2a.types import Artifact, Message, Part, Role, Task, TaskState, TaskStatus
from django.utils.translation import gettext as _
from google.protobuf import json_format
from google.protobuf.struct_pb2 import Struct, Value

from conversations.models import Approval, Run, RunStatus
from conversations.selectors import runs_visible_to
from conversations.usage import usage_values

STATES = {
    RunStatus.QUEUED: TaskState.TASK_STATE_WORKING,
    RunStatus.RUNNING: TaskState.TASK_STATE_WORKING,
    RunStatus.AWAITING_CHILDREN: TaskState.TASK_STATE_WORKING,
    RunStatus.AWAITING_APPROVAL: TaskState.TASK_STATE_INPUT_REQUIRED,
    RunStatus.COMPLETED: TaskState.TASK_STATE_COMPLETED,
    RunStatus.FAILED: TaskState.TASK_STATE_FAILED,
    RunStatus.EXPIRED: TaskState.TASK_STATE_FAILED,
    RunStatus.CANCELLED: TaskState.TASK_STATE_CANCELED,
}
TERMINAL_STATES = frozenset(
    {TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED}
)
# The states that end a message/stream and a blocking message/send (A2A: terminal or interrupted).
SETTLED_STATES = TERMINAL_STATES | {TaskState.TASK_STATE_INPUT_REQUIRED}
ANSWER_ARTIFACT = "answer"


@dataclass
class RunTask:
    """The task, and the run's last event number when it was read (a stream follows from it)."""

    task: Task
    event_seq: int

    @property
    def state(self) -> int:
        return self.task.status.state


def task_state(run: Run) -> int:
    if run.status == RunStatus.QUEUED and run.started_at is None:
        return TaskState.TASK_STATE_SUBMITTED
    return STATES[run.status]


def agent_message(*, run: Run, text: str, suffix: str) -> Message:
    return Message(
        message_id=f"{run.pk}-{suffix}",
        context_id=str(run.conversation_id),
        task_id=str(run.pk),
        role=Role.ROLE_AGENT,
        parts=[Part(text=text)],
    )


def answer_artifact(text: str, parsed=None) -> Artifact:
    """The answer's text, and beside it as a data part the value it parsed to where the agent
    holds its answers to a schema (docs/quality.md)."""
    parts = [Part(text=text)]
    if parsed is not None:
        data = Value()
        json_format.ParseDict(parsed, data)
        parts.append(Part(data=data, media_type="application/json"))
    return Artifact(artifact_id=ANSWER_ARTIFACT, name=ANSWER_ARTIFACT, parts=parts)


def _waiting_text(run: Run) -> str:
    tools = sorted(
        set(
            Approval.objects.filter(run=run, status=Approval.Status.PENDING).values_list(
                "invocation__tool_name", flat=True
            )
        )
    )
    return _(
        "Waiting for approval: a person must approve the call of %(tools)s in Agentry's approval queue. "
        "Run %(run)s goes on after the decision; follow this task (SubscribeToTask) to see it."
    ) % {"tools": ", ".join(tools) or _("a tool"), "run": run.pk}


def _status_text(run: Run) -> str:
    if run.status == RunStatus.AWAITING_APPROVAL:
        return _waiting_text(run)
    if run.status in (RunStatus.FAILED, RunStatus.EXPIRED):
        return _("The run ended %(status)s: %(why)s") % {"status": run.status, "why": run.error or run.stop_reason}
    if run.status == RunStatus.CANCELLED:
        return _("The run was cancelled.")
    return ""


def task_of(run: Run) -> Task:
    """`run` (from runs_visible_to: its request and its answer read with it) as an A2A task."""
    status = TaskStatus(state=task_state(run))
    timestamp = run.finished_at or run.started_at or run.created_at
    status.timestamp.FromDatetime(timestamp)
    if text := _status_text(run):
        status.message.CopyFrom(agent_message(run=run, text=text, suffix="status"))
    history = []
    request = getattr(run, "request", None)
    if request is not None:
        history.append(
            Message(
                message_id=f"{run.pk}-request",
                context_id=str(run.conversation_id),
                task_id=str(run.pk),
                role=Role.ROLE_USER,
                parts=[Part(text=request.content)],
            )
        )
    artifacts = []
    output = getattr(run, "output", None)
    if output is not None:
        history.append(agent_message(run=run, text=output, suffix="answer"))
        artifacts.append(answer_artifact(output, run.output_parsed))
    metadata = Struct()
    metadata.update(
        {
            "agentry": {
                "run_id": str(run.pk),
                "status": run.status,
                "stop_reason": run.stop_reason,
                "usage": usage_values(run),
                "cost": str(run.cost),
            }
        }
    )
    return Task(
        id=str(run.pk),
        context_id=str(run.conversation_id),
        status=status,
        history=history,
        artifacts=artifacts,
        metadata=metadata,
    )


def run_visible(*, user, agent_id: int, task_id: str) -> Run | None:
    """The run `task_id` names if it is one of this agent's that the user may see (another
    workspace's, another user's or a malformed id: None, answered as an unknown task)."""
    try:
        pk = Run._meta.pk.to_python(task_id)
    except Exception:
        return None
    return runs_visible_to(user=user).filter(pk=pk, agent_id=agent_id).first()


def task_read(*, user, agent_id: int, task_id: str) -> RunTask | None:
    run = run_visible(user=user, agent_id=agent_id, task_id=task_id)
    if run is None:
        return None
    return RunTask(task_of(run), run.event_seq)
