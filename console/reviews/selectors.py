"""What the review page reads of a run besides its timeline: the conversation up to the run's
last message (with each message's attachments), its online scores and its feedback."""

from conversations.models import Message, Run, RunFeedback
from evals.models import OnlineScore

# The conversation is shown from this many messages before the run's end.
MESSAGES_SHOWN = 60


def run_conversation(*, run: Run) -> list[dict]:
    """The user's and the assistant's texts (and the parts they carried) up to the run's last
    message, oldest first; the run's own messages marked."""
    last = Message.objects.filter(run=run).order_by("-order").values_list("order", flat=True).first()
    messages = Message.objects.filter(
        conversation_id=run.conversation_id, role__in=[Message.Role.USER, Message.Role.ASSISTANT]
    )
    if last is not None:
        messages = messages.filter(order__lte=last)
    rows = list(
        messages.exclude(role=Message.Role.ASSISTANT, content="")
        .order_by("-order")
        .values("role", "content", "parts", "run_id")[:MESSAGES_SHOWN]
    )
    return [{**row, "this_run": row["run_id"] == run.pk} for row in reversed(rows)]


def run_scores(*, run: Run) -> list[OnlineScore]:
    return list(OnlineScore.objects.filter(run_id=run.pk).select_related("evaluator").order_by("created_at"))


def run_feedback(*, run: Run) -> RunFeedback | None:
    return RunFeedback.objects.filter(run_id=run.pk).first()
