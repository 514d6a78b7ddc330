"""Forgetting an end user: their content leaves the record, the accounting stays.

Who is forgotten is one person (conversations.end_users.EndUser: an owner, None for the
platform's own end users, and the owner's id for them), found by end_user_q as every other
reader finds them.

What an end user said, and everything derived from it, is deleted or blanked: messages, model
calls' requests and responses, tool calls' arguments and results, approvals' arguments and
reasons, run events' payloads, guardrail matches, knowledge search queries, the text of the
requests that started the runs, the conversations' titles, metadata and summaries, their
feedback and every memory about them with its audit trail and uses.

Forgetting is confined to the workspace the person asking acts in (forget_scope): an
application's token acts in its own, so another workspace's conversations, runs, memories and
copies of the same end user stay; a superuser acting installation-wide forgets them everywhere.

Their words are followed wherever they were copied (end_user_reach): the runs of delegated
agents their runs started (asked what the end user asked), forks of any of these runs (and
forks of forks: the fork's copied steps, its edited message or tool result in Run.fork_change,
the recorded calls in Run.sandbox), every later run of a conversation reached (its history holds
the copies), and the copies kept by apps above this one, which register here at start-up
(run_copies_register; evals: the cases made from their runs, replays included, and the eval
runs that played those cases; notifications: the webhook deliveries of their runs' events).
Each copy is forgotten as the person's own rows are.

The rows themselves stay, anonymised (no end user, no content): conversations, runs, model
calls, tool invocations, approvals and events keep their status, tokens, cost and timings, so
every total, dashboard and hourly rollup (rebuilt from the ledger at any time) adds up to the
same figures before and after. Runs and model calls keep their errors too (the engine's and the
providers' diagnostics, which the error rollups count); a tool's error, which often quotes its
arguments, goes.

One transaction of set-based statements, one or two per kind of row whatever the number of rows
(not batches, as retention deletes in): an end user has tens of conversations, not millions, and
a half-forgotten end user is worse than a longer transaction. Their conversations are locked
first, so a message posted at the same time waits, then finds the conversation without its end
user; a run still in progress anywhere in reach (theirs, a fork, a replay) refuses the erasure
(EndUserBusy): its worker would go on writing content."""

import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from conversations.end_users import EndUser, end_user_q
from conversations.models import (
    TERMINAL_STATUSES,
    Approval,
    Conversation,
    EndUserErasure,
    GuardrailTrigger,
    LLMCall,
    Message,
    Run,
    RunEvent,
    RunFeedback,
    RunLabel,
    RunRequest,
    ToolInvocation,
)
from knowledge.models import KnowledgeSearch
from memory.models import Memory, MemoryChange, MemoryUse
from workspaces.access import binding_of, of_workspace

# What a forgotten model call's request and response become: not {} or null, which read as a
# call that sent nothing or got no answer.
ERASED = {"erased": True}


class EndUserUnknown(Exception):
    """The owner has no conversation, memory or feedback of this end user."""


class EndUserBusy(Exception):
    """A run of the end user is still in progress."""


def forget_scope(user) -> int | None:
    """The workspace that forgetting by `user` is confined to: the one they act in (a token's
    own, a member's choice). None, every workspace: a superuser acting installation-wide, or no
    one (the installation's own code). Anyone else acting nowhere has no end user to forget."""
    if user is None:
        return None
    binding = binding_of(user)
    if binding.workspace is not None:
        return binding.workspace.pk
    if user.is_superuser:
        return None
    raise EndUserUnknown


def _scoped(queryset, workspace_id: int | None):
    return queryset if workspace_id is None else of_workspace(queryset, workspace_id)


