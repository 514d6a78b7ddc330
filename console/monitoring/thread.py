"""A conversation as one thread: every run's question and answers in order, its tool calls
folded, and its outcome, a page of runs at a time.

The page costs the same statements however long the conversation (three reads: its runs,
their messages, their tool calls): a long one is shown RUNS_PER_PAGE runs at a time, newest
page first, with a link to the earlier ones. Texts are cut at TEXT_CHARS in the database, so a
100,000-character answer is not loaded to show its start; the run's timeline has it whole."""

from django.db.models import F, Q
from django.db.models.functions import Substr

from conversations.models import Approval, Conversation, Message, Run, ToolInvocation

RUNS_PER_PAGE = 20
TEXT_CHARS = 4000
# At most this many messages and tool calls a page (a run of many steps can write many).
MESSAGES_PER_PAGE = 200
TOOL_CALLS_PER_PAGE = 300


def _label(choices, value: str) -> str:
    return str(choices(value).label) if value in choices.values else value


def _cut(text: str) -> str:
    return text[:TEXT_CHARS] + "…" if len(text) > TEXT_CHARS else text


def conversation_thread(*, conversation: Conversation, page: int) -> dict:
    """The runs of page `page` (1: the newest), oldest first, each with its messages (user and
    assistant, with text) and tool calls; whether earlier runs exist; on the oldest page, the
    messages before the first run."""
    start = (page - 1) * RUNS_PER_PAGE
    newest_first = list(
        Run.objects.filter(conversation=conversation)
        .order_by("-created_at", "-id")
        .select_related("agent_version")
        .annotate(question_start=Substr("request__content", 1, TEXT_CHARS + 1))
        .only(
            "id",
            "status",
            "stop_reason",
            "trigger",
            "total_tokens",
            "cost",
            "created_at",
            "started_at",
            "finished_at",
            "tags",
            "agent_version__number",
            "agent_version__playground",
        )[start : start + RUNS_PER_PAGE + 1]
    )
    earlier = len(newest_first) > RUNS_PER_PAGE
    runs = list(reversed(newest_first[:RUNS_PER_PAGE]))
    ids = [run.pk for run in runs]
    # The oldest page opens with the messages that belong to no run: the history a chat
    # completion request brought (its system text first).
    belongs = Q(run_id__in=ids) if earlier else Q(run_id__in=ids) | Q(run__isnull=True)
    messages = (
        Message.objects.filter(belongs, conversation=conversation)
        .filter(
            Q(role=Message.Role.SYSTEM) | Q(role=Message.Role.USER) | Q(role=Message.Role.ASSISTANT, content__gt="")
        )
        .order_by("order")
        .annotate(text=Substr("content", 1, TEXT_CHARS + 1))
        .values("run_id", "role", "text")[:MESSAGES_PER_PAGE]
    )
    calls = (
        ToolInvocation.objects.filter(run_id__in=ids)
        .order_by("created_at", "id")
        .values("run_id", "tool_name", "status", approval_status=F("approval__status"))[:TOOL_CALLS_PER_PAGE]
    )
    by_run = {run.pk: {"run": run, "messages": [], "tool_calls": []} for run in runs}
    opening = []
    for message in messages:
        text = {"role": message["role"], "text": _cut(message["text"])}
        (by_run[message["run_id"]]["messages"] if message["run_id"] else opening).append(text)
    for call in calls:
        approval = call["approval_status"]
        by_run[call["run_id"]]["tool_calls"].append(
            {
                "name": call["tool_name"],
                "status": call["status"],
                "status_text": _label(ToolInvocation.Status, call["status"]),
                "approval_text": _label(Approval.Status, approval) if approval else "",
            }
        )
    for entry in by_run.values():
        run = entry["run"]
        # A run still waiting its turn has no user message yet: what was posted stands for it.
        if not any(m["role"] == Message.Role.USER for m in entry["messages"]) and run.question_start is not None:
            entry["messages"].insert(0, {"role": Message.Role.USER, "text": _cut(run.question_start)})
    return {"opening": opening, "turns": list(by_run.values()), "earlier": earlier, "page": page}
