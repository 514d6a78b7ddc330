"""Forgetting an end user: their content leaves the record, the accounting stays.

What an end user said, and everything derived from it, is deleted or blanked: messages, model
calls' requests and responses, tool calls' arguments and results, approvals' arguments and
reasons, run events' payloads, guardrail matches, knowledge search queries, the text of the
requests that started the runs, the conversations' titles, metadata and summaries, webhook
deliveries of their runs' events, their feedback and every memory about them with its audit
trail and uses. The runs of delegated agents their runs started (child runs and their
conversations) are forgotten with them: they were asked what the end user asked.

The rows themselves stay, anonymised (no end user, no content): conversations, runs, model
calls, tool invocations, approvals and events keep their status, tokens, cost and timings, so
every total, dashboard and hourly rollup (rebuilt from the ledger at any time) adds up to the
same figures before and after. Runs and model calls keep their errors too (the engine's and the
providers' diagnostics, which the error rollups count); a tool's error, which often quotes its
arguments, goes. Eval cases an operator made from a run are the operator's copies and are not
touched (evals sit above this app).

One transaction of set-based statements, one or two per kind of row whatever the number of rows
(not batches, as retention deletes in): an end user has tens of conversations, not millions, and
a half-forgotten end user is worse than a longer transaction. Their conversations are locked
first, so a message posted at the same time waits, then finds the conversation without its end
user; a run still in progress refuses the erasure (EndUserBusy): its worker would go on writing
content."""

import hashlib
import hmac

from django.conf import settings
from django.db import transaction
from django.db.models import Q

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
    RunRequest,
    ToolInvocation,
    WebhookAttempt,
    WebhookDelivery,
)
from knowledge.models import KnowledgeSearch
from memory.models import Memory, MemoryChange, MemoryUse

# What a forgotten model call's request and response become: not {} or null, which read as a
# call that sent nothing or got no answer.
ERASED = {"erased": True}


class EndUserUnknown(Exception):
    """The owner has no conversation, memory or feedback of this end user."""


class EndUserBusy(Exception):
    """A run of the end user is still in progress."""


def end_user_digest(*, owner_id: int | None, end_user: str) -> str:
    """A keyed hash of (owner, end user): the erasure row proves which end user was forgotten to
    whoever knows the id, without holding it."""
    key = settings.SECRET_KEY.encode()
    return hmac.new(key, f"{owner_id}:{end_user}".encode(), hashlib.sha256).hexdigest()


def _runs_with_delegates(run_ids: set) -> set:
    """The runs and every run they delegated to, down the tree (a few levels at most)."""
    found, frontier = set(run_ids), set(run_ids)
    while frontier:
        frontier = set(Run.objects.filter(parent_run_id__in=frontier).values_list("pk", flat=True)) - found
        found |= frontier
    return found


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


def _memories_delete(*, owner_id, end_user: str, run_ids: set) -> dict[str, int]:
    memories = Memory.objects.filter(owner_id=owner_id, end_user=end_user)
    uses = MemoryUse.objects.filter(Q(memory__in=memories.values("pk")) | Q(run_id__in=run_ids))
    changes = MemoryChange.objects.filter(Q(owner_id=owner_id, end_user=end_user) | Q(run_id__in=run_ids))
    counts = {"memory_uses": uses.delete()[0], "memory_changes": changes.delete()[0]}
    counts["memories"] = memories.delete()[0]
    return counts


def end_user_forget(*, owner_id: int | None, end_user: str, requested_by, channel: str) -> EndUserErasure:
    """Forget the owner's end user (see the module's docstring) and write the audit row saying who
    asked, through which channel, and how many rows of each kind were deleted or anonymised.
    Raises EndUserUnknown when there is nothing of theirs, EndUserBusy while a run goes on."""
    with transaction.atomic():
        own = list(
            Conversation.objects.select_for_update()
            .filter(owner_id=owner_id, end_user=end_user)
            .values_list("pk", flat=True)
        )
        run_ids = _runs_with_delegates(set(Run.objects.filter(conversation_id__in=own).values_list("pk", flat=True)))
        runs = Run.objects.filter(pk__in=run_ids)
        if runs.exclude(status__in=TERMINAL_STATUSES).exists():
            raise EndUserBusy(end_user)
        has_memories = (
            Memory.objects.filter(owner_id=owner_id, end_user=end_user).exists()
            or MemoryChange.objects.filter(owner_id=owner_id, end_user=end_user).exists()
        )
        if not own and not has_memories:
            raise EndUserUnknown(end_user)
        conversation_ids = set(own) | set(runs.values_list("conversation_id", flat=True))
        events = RunEvent.objects.filter(run_id__in=run_ids)
        deliveries = WebhookDelivery.objects.filter(run_event__in=events.values("pk"))
        counts = {
            "feedback_deleted": RunFeedback.objects.filter(run_id__in=run_ids).delete()[0],
            **{
                f"{kind}_deleted": n
                for kind, n in _memories_delete(owner_id=owner_id, end_user=end_user, run_ids=run_ids).items()
            },
            "webhook_attempts_deleted": WebhookAttempt.objects.filter(delivery__in=deliveries.values("pk")).delete()[0],
            "webhook_deliveries_deleted": deliveries.delete()[0],
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
            "runs_anonymised": len(run_ids),
            "conversations_anonymised": Conversation.objects.filter(pk__in=conversation_ids).update(
                title="", metadata={}, context_summary="", end_user=""
            ),
        }
        LLMCall.objects.filter(run_id__in=run_ids, response__isnull=False).update(response=ERASED)
        return EndUserErasure.objects.create(
            end_user_digest=end_user_digest(owner_id=owner_id, end_user=end_user),
            requested_by=requested_by,
            requested_by_username=requested_by.get_username() if requested_by else "",
            channel=channel,
            counts=counts,
        )
