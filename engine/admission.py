"""Admission: a posted message becomes a run, under the agent's limits per end user and its
workspace's budgets and quotas (engine.admission_limits: AdmissionRefused) and its concurrency
policy. Every way in posts through message_submit, message_post or conversation_start; runs the engine starts itself
(delegated children, forks, evaluation cases and replays) are exempt from the limits."""

import hashlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from agents.models import Agent, AgentVersion, ConcurrentMessages
from agents.releases import release_choice, version_by_id, version_target
from agents.services import agent_version_current
from agents.snapshot import snapshot_parse
from attachments.models import Attachment
from attachments.parts import parts_of
from attachments.services import attachment_uses
from conversations import events
from conversations.batch import Batch, event_add, row_insert
from conversations.events import EventType
from conversations.models import Conversation, Run, RunRequest, RunTrigger
from conversations.run_labels import run_labels
from conversations.selectors import conversation_lock_for_post
from conversations.services import conversation_create, messages_append
from engine.admission_limits import conversation_limits_check, end_user_limits_check, workspace_limits_check
from engine.admission_parts import parts_check
from engine.dispatch import ACTIVE_STATUSES, run_admit
from engine.runs import run_cancel
from engine.tracing import run_trace_fields


class ConversationBusy(Exception):
    """The agent rejects concurrent messages and the conversation has an active run."""

    def __init__(self, run: Run):
        super().__init__(f"conversation has an active run {run.pk} ({run.status})")
        self.run = run


class IdempotencyKeyReused(Exception):
    """The idempotency key was first used with other content."""


class AgentOutsideWorkspace(Exception):
    """The way in (a widget, a hook) acts in another workspace than the agent's: nothing is
    started. Its caller answers as for a missing object (404), saying nothing of the agent."""


def agent_workspace_check(agent: Agent, workspace_id: int | None) -> None:
    """A widget or hook of workspace B never opens a conversation with, or starts a run of, A's
    agent, whatever its row says (AgentOutsideWorkspace)."""
    if workspace_id is not None and agent.workspace_id != workspace_id:
        raise AgentOutsideWorkspace(f"agent {agent.pk} is not in workspace {workspace_id}")


@dataclass
class Submission:
    run: Run
    replayed: bool = False


def _content_hash(content: str, attachments: Sequence[Attachment] = ()) -> str:
    """What an idempotency key promises to repeat: the text, and the attachments sent with it."""
    posted = content if not attachments else "\n".join([content, *(str(a.pk) for a in attachments)])
    return hashlib.sha256(posted.encode()).hexdigest()


def _version_for(conversation: Conversation, target: str | int | AgentVersion | None) -> AgentVersion:
    """What the new run of `conversation` runs: the version asked for (testing a draft or an
    unpublished version), else the draft while the agent was never published (no extra read:
    as before releases), else the conversation's released version (agents.releases)."""
    agent: Agent = conversation.agent
    if isinstance(target, AgentVersion):
        return target  # an evaluation's run, pinned to the version under test
    if target is not None:
        return version_target(agent=agent, target=target)
    pinned, kept = _released(agent, conversation_id=conversation.pk, current_id=conversation.agent_version_id)
    if kept is not None and kept != conversation.agent_version_id:
        Conversation.objects.filter(pk=conversation.pk).update(agent_version_id=kept)
    return pinned


def _released(agent: Agent, *, conversation_id, current_id: int | None) -> tuple[AgentVersion, int | None]:
    """What a conversation's new run runs when none is asked for, and the version the
    conversation keeps: the draft, kept by none, while the agent was never published (no extra
    read: as before releases), else the released version agents.releases chooses for it."""
    if agent.published_version_id is None:
        return agent_version_current(agent=agent), None
    chosen = release_choice(agent=agent, conversation_id=conversation_id, current_id=current_id)
    return version_by_id(version_id=chosen), chosen


