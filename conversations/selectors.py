"""Reads on runs: the timeline that the admin, the API and the pages all show, and what an
engine step reads."""

from functools import partial

from django.core.exceptions import ValidationError
from django.db import connection
from django.db.models import Case, Exists, OuterRef, Prefetch, Q, QuerySet, Subquery, Value, When

from agents.models import Agent
from agents.selectors import agents_usable, agents_usable_by
from conversations.models import Conversation, LLMCall, Message, Run, RunStatus, ToolInvocation
from conversations.workspace_usage import LIMIT_FIELDS
from platform_site.rows import Columns
from platform_site.statements import bound
from workspaces.access import binding_of, in_workspace
from workspaces.models import Workspace


def run_timeline(*, run: Run) -> list[dict]:
    """Every model call attempt and tool invocation of the run, in the order they happened.

    Tool invocations follow the model call that asked for them; ordering by (iteration,
    attempt) then position keeps the steps as the loop took them. A delegate call's child runs
    (agents as tools) come with it, as `child_runs`.
    """
    steps = []
    calls = LLMCall.objects.filter(run=run).order_by("purpose", "iteration", "attempt")
    invocations = (
        ToolInvocation.objects.filter(run=run)
        .select_related("approval__decided_by")
        .prefetch_related(Prefetch("child_runs", queryset=run_children_rows()))
        .order_by("llm_call_id", "position")
    )
    by_call: dict[int, list[ToolInvocation]] = {}
    for invocation in invocations:
        by_call.setdefault(invocation.llm_call_id, []).append(invocation)
    for call in sorted(calls, key=lambda c: (c.started_at, c.pk)):
        steps.append({"kind": "llm_call", "obj": call})
        for invocation in by_call.get(call.pk, []):
            steps.append({"kind": "tool_invocation", "obj": invocation})
    return steps


def run_children_rows() -> QuerySet[Run]:
    """Delegated runs (agents as tools) as their parents list them: who, how it went, in order."""
    return (
        Run.objects.select_related("agent")
        .only(
            "id",
            "status",
            "stop_reason",
            "parent_run",
            "parent_tool_invocation",
            "created_at",
            "started_at",
            "finished_at",
            "agent__name",
            "agent__slug",
        )
        .order_by("created_at")
    )


def _sees_everyones(user, permission: str) -> bool:
    # Read on every request from the live user row: a token of someone who lost staff or the
    # permission loses the reach with it.
    return user.is_active and user.is_staff and user.has_perm(permission)


def agent_config_visible_to(*, user) -> bool:
    """Whether the user may read agents' configuration, their system prompts included: staff with
    the view permission on agents, as the admin's agent pages ask. Seeing a run is not enough: a
    model call's request holds the agent's rendered system prompt and tool definitions, which
    GET /runs/{id}/steps/ never shows and the export shows to these users only."""
    return _sees_everyones(user, "agents.view_agent")


def sees_everyones_conversations(*, user) -> bool:
    """Whether `user` reads every conversation of the workspace, not only their own: staff with
    the view permission on conversations. What belongs to a conversation's identity (an
    attachment) is read by the same rule."""
    return _sees_everyones(user, "conversations.view_conversation")


def conversations_visible_to(*, user) -> QuerySet[Conversation]:
    """A user's own conversations; staff with the view permission see everyone's."""
    conversations = in_workspace(Conversation.objects.select_related("agent"), user)
    return conversations if sees_everyones_conversations(user=user) else conversations.filter(owner=user)


def conversation_for_post(*, user, conversation_id) -> Conversation | None:
    """The conversation a message is posted to, if the user sees it (conversations_visible_to),
    with `agent_usable`: whether the user may still use its agent (agents_usable_by). One read
    tells the API its 404, 403 and 409. Its statement is built once per kind of user and only
    bound afterwards (platform_site.statements): built through the ORM on every post, it took a
    sixth of the request's CPU."""
    try:
        pk = Conversation._meta.pk.to_python(conversation_id)
    except ValidationError:
        return None
    everyone = _sees_everyones(user, "conversations.view_conversation")
    workspace_id = binding_of(user).workspace_id
    build = partial(_for_post_sql, everyone=everyone, superuser=user.is_superuser)
    # A superuser who sees everyone's conversations reads one whoever they are.
    values = {"pk": pk} if everyone and user.is_superuser else {"pk": pk, "user": user.pk}
    if workspace_id is not None:
        # Another workspace's conversation is not found (404), whoever owns it.
        values["workspace"] = workspace_id
    elif not user.is_superuser:
        return None
    key = ("conversation for post", everyone, user.is_superuser, workspace_id is not None)
    sql, params = bound(key, build, values)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return None
    # Only these columns are read; the others load when asked for, as with QuerySet.only(). Each as
    # its field gives it (SQLite returns a UUID as text).
    columns = [Conversation._meta.get_field(name).to_python(value) for name, value in zip(_FOR_POST_FIELDS, row)]
    conversation = Conversation.from_db(connection.alias, _FOR_POST_COLUMNS, columns)
    conversation.agent_usable = bool(row[-1])
    return conversation


