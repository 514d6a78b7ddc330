"""Reads on runs: the timeline that the admin, the API and the pages all show."""

from django.db.models import OuterRef, QuerySet, Subquery

from conversations.models import Conversation, LLMCall, Message, Run, ToolInvocation


def run_timeline(*, run: Run) -> list[dict]:
    """Every model call attempt and tool invocation of the run, in the order they happened.

    Tool invocations follow the model call that asked for them; ordering by (iteration,
    attempt) then position keeps the steps as the loop took them.
    """
    steps = []
    calls = LLMCall.objects.filter(run=run).order_by("purpose", "iteration", "attempt")
    invocations = (ToolInvocation.objects.filter(run=run).select_related("approval__decided_by")
                   .order_by("llm_call_id", "position"))
    by_call: dict[int, list[ToolInvocation]] = {}
    for invocation in invocations:
        by_call.setdefault(invocation.llm_call_id, []).append(invocation)
    for call in sorted(calls, key=lambda c: (c.started_at, c.pk)):
        steps.append({"kind": "llm_call", "obj": call})
        for invocation in by_call.get(call.pk, []):
            steps.append({"kind": "tool_invocation", "obj": invocation})
    return steps


def _sees_everyones(user, permission: str) -> bool:
    # Read on every request from the live user row: a token of someone who lost staff or the
    # permission loses the reach with it.
    return user.is_active and user.is_staff and user.has_perm(permission)


def conversations_visible_to(*, user) -> QuerySet[Conversation]:
    """A user's own conversations; staff with the view permission see everyone's."""
    conversations = Conversation.objects.select_related("agent")
    return conversations if _sees_everyones(user, "conversations.view_conversation") else conversations.filter(owner=user)


def runs_visible_to(*, user) -> QuerySet[Run]:
    """Runs of the conversations the user may see, with what was asked and the final answer."""
    answer = Message.objects.filter(run_id=OuterRef("pk"), role=Message.Role.ASSISTANT, tool_calls__isnull=True)
    runs = Run.objects.select_related("agent", "agent_version", "request").annotate(
        output=Subquery(answer.order_by("-order").values("content")[:1])
    )
    return runs if _sees_everyones(user, "conversations.view_run") else runs.filter(conversation__owner=user)


def run_owned_by(*, run: Run, user) -> bool:
    """Whether the run belongs to one of the user's own conversations (seeing is not acting)."""
    return Conversation.objects.filter(pk=run.conversation_id, owner=user).exists()


def run_step_messages(*, run: Run) -> dict[int, Message]:
    """The assistant message each successful model call of the run produced, by call id."""
    return {m.llm_call_id: m for m in Message.objects.filter(run=run, llm_call__isnull=False)}