def message_submit(
    *,
    conversation: Conversation,
    content: str,
    user=None,
    idempotency_key: str = "",
    version: str | int | AgentVersion | None = None,
    sandbox: dict | None = None,
    trigger: str = RunTrigger.API,
    workspace_id: int | None = None,
    tags: Sequence[str] = (),
    metadata: dict[str, str] | None = None,
    attachments: Sequence[Attachment] = (),
) -> Submission:
    """A user message and the run that answers it, decided under a lock on the conversation.

    While another run of the conversation is active, the agent's policy applies: reject
    (ConversationBusy), enqueue (the new run waits and is admitted when the active one ends),
    or interrupt (the active runs are cancelled after commit; the new run waits for them to stop).
    The same idempotency key from the same user returns the run it first created.
    `version` ("draft", "published" or a number, or an AgentVersion) runs that version instead of
    the released one; a version the agent lacks raises agents.releases.UnknownVersion. `sandbox`
    marks the run as an evaluation's, with the tool results its case gives (engine.tool_step).
    `trigger` (RunTrigger) says which way in started the run; `workspace_id`, the workspace that
    way in acts in (a widget's, a hook's): another workspace's agent is AgentOutsideWorkspace.
    `tags` and `metadata`, checked by the caller (conversations.run_labels), go on the new run.
    `attachments` (stored by attachments.services.attachment_store, of the conversation's owner
    and end user) are the message's parts after its text, in order, recorded as the run's uses.

    First, before the lock, the agent's limits per end user for the conversation's end user
    (AdmissionRefused), as before every post: a post refused after them (busy, a replayed key)
    still counts in the minute's window. Internal triggers (evaluations) are exempt.
    Under the lock, once a replayed key has had its run, the workspace's budgets and quotas
    (AdmissionRefused), from its limits read with the conversation's row.
    """
    conversation_limits_check(conversation=conversation, trigger=trigger)
    digest = _content_hash(content, attachments)
    with transaction.atomic():
        # Only the conversation's row is locked: locking its agent's too would queue every post
        # to that agent behind one another. Its active runs are read after the lock.
        conversation, active = conversation_lock_for_post(
            conversation_id=conversation.pk, active_statuses=ACTIVE_STATUSES
        )
        agent_workspace_check(conversation.agent, workspace_id)
        if idempotency_key:
            previous = (
                RunRequest.objects.filter(conversation=conversation, user=user, idempotency_key=idempotency_key)
                .select_related("run")
                .first()
            )
            if previous is not None:
                if previous.content_hash != digest:
                    raise IdempotencyKeyReused(idempotency_key)
                return Submission(previous.run, replayed=True)
        agent = conversation.agent
        workspace_limits_check(workspace=agent.workspace, workspace_id=agent.workspace_id, trigger=trigger)
        policy = agent.concurrent_messages
        if active and policy == ConcurrentMessages.REJECT:
            raise ConversationBusy(active[0])
        pinned = _version_for(conversation, version)
        run = _run_submit(
            conversation=conversation,
            active=active,
            pinned=pinned,
            content=content,
            digest=digest,
            user=user,
            idempotency_key=idempotency_key,
            sandbox=sandbox,
            trigger=trigger,
            tags=tags,
            metadata=metadata,
            attachments=attachments,
        )
        if active and policy == ConcurrentMessages.INTERRUPT:
            # After commit and outside the conversation lock: the engine locks a run, then its
            # conversation, so cancelling here could deadlock with a step being recorded.
            ids = [r.pk for r in active]
            transaction.on_commit(lambda: runs_interrupt(run_ids=ids, by=user), robust=True)
    return Submission(run)


def _run_submit(
    *,
    conversation: Conversation,
    pinned: AgentVersion,
    content: str,
    user,
    active: Sequence[Run] = (),
    digest: str | None = None,
    idempotency_key: str = "",
    sandbox: dict | None = None,
    trigger: str,
    tags: Sequence[str] = (),
    metadata: dict[str, str] | None = None,
    attachments: Sequence[Attachment] = (),
    earlier_attachments: Sequence[Attachment] = (),
    output_schema: dict | None = None,
) -> Run:
    """In the caller's transaction: the run of `pinned` that answers `content` and carries
    `attachments`, waiting for the `active` runs if there are any, else admitted at once. The
    run, what was posted, its first event, its attachments' uses (`earlier_attachments`, those
    of the history it was posted with, first) and (admitted at once) its user message are one
    statement: the post's writes cost one round trip, not five. A part the pinned version's
    models cannot be sent refuses the post first (engine.admission_parts.PartNotTaken).
    `output_schema`: the schema the request holds this run's answer to (engine.answer_schema)."""
    snapshot = snapshot_parse(pinned.snapshot)
    sent = [*earlier_attachments, *attachments]
    if sent:
        # Before any write: a part the pinned models cannot be sent refuses the post (a 400).
        parts_check(snapshot, sent)
    timeout = snapshot["agent"]["run_timeout_seconds"]
    now = timezone.now()
    run = Run(
        conversation=conversation,
        agent=conversation.agent,
        agent_version=pinned,
        deadline=now + timedelta(seconds=timeout) if timeout else None,
        # A run admitted at once is enqueued with this commit: stamped here, not updated after.
        enqueued_at=None if active else now,
        sandbox=sandbox,
        trigger=trigger,
        # Its first event, run.queued, is written with it.
        event_seq=1,
        # A child of the caller's span when the request carried a traceparent.
        **run_trace_fields(),
        tags=list(tags),
        metadata=metadata or {},
        output_schema=output_schema,
    )
    batch = Batch()
    row_insert(batch, "new_run", run, returning=("id", "event_seq"), guard=True)
    for index, label in enumerate(run_labels(run)):
        row_insert(batch, f"label_{index}", label)
    parts = parts_of(attachments)
    request = RunRequest(
        run=run,
        conversation=conversation,
        user=user,
        content=content,
        parts=parts,
        idempotency_key=idempotency_key,
        content_hash=digest or _content_hash(content, attachments),
    )
    row_insert(batch, "request", request)
    if sent:
        uses = attachment_uses(
            run=run,
            workspace_id=conversation.agent.workspace_id,
            owner_id=conversation.owner_id,
            end_user=conversation.end_user,
            attachments=sent,
        )
        for index, use in enumerate(uses):
            row_insert(batch, f"attachment_{index}", use)
    payload = events.run_queued(agent_version=pinned.number, waiting_for=[str(r.pk) for r in active] or None)
    # No wake-up: the run's id reaches a client (who could stream it) only after this commits.
    event_add(batch, run_id=run.pk, type=EventType.RUN_QUEUED, payload=payload, wake=False)
    if not active:
        run_admit(run, content, parts=parts, stamped=True, batch=batch)
    batch.execute()
    return run