# In the model's field order, as Model.from_db takes them.
_FOR_POST_FIELDS = tuple(
    field.name for field in Conversation._meta.concrete_fields if field.name in ("id", "agent", "owner", "end_user")
)
_FOR_POST_COLUMNS = tuple(Conversation._meta.get_field(name).attname for name in _FOR_POST_FIELDS)


def _for_post_sql(values: dict, *, everyone: bool, superuser: bool) -> tuple[str, tuple]:
    conversations = Conversation.objects.filter(pk=values["pk"])
    if not everyone:
        conversations = conversations.filter(owner=values["user"])
    if "workspace" in values:
        conversations = conversations.filter(agent__workspace_id=values["workspace"])
    usable = agents_usable(user_id=values.get("user"), superuser=superuser).filter(pk=OuterRef("agent_id"))
    found = conversations.annotate(agent_usable=Exists(usable)).values_list(*_FOR_POST_COLUMNS, "agent_usable")
    return found.query.get_compiler(found.db).as_sql()


def _answers(run_id) -> QuerySet[Message]:
    # Tool-calling messages may carry text too ("let me look that up"), but only a message
    # without calls ends a run; newest first.
    return Message.objects.filter(run_id=run_id, role=Message.Role.ASSISTANT, tool_calls__isnull=True).order_by(
        "-order"
    )


def run_final_answer(*, run: Run) -> Message | None:
    """The answer a run delivered: its last assistant message without tool calls, once it has
    completed. A completed run always ends on one, its model's answer or the message that
    explains a limit (max iterations, tool loop, budget, timeout, empty answer); a failed,
    cancelled or expired run delivers none, even if a reply reached the ledger too late."""
    if run.status != RunStatus.COMPLETED:
        return None
    return _answers(run.pk).only("content", "llm_call_id").first()


def run_with_final_answer(*, run_id) -> tuple[Run, Message | None]:
    """The run, and the answer it delivered as run_final_answer finds it, in one read. Its
    statement is built once and then only bound (platform_site.statements): a request waiting
    for a run's outcome makes this read each time the run may have settled, and the ORM built
    the two reads it replaces in more time than they ran. Run.DoesNotExist if there is none."""
    sql, params = bound(("run with final answer",), _with_answer_sql, {"pk": Run._meta.pk.to_python(run_id)})
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        raise Run.DoesNotExist(f"Run {run_id} does not exist")
    run = _WITH_ANSWER_RUN.instance(row[:-2])
    content, llm_call_id = row[-2:]
    if run.status != RunStatus.COMPLETED or content is None:
        return run, None
    return run, Message(run_id=run.pk, role=Message.Role.ASSISTANT, content=content, llm_call_id=llm_call_id)


_WITH_ANSWER_RUN = Columns(Run, None, "r")


def _with_answer_sql(values: dict) -> tuple[str, tuple]:
    answers = _answers(OuterRef("pk"))
    found = (
        Run.objects.filter(pk=values["pk"])
        .annotate(
            answer_content=Subquery(answers.values("content")[:1]),
            answer_call=Subquery(answers.values("llm_call_id")[:1]),
        )
        .values_list(*_WITH_ANSWER_RUN.attnames, "answer_content", "answer_call")
    )
    return found.query.sql_with_params()


def run_final_answer_annotation() -> Case:
    """`run_final_answer`'s text as a queryset annotation, for lists of runs (one subquery)."""
    return Case(
        When(status=RunStatus.COMPLETED, then=Subquery(_answers(OuterRef("pk")).values("content")[:1])),
        default=Value(None),
    )


def runs_visible_to(*, user) -> QuerySet[Run]:
    """Runs of the conversations the user may see, with what was asked and the final answer."""
    runs = Run.objects.select_related("agent", "agent_version", "request").annotate(
        output=run_final_answer_annotation()
    )
    runs = in_workspace(runs, user)
    return runs if _sees_everyones(user, "conversations.view_run") else runs.filter(conversation__owner=user)