def end_user_digest(*, owner_id: int | None, end_user: str) -> str:
    """A keyed hash of (owner, end user): the erasure row proves which end user was forgotten to
    whoever knows the id, without holding it."""
    key = settings.SECRET_KEY.encode()
    return hmac.new(key, f"{owner_id}:{end_user}".encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class RunCopies:
    """Copies of runs' content kept by an app above this one, which forgetting must reach:
    `runs(run_ids=...)` the runs made from its copies of those runs (they hold the same words and
    are forgotten with them), `erase(run_ids=...)` blanks its copies of those runs and returns
    how many rows of each kind it changed (the erasure's counts)."""

    runs: Callable[..., set]
    erase: Callable[..., dict[str, int]]


# Filled at start-up by the apps above this one that copy runs (evals), from their
# AppConfig.ready(): this module imports none of them, and a process that loads such an app
# cannot forget an end user without reaching its copies.
_run_copies: list[RunCopies] = []


def run_copies_register(copies: RunCopies) -> None:
    """Reach `copies` in every erasure; registering the same again is a no-op (ready() may run
    more than once in a process, as in tests)."""
    if copies not in _run_copies:
        _run_copies.append(copies)


@dataclass(frozen=True)
class Reach:
    """What forgetting a person reaches: their own conversations, every conversation and run
    holding their words (theirs and the copies), and whether any memory is about them."""

    own_conversation_ids: frozenset
    conversation_ids: frozenset
    run_ids: frozenset
    has_memories: bool

    @property
    def empty(self) -> bool:
        return not self.own_conversation_ids and not self.has_memories


def _runs_of(conversation_ids: set, workspace_id: int | None) -> set:
    runs = _scoped(Run.objects.filter(conversation_id__in=conversation_ids), workspace_id)
    return set(runs.values_list("pk", flat=True))


def _copies_of(run_ids: set, workspace_id: int | None) -> set:
    """The runs made from these runs' content: delegated children, forks, and the runs made from
    the registered apps' copies; of the workspace only, when confined to one."""
    found = set(
        Run.objects.filter(Q(parent_run_id__in=run_ids) | Q(forked_from_id__in=run_ids)).values_list("pk", flat=True)
    )
    for copies in _run_copies:
        found |= copies.runs(run_ids=run_ids)
    if workspace_id is None or not found:
        return found
    return set(of_workspace(Run.objects.filter(pk__in=found), workspace_id).values_list("pk", flat=True))


def end_user_reach(*, person: EndUser, workspace_id: int | None = None, lock: bool = False) -> Reach:
    """Everything of `person` that forgetting them changes (in one workspace, or with None in
    every one): their conversations (locked with `lock`), all runs of these, every run copied
    from those (_copies_of), those runs' conversations and all their runs, and so on until
    nothing new is found (a few rounds: a fork of a fork of a delegated run is three)."""
    own = _scoped(Conversation.objects.filter(end_user_q(person)), workspace_id)
    own_ids = set((own.select_for_update() if lock else own).values_list("pk", flat=True))
    conversations, runs = set(), set()
    new_conversations, new_runs = set(own_ids), set()
    while new_conversations or new_runs:
        conversations |= new_conversations
        new_runs = (new_runs | _runs_of(new_conversations, workspace_id)) - runs
        runs |= new_runs
        copied = _copies_of(new_runs, workspace_id) - runs if new_runs else set()
        new_conversations = (
            set(Run.objects.filter(pk__in=copied).values_list("conversation_id", flat=True)) - conversations
        )
        new_runs = copied
    has_memories = (
        _scoped(Memory.objects.filter(end_user_q(person)), workspace_id).exists()
        or _scoped(MemoryChange.objects.filter(end_user_q(person)), workspace_id).exists()
    )
    return Reach(
        own_conversation_ids=frozenset(own_ids),
        conversation_ids=frozenset(conversations),
        run_ids=frozenset(runs),
        has_memories=has_memories,
    )


# What a fork's change may hold of the source's content (engine.forks._described): the edited
# tool result or user message, and the write results the forker gave. The kind, the version,
# the model and who forked stay.
FORK_CHANGE_CONTENT = ("result", "message", "write_results")
# What a sandbox holds of runs' content (Run.sandbox): the recorded calls given back, and the
# results given to write tools.
SANDBOX_CONTENT = {"recorded": [], "results": {}}


def _runs_erase(run_ids: set) -> dict[str, int]:
    """Blank the content a run row itself holds: a fork's change and a sandbox's recorded calls
    and given results (Python over the few rows that have them: JSON keys, not columns)."""
    rows = list(
        Run.objects.filter(pk__in=run_ids)
        .filter(Q(fork_change__isnull=False) | Q(sandbox__isnull=False))
        .only("pk", "fork_change", "sandbox")
    )
    changes = sandboxes = 0
    for run in rows:
        if isinstance(run.fork_change, dict) and set(run.fork_change) & set(FORK_CHANGE_CONTENT):
            run.fork_change = {k: v for k, v in run.fork_change.items() if k not in FORK_CHANGE_CONTENT}
            changes += 1
        if isinstance(run.sandbox, dict) and any(run.sandbox.get(k) for k in SANDBOX_CONTENT):
            run.sandbox = {**run.sandbox, **SANDBOX_CONTENT}
            sandboxes += 1
    Run.objects.bulk_update(rows, ["fork_change", "sandbox"], batch_size=500)
    return {"fork_changes_anonymised": changes, "sandboxes_anonymised": sandboxes}


def _tool_calls_without_arguments(tool_calls):
    """An assistant message's tool calls with their ids and names (what a tool message answers)
    and no arguments."""
    if not isinstance(tool_calls, list):
        return None
    kept = []
    for call in tool_calls:
        if not isinstance(call, dict):
            continue
        function = call.get("function") if isinstance(call.get("function"), dict) else {}
        kept.append(
            {
                "id": call.get("id", ""),
                "type": call.get("type", "function"),
                "function": {"name": function.get("name", ""), "arguments": "{}"},
            }
        )
    return kept


def _messages_erase(conversation_ids: set) -> int:
    messages = Message.objects.filter(conversation_id__in=conversation_ids)
    with_calls = list(messages.filter(tool_calls__isnull=False).only("pk", "tool_calls"))
    for message in with_calls:
        message.tool_calls = _tool_calls_without_arguments(message.tool_calls)
    Message.objects.bulk_update(with_calls, ["tool_calls"], batch_size=500)
    return messages.update(content="", screened_content=None, reasoning=None)


def _memories_delete(*, person: EndUser, run_ids: set, workspace_id: int | None) -> dict[str, int]:
    memories = _scoped(Memory.objects.filter(end_user_q(person)), workspace_id)
    uses = MemoryUse.objects.filter(Q(memory__in=memories.values("pk")) | Q(run_id__in=run_ids))
    changes = _scoped(MemoryChange.objects.filter(end_user_q(person) | Q(run_id__in=run_ids)), workspace_id)
    counts = {"memory_uses": uses.delete()[0], "memory_changes": changes.delete()[0]}
    counts["memories"] = memories.delete()[0]
    return counts


def end_user_forget(*, person: EndUser, requested_by, channel: str) -> EndUserErasure:
    """Forget the person (see the module's docstring) in the workspace `requested_by` acts in
    (forget_scope), and write the audit row saying who asked, through which channel, in which
    workspace, and how many rows of each kind were deleted or anonymised.
    Raises EndUserUnknown when there is nothing of theirs, EndUserBusy while a run in reach goes on."""
    workspace_id = forget_scope(requested_by)
    with transaction.atomic():
        reach = end_user_reach(person=person, workspace_id=workspace_id, lock=True)
        run_ids, conversation_ids = set(reach.run_ids), set(reach.conversation_ids)
        runs = Run.objects.filter(pk__in=run_ids)
        if runs.exclude(status__in=TERMINAL_STATUSES).exists():
            raise EndUserBusy(person.end_user)
        if reach.empty:
            raise EndUserUnknown(person.end_user)
        events = RunEvent.objects.filter(run_id__in=run_ids)
        memories = _memories_delete(person=person, run_ids=run_ids, workspace_id=workspace_id)
        # The tags and metadata a client attached to their runs may name them: blanked, with the
        # lookup rows the runs list filters by.
        labels_deleted = RunLabel.objects.filter(run_id__in=run_ids).delete()[0]
        runs.update(tags=[], metadata={})
        counts = {
            "feedback_deleted": RunFeedback.objects.filter(run_id__in=run_ids).delete()[0],
            **{f"{kind}_deleted": n for kind, n in memories.items()},
            **_runs_erase(run_ids),
            **{kind: n for copies in _run_copies for kind, n in copies.erase(run_ids=run_ids).items()},
            "messages_anonymised": _messages_erase(conversation_ids),
            "llm_calls_anonymised": LLMCall.objects.filter(run_id__in=run_ids).update(request=ERASED),
            "tool_invocations_anonymised": ToolInvocation.objects.filter(run_id__in=run_ids).update(
                raw_arguments="", arguments=None, validation_errors=[], result="", error=""
            ),
            "approvals_anonymised": Approval.objects.filter(run_id__in=run_ids).update(
                arguments={}, arguments_hash="", request_reason="", reason=""
            ),
            "events_anonymised": events.update(payload={}),
            "guardrail_triggers_anonymised": GuardrailTrigger.objects.filter(run_id__in=run_ids).update(
                matched="", samples=[]
            ),
            "knowledge_searches_anonymised": KnowledgeSearch.objects.filter(run_id__in=run_ids).update(
                query="", filters={}
            ),
            "run_requests_anonymised": RunRequest.objects.filter(
                Q(run_id__in=run_ids) | Q(conversation_id__in=conversation_ids)
            ).update(content="", content_hash="", idempotency_key=""),
            "run_labels_deleted": labels_deleted,
            "runs_anonymised": len(run_ids),
            # Of those, the forks (of their runs, or of a copy of one).
            "forked_runs_anonymised": runs.filter(forked_from__isnull=False).count(),
            "conversations_anonymised": Conversation.objects.filter(pk__in=conversation_ids).update(
                title="", metadata={}, context_summary="", end_user=""
            ),
        }
        LLMCall.objects.filter(run_id__in=run_ids, response__isnull=False).update(response=ERASED)
        return EndUserErasure.objects.create(
            workspace_id=workspace_id,
            end_user_digest=end_user_digest(owner_id=person.owner_id, end_user=person.end_user),
            requested_by=requested_by,
            requested_by_username=requested_by.get_username() if requested_by else "",
            channel=channel,
            counts=counts,
        )