def conversation_start(
    *,
    agent: Agent,
    user,
    content: str,
    title: str = "",
    metadata: dict | None = None,
    history: list[dict] = (),
    end_user: str = "",
    trigger: str = RunTrigger.API,
    workspace_id: int | None = None,
    tags: Sequence[str] = (),
    run_metadata: dict[str, str] | None = None,
    attachments: Sequence[Attachment] = (),
    history_attachments: Sequence[Attachment] = (),
    output_schema: dict | None = None,
) -> Run:
    """A new conversation of `agent` whose first run answers `content`, after `history` (earlier
    messages that belong to no run), as message_submit would start it. What message_submit
    decides under the conversation's lock needs no lock here: nothing else sees the conversation
    before this commits, so it has no active run, and its version is chosen before it is written
    instead of written after. A chat completion starts this way on every request: its admission
    is the conversation's INSERT and the run's statement, in one transaction, after one read of
    the version (it was a savepoint, a locked read of the new row, a read of its runs and, for a
    published agent, an UPDATE of its version besides). The agent's limits per end user apply
    to `end_user` of `user` first, as in message_submit (AdmissionRefused), then its workspace's
    budgets and quotas: free for a workspace without limits when `agent` comes with its
    workspace (agents.selectors.agent_usable_by, a hook's or a schedule's read), else one read.
    An agent outside the caller's workspace (AgentOutsideWorkspace) is refused before all that.
    `metadata` is the conversation's; `tags` and `run_metadata` go on its run (message_submit).
    `attachments` are the new message's parts (message_submit); `history_attachments`, those the
    history's messages carry in their own `parts`, recorded as the run's uses too.
    `output_schema`: the schema its run's answer must match, over the version's (a chat
    completion's response_format: engine.answer_schema)."""
    agent_workspace_check(agent, workspace_id)
    end_user_limits_check(agent=agent, owner_id=user.pk if user else None, end_user=end_user, trigger=trigger)
    workspace = agent.workspace if Agent.workspace.is_cached(agent) else None
    workspace_limits_check(workspace=workspace, workspace_id=agent.workspace_id, trigger=trigger)
    conversation_id = uuid.uuid4()
    pinned, kept = _released(agent, conversation_id=conversation_id, current_id=None)
    with transaction.atomic():
        conversation = conversation_create(
            agent=agent,
            owner=user,
            title=title,
            metadata=metadata,
            pk=conversation_id,
            agent_version_id=kept,
            end_user=end_user,
        )
        if history:
            messages_append(conversation_id=conversation.pk, run_id=None, messages=list(history))
        return _run_submit(
            conversation=conversation,
            pinned=pinned,
            content=content,
            user=user,
            trigger=trigger,
            tags=tags,
            metadata=run_metadata,
            attachments=attachments,
            earlier_attachments=history_attachments,
            output_schema=output_schema,
        )


def message_post(
    *,
    conversation: Conversation,
    content: str,
    user=None,
    idempotency_key: str = "",
    version: str | int | None = None,
    trigger: str = RunTrigger.API,
) -> Run:
    return message_submit(
        conversation=conversation,
        content=content,
        user=user,
        idempotency_key=idempotency_key,
        version=version,
        trigger=trigger,
    ).run


def runs_interrupt(*, run_ids, by=None) -> None:
    for run in Run.objects.filter(pk__in=run_ids, status__in=ACTIVE_STATUSES):
        run_cancel(run=run, by=by)