def run_owned_by(*, run: Run, user) -> bool:
    """Whether the run belongs to one of the user's own conversations (seeing is not acting)."""
    return Conversation.objects.filter(pk=run.conversation_id, owner=user).exists()


def run_step_messages(*, run: Run) -> dict[int, Message]:
    """The assistant message each successful model call of the run produced, by call id."""
    return {m.llm_call_id: m for m in Message.objects.filter(run=run, llm_call__isnull=False)}


# What a step reads: the run, its conversation's summary, and the conversation's messages.
_STEP_RUN = Columns(
    Run,
    (
        "id",
        "conversation",
        "agent",
        "agent_version",
        "status",
        "cancel_requested",
        "iterations",
        "total_tokens",
        "cost",
        "lease_owner",
        "deadline",
        "created_at",
        # Read with the run, so an evaluation's given tool results cost ordinary runs no query.
        "sandbox",
        # Agents as tools: where the run sits in its tree, and what its delegated runs used.
        "parent_run",
        "depth",
        "children_tokens",
        "children_cost",
        # The routing decision (engine.routing): later steps use the model it picked.
        "routing",
        # The schema a /v1 request gave its run (agents.output_schema): null for nearly every run.
        "output_schema",
    ),
    "r",
)
_STEP_CONVERSATION = Columns(Conversation, ("id", "context_summary", "context_summary_through"), "c")
# The run's columns a step reads, for a guard to return them (conversations.batch.run_guard).
STEP_RUN_COLUMNS = tuple(field.column for field in _STEP_RUN.fields)
_STEP_MESSAGE = Columns(
    Message,
    (
        "id",
        "conversation",
        "run",
        "llm_call",
        "order",
        "role",
        "content",
        "tool_calls",
        "tool_call_id",
        "name",
        "reasoning",
        # What the input guardrails let models see of it (engine.guardrails), read with it.
        "screened_content",
        # Its attachments (attachments.parts): null for a text message.
        "parts",
    ),
    "m",
)


def _step_from(source: str) -> str:
    """The FROM … of a step's read (its WHERE and ORDER BY follow), its run read from `source`."""
    return (
        f'FROM {source} r JOIN "{Conversation._meta.db_table}" c ON c."id" = r."conversation_id" '
        # Joined on c."id", not r."conversation_id": an outer join's condition gives the planner
        # no equivalence to carry over, and against r it scanned every message's entry in
        # message_order_unique for its "order" alone, filtering the conversation out after.
        f'LEFT JOIN "{Message._meta.db_table}" m '
        'ON m."conversation_id" = c."id" AND m."order" > c."context_summary_through" '
    )


_STEP_COLUMNS = f"{_STEP_RUN.sql}, {_STEP_CONVERSATION.sql}, {_STEP_MESSAGE.sql}"
_STEP_READ = f"SELECT {_STEP_COLUMNS} " + _step_from(f'"{Run._meta.db_table}"') + 'WHERE r."id" = %s ORDER BY m."order"'


def run_step_read(*, run_id) -> tuple[Run, list[Message]]:
    """The run (with its conversation's summary) and, in order, the conversation's messages that
    the summary does not cover: one statement, since every step of every run starts with it.
    Run.DoesNotExist if there is no such run."""
    with connection.cursor() as cursor:
        cursor.execute(_STEP_READ, [Run._meta.pk.get_db_prep_value(run_id, connection)])
        rows = cursor.fetchall()
    if not rows:
        raise Run.DoesNotExist(f"Run {run_id} does not exist")
    runs, conversations = len(_STEP_RUN.fields), len(_STEP_CONVERSATION.fields)
    run = _STEP_RUN.instance(rows[0][:runs])
    run.conversation = _STEP_CONVERSATION.instance(rows[0][runs : runs + conversations])
    messages = _STEP_MESSAGE.instances(row[runs + conversations :] for row in rows if row[runs + conversations])
    return run, messages


def run_step_row(values: dict, conversation: Conversation) -> Run:
    """The run as run_step_read would read it, from the STEP_RUN_COLUMNS a step's guard returned
    (by column); `conversation` is the one the step read, with its summary."""
    run = _STEP_RUN.instance([values[column] for column in STEP_RUN_COLUMNS])
    run.conversation = conversation
    return run


# What a posted message reads under its conversation's lock (engine.admission).
_POST_CONVERSATION = Columns(Conversation, ("id", "agent", "agent_version"), "c")
# Every column: a draft's current version is checked against all of them (agents.selectors).
_POST_AGENT = Columns(Agent, None, "a")
_POST_RUN = Columns(Run, ("id", "status"), "r")
# The agent's workspace's limits, for admission's check of them (engine.admission_limits): joined
# here, a workspace without limits costs a post no statement.
_POST_WORKSPACE = Columns(Workspace, ("id", *LIMIT_FIELDS), "w")


def conversation_lock_for_post(*, conversation_id, active_statuses) -> tuple[Conversation, list[Run]]:
    """Lock the conversation's row (FOR NO KEY UPDATE, on PostgreSQL) with its agent and the
    agent's workspace's limits (not locked), then read
    its runs in `active_statuses` (oldest first, with their status). Plain SQL: every post makes
    these reads, and the ORM built them in more time than they ran. Two statements, not one: a
    statement that waited for the lock still sees the database as it was when it began, so the
    run that the post holding the lock created would be missing from its join.
    Conversation.DoesNotExist if there is no such conversation."""
    conversations, agents, runs, workspaces = (m._meta.db_table for m in (Conversation, Agent, Run, Workspace))
    lock = " FOR NO KEY UPDATE OF c" if connection.features.has_select_for_update_of else ""
    key = Conversation._meta.pk.get_db_prep_value(conversation_id, connection)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {_POST_CONVERSATION.sql}, {_POST_AGENT.sql}, {_POST_WORKSPACE.sql} "
            f'FROM "{conversations}" c JOIN "{agents}" a ON a."id" = c."agent_id" '
            f'JOIN "{workspaces}" w ON w."id" = a."workspace_id" WHERE c."id" = %s{lock}',
            [key],
        )
        row = cursor.fetchone()
        if row is None:
            raise Conversation.DoesNotExist(f"Conversation {conversation_id} does not exist")
        statuses = ", ".join(["%s"] * len(active_statuses))
        cursor.execute(
            f'SELECT {_POST_RUN.sql} FROM "{runs}" r WHERE r."conversation_id" = %s AND r."status" IN ({statuses}) '
            'ORDER BY r."created_at"',
            [key, *active_statuses],
        )
        active = _POST_RUN.instances(cursor.fetchall())
    first = len(_POST_CONVERSATION.fields)
    second = first + len(_POST_AGENT.fields)
    conversation = _POST_CONVERSATION.instance(row[:first])
    conversation.agent = _POST_AGENT.instance(row[first:second])
    conversation.agent.workspace = _POST_WORKSPACE.instance(row[second:])
    return conversation, active


def conversation_messages_all(*, conversation_id) -> list[Message]:
    """Every message of the conversation, in order, with the fields run_step_read reads."""
    with connection.cursor() as cursor:
        cursor.execute(
            f'SELECT {_STEP_MESSAGE.sql} FROM "{Message._meta.db_table}" m WHERE m."conversation_id" = %s '
            'ORDER BY m."order"',
            [Conversation._meta.pk.get_db_prep_value(conversation_id, connection)],
        )
        return _STEP_MESSAGE.instances(cursor.fetchall())


def runs_for_export(*, user=None, agent=None, since=None, until=None) -> QuerySet[Run]:
    """The runs an export covers: those `user` may see (all of them for a command run by the
    operator, `user` None), of `agent` if given, created in [since, until)."""
    runs = Run.objects.all() if user is None else runs_visible_to(user=user)
    if agent is not None:
        runs = runs.filter(agent=agent)
    if since is not None:
        runs = runs.filter(created_at__gte=since)
    if until is not None:
        runs = runs.filter(created_at__lt=until)
    return runs


def agents_exportable_by(*, user) -> QuerySet[Agent]:
    """The agents an export's agent filter may name: all of them for those who see everyone's
    runs; otherwise those the user may use or has talked to, so that a slug answered "unknown"
    tells nothing about agents kept from the user."""
    if _sees_everyones(user, "conversations.view_run"):
        return in_workspace(Agent.objects.all(), user)
    talked_to = Conversation.objects.filter(owner=user, agent=OuterRef("pk"))
    return in_workspace(Agent.objects.all(), user).filter(
        Q(pk__in=agents_usable_by(user=user).values("pk")) | Q(Exists(talked_to))
    )
