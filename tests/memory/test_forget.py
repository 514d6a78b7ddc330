"""Forgetting an end user: afterwards no table of the database holds their id or what they said,
copies of their runs included (forks, forks of forks, replays and eval cases), the ledger's totals
are the same, other end users keep everything; the API, the admin action and the command line
agree on who the person is (the platform's own end users, with no owner, included), and ask for
what they must, and refuse what they must."""

import importlib
import uuid
from pathlib import Path

import pytest
from django.apps import apps as django_apps
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.db.models import Sum
from django.urls import reverse
from rest_framework.test import APIClient

import evals
from conversations.end_users import EndUser
from conversations.models import (
    Approval,
    Conversation,
    EndUserErasure,
    ForkChange,
    GuardrailTrigger,
    LLMCall,
    Message,
    Run,
    RunFeedback,
    ToolInvocation,
)
from conversations.monitoring.models import LLMCallHourly, RunHourly
from conversations.monitoring.rollups import rollups_refresh
from conversations.services import conversation_create
from engine.forks import ForkRequest, run_fork
from evals.models import EvalCase, EvalResult, EvalSuite
from evals.replays import ReplayFilter, replay_start
from evals.services import eval_case_from_run, eval_run_collect
from knowledge.models import KnowledgeBase, KnowledgeSearch
from memory.forget import ERASED, EndUserBusy, end_user_digest, end_user_forget
from memory.models import Memory, MemoryChange, MemoryUse
from memory.services import memory_held
from notifications.models import Webhook, WebhookAttempt, WebhookDelivery
from tests.knowledge.helpers import make_base
from tests.support.api import client_for
from tests.support.factories import make_user
from tests.support.llm import agent_on, echo_script
from tests.support.runs import advance, ask, start_run
from workspaces.defaults import default_workspace_id

pytestmark = pytest.mark.django_db

END_USER = "eu-QX81Z"
SECRET = "ZEBRA7431"  # what the end user said: in their messages, tool calls, memories, everything
CONTENT = f"{SECRET} 我住在成都"
OTHER_USER, OTHER_SECRET = "eu-OTHER5", "OKAPI2290"


def _script(secret: str) -> dict:
    # The model echoes what it was told through the test-echo tool, then answers with it.
    return echo_script(f"{secret} 成都", answer=f"好的，{secret}，记住了")


def _conversation(agent, owner, end_user: str, *, title: str = "") -> Conversation:
    conversation = conversation_create(agent=agent, owner=owner, title=title, metadata={"customer": end_user})
    Conversation.objects.filter(pk=conversation.pk).update(end_user=end_user)
    conversation.refresh_from_db()
    return conversation


def _end_user_rows(agent, owner, end_user: str, secret: str) -> list[Run]:
    """Two conversations of the end user, run through the engine (model calls, a tool call, events,
    webhook deliveries), and every other kind of row that can hold what they said."""
    runs = []
    for _ in range(2):
        conversation = _conversation(agent, owner, end_user, title=f"{secret} 天气")
        runs.append(ask(agent, f"{secret} 我住在成都", conversation))
    run = runs[0]
    assert run.status == "completed", run.error
    Conversation.objects.filter(pk=run.conversation_id).update(context_summary=f"用户说 {secret}")
    invocation = ToolInvocation.objects.filter(run=run).first()
    Approval.objects.create(
        invocation=invocation,
        run=run,
        tool_call_id=invocation.tool_call_id,
        status="approved",
        arguments={"text": secret},
        arguments_hash="0" * 64,
        request_reason=f"asked about {secret}",
        reason=f"ok {secret}",
    )
    GuardrailTrigger.objects.create(
        run=run, side="input", rule_id=1, kind="term", action="flag", matched=secret, samples=[secret]
    )
    base = KnowledgeBase.objects.filter(name="FAQ").first() or make_base()
    KnowledgeSearch.objects.create(base=base, run=run, tool_call_id="c1", query=f"{secret} 天气", top_k=3)
    RunFeedback.objects.create(run=run, rating=-1, comment=f"{secret} wrong city", created_by=owner)
    memory = Memory.objects.create(
        scope=f"agent:{agent.pk}", owner=owner, end_user=end_user, kind="fact", statement=f"{secret} 住在成都"
    )
    MemoryChange.objects.create(
        memory=memory,
        scope=memory.scope,
        owner=owner,
        end_user=end_user,
        action="add",
        source="extraction",
        after=memory.statement,
        run=run,
    )
    MemoryUse.objects.create(llm_call=LLMCall.objects.filter(run=runs[1]).first(), run=runs[1], memory=memory, rank=1)
    return runs


def _copies(runs: list[Run]) -> dict:
    """Every kind of copy of the end user's runs, each played through the engine: a fork with their
    message edited, a fork of that fork, a fork with an edited tool result and a write result, a
    later run in a fork's conversation (its history is theirs), a replay of their runs with its
    scores, and a case an operator made from one of their runs."""
    forker = User.objects.create_superuser(f"forker-{uuid.uuid4().hex[:6]}", password="x")
    edited = advance(
        run_fork(
            source=runs[0],
            request=ForkRequest(step=1, change=ForkChange.USER_MESSAGE, message=f"{SECRET} 我改住重庆"),
            user=forker,
        )
    )
    again = advance(run_fork(source=edited, request=ForkRequest(step=2), user=forker))
    call = ToolInvocation.objects.filter(run=runs[1]).first()
    result = advance(
        run_fork(
            source=runs[1],
            request=ForkRequest(
                step=1,
                change=ForkChange.TOOL_RESULT,
                tool_call_id=call.tool_call_id,
                result=f"{SECRET} 改过的结果",
                write_results={"test-echo": f"{SECRET} given"},
            ),
            user=forker,
        )
    )
    eval_run = replay_start(filter=ReplayFilter(agent=runs[0].agent), candidate=runs[0].agent_version, user=None)
    replays = [advance(row.run) for row in EvalResult.objects.filter(eval_run=eval_run)]
    assert len(replays) == 2 and {run.status for run in replays} == {"completed"}
    eval_run_collect(eval_run_id=eval_run.pk)
    later = ask(runs[0].agent, "再说一遍", Conversation.objects.get(pk=again.conversation_id))
    forks = [edited, again, result, later]
    assert {run.status for run in forks} == {"completed"}, [run.error for run in forks]
    eval_case_from_run(run=runs[0], suite=EvalSuite.objects.create(name="from feedback"), name="feedback")
    return {"forks": forks, "replays": replays}


def _tables_holding(needle: str) -> dict[str, int]:
    """Every table of the database whose rows, read as text (all columns), contain the needle."""
    found = {}
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names(cursor):
            name = connection.ops.quote_name(table)
            cursor.execute(f"SELECT count(*) FROM {name} AS t WHERE t::text LIKE %s", [f"%{needle}%"])
            count = cursor.fetchone()[0]
            if count:
                found[table] = count
    return found


def _totals(agent) -> dict:
    runs = Run.objects.filter(agent=agent).aggregate(tokens=Sum("total_tokens"), cost=Sum("cost"))
    calls = LLMCall.objects.filter(run__agent=agent).aggregate(tokens=Sum("total_tokens"), cost=Sum("cost"))
    rollups_refresh()
    hourly = LLMCallHourly.objects.filter(agent=agent).aggregate(tokens=Sum("total_tokens"), cost=Sum("cost"))
    ended = RunHourly.objects.filter(agent=agent).aggregate(runs=Sum("runs"))
    return {"runs": runs, "calls": calls, "hourly": hourly, "ended": ended, "count": Run.objects.count()}


@pytest.fixture
def agent_with_webhook(fake_llm):
    agent_with_webhook = agent_on(fake_llm, _script(SECRET))
    Webhook.objects.create(agent=agent_with_webhook, url="https://hooks.example.com/in", secret="s")
    return agent_with_webhook


@pytest.fixture
def owner():
    return make_user()


def test_after_forgetting_no_table_holds_the_end_users_id_or_words_and_totals_are_unchanged(
    agent_with_webhook, owner, fake_llm, no_enqueue
):
    runs = _end_user_rows(agent_with_webhook, owner, END_USER, SECRET)
    copies = _copies(runs)
    other_agent = agent_on(fake_llm, _script(OTHER_SECRET))
    (other,) = [ask(other_agent, f"{OTHER_SECRET} 我住在重庆", _conversation(other_agent, owner, OTHER_USER))]
    other_memory = Memory.objects.create(
        scope=f"agent:{other_agent.pk}", owner=owner, end_user=OTHER_USER, kind="fact", statement=OTHER_SECRET
    )
    WebhookAttempt.objects.create(delivery=WebhookDelivery.objects.filter(run_event__run=runs[0]).first(), number=1)
    assert set(_tables_holding(SECRET)) >= {
        "conversations_conversation",
        "conversations_message",
        "conversations_llmcall",
        "conversations_toolinvocation",
        "conversations_approval",
        "conversations_runevent",
        "conversations_runrequest",
        "conversations_guardrailtrigger",
        "conversations_runfeedback",
        "conversations_webhookdelivery",
        "knowledge_knowledgesearch",
        "memory_memory",
        "memory_memorychange",
        "evals_evalcase",
        "evals_evalresult",
    }
    assert _tables_holding(END_USER)
    before, other_before = _totals(agent_with_webhook), _totals(other_agent)
    other_rows = _tables_holding(OTHER_SECRET)
    reached = [*runs, *copies["forks"], *copies["replays"]]
    messages = Message.objects.filter(conversation__runs__in=reached).distinct().count()

    erasure = end_user_forget(person=EndUser(owner.pk, END_USER), requested_by=owner, channel="api")

    assert _tables_holding(SECRET) == {}
    assert _tables_holding(END_USER) == {}
    assert _totals(agent_with_webhook) == before and _totals(other_agent) == other_before
    # The other end user of the same application keeps every row.
    assert _tables_holding(OTHER_SECRET) == other_rows
    assert Memory.objects.filter(pk=other_memory.pk).exists()
    assert Conversation.objects.get(pk=other.conversation_id).end_user == OTHER_USER
    # The rows stay, anonymised: status, tokens and timings are kept.
    for run in runs:
        kept = Run.objects.get(pk=run.pk)
        assert kept.status == "completed" and kept.total_tokens == run.total_tokens and kept.finished_at
    call = LLMCall.objects.filter(run=runs[0]).first()
    assert call.request == ERASED and call.response == ERASED and call.total_tokens > 0
    assert set(Message.objects.filter(run=runs[0]).values_list("content", flat=True)) == {""}
    assert erasure.end_user_digest == end_user_digest(owner_id=owner.pk, end_user=END_USER)
    assert len(erasure.end_user_digest) == 64 and erasure.requested_by == owner
    assert erasure.requested_by_username == owner.username and erasure.channel == "api"
    # Their 2 conversations and runs, and the copies: 3 forks (the later run shares a fork's
    # conversation) and 2 replays.
    assert erasure.counts["conversations_anonymised"] == 2 + 3 + 2 and erasure.counts["runs_anonymised"] == 2 + 4 + 2
    assert erasure.counts["forked_runs_anonymised"] == 3 and erasure.counts["fork_changes_anonymised"] == 2
    assert erasure.counts["sandboxes_anonymised"] == 3 + 2  # the forks' and the replays'
    assert erasure.counts["eval_cases_anonymised"] == 2 + 1 and erasure.counts["eval_results_anonymised"] == 2
    assert erasure.counts["messages_anonymised"] == messages
    for copy in [*copies["forks"], *copies["replays"]]:
        kept = Run.objects.get(pk=copy.pk)
        assert kept.status == "completed" and kept.total_tokens == copy.total_tokens
    assert EvalCase.objects.filter(suite__replay__isnull=False).count() == 2
    assert erasure.counts["memories_deleted"] == 1 and erasure.counts["memory_changes_deleted"] == 1
    assert erasure.counts["memory_uses_deleted"] == 1 and erasure.counts["feedback_deleted"] == 1
    assert erasure.counts["webhook_deliveries_deleted"] >= 2 and erasure.counts["webhook_attempts_deleted"] == 1


def test_the_same_id_of_another_application_is_another_person(agent_with_webhook, owner):
    other_owner = make_user()
    _end_user_rows(agent_with_webhook, other_owner, END_USER, SECRET)
    kept = _tables_holding(SECRET)
    conversation = _conversation(agent_with_webhook, owner, END_USER)
    end_user_forget(person=EndUser(owner.pk, END_USER), requested_by=owner, channel="api")
    assert _tables_holding(SECRET) == kept
    assert Conversation.objects.filter(owner=other_owner, end_user=END_USER).count() == 2
    assert Conversation.objects.get(pk=conversation.pk).end_user == ""


def test_a_run_in_progress_refuses_the_erasure_and_changes_nothing(agent_with_webhook, owner):
    start_run(agent_with_webhook, CONTENT, _conversation(agent_with_webhook, owner, END_USER))
    with pytest.raises(EndUserBusy):
        end_user_forget(person=EndUser(owner.pk, END_USER), requested_by=owner, channel="api")
    assert Message.objects.filter(content=CONTENT).exists() and not EndUserErasure.objects.exists()


def test_delegated_runs_are_forgotten_with_the_run_that_started_them(agent_with_webhook, owner):
    (run, _second) = _end_user_rows(agent_with_webhook, owner, END_USER, SECRET)
    child_conversation = conversation_create(agent=agent_with_webhook, owner=owner, title=f"{SECRET} delegated")
    child = Run.objects.create(
        conversation=child_conversation,
        agent=agent_with_webhook,
        agent_version=run.agent_version,
        status="completed",
        parent_run=run,
        depth=1,
    )
    Message.objects.create(conversation=child_conversation, run=child, order=1, role="user", content=SECRET)
    end_user_forget(person=EndUser(owner.pk, END_USER), requested_by=owner, channel="api")
    assert _tables_holding(SECRET) == {}


# --- the API -----------------------------------------------------------------------------------


def test_the_api_forgets_the_callers_own_end_user_and_answers_with_the_erasure(agent_with_webhook, owner):
    _end_user_rows(agent_with_webhook, owner, END_USER, SECRET)
    response = client_for(owner).delete(f"/api/v1/end-users/{END_USER}/")
    assert response.status_code == 200, response.content
    body = response.json()
    erasure = EndUserErasure.objects.get()
    assert body["id"] == erasure.pk and body["channel"] == "api" and body["counts"] == erasure.counts
    assert body["end_user_digest"] == end_user_digest(owner_id=owner.pk, end_user=END_USER)
    assert END_USER not in response.content.decode()
    assert _tables_holding(SECRET) == {}
    # Forgotten: a second call finds nothing.
    assert client_for(owner).delete(f"/api/v1/end-users/{END_USER}/").status_code == 404


def test_an_id_holding_a_line_break_matches_no_route_and_is_404_in_the_error_shape(owner):
    response = client_for(owner).delete("/api/v1/end-users/a%0Ab/")
    assert response.status_code == 404 and set(response.json()) == {"message", "extra"}


def test_an_id_holding_a_slash_is_forgotten_too(agent_with_webhook, owner):
    _conversation(agent_with_webhook, owner, "tenant/42")
    response = client_for(owner).delete("/api/v1/end-users/tenant%2F42/")
    assert response.status_code == 200, response.content
    assert not Conversation.objects.filter(end_user="tenant/42").exists()


def test_the_api_never_reaches_another_applications_end_user(agent_with_webhook, owner):
    _end_user_rows(agent_with_webhook, owner, END_USER, SECRET)
    stranger = make_user(staff=True)
    stranger.user_permissions.add(Permission.objects.get(codename="forget_end_user"))
    response = client_for(stranger).delete(f"/api/v1/end-users/{END_USER}/")
    assert response.status_code == 404 and set(response.json()) == {"message", "extra"}
    assert Conversation.objects.filter(end_user=END_USER).count() == 2 and not EndUserErasure.objects.exists()


@pytest.mark.parametrize(
    "end_user",
    ["x" * 201, "a%09b", "nul%00", "%20%20", "line%E2%80%A8sep"],
)
def test_bad_end_user_ids_are_400(owner, end_user):
    response = client_for(owner).delete(f"/api/v1/end-users/{end_user}/")
    assert response.status_code == 400, response.content
    assert set(response.json()) == {"message", "extra"} and "end_user" in response.json()["message"]


def test_the_api_refuses_anonymous_callers_wrong_methods_and_busy_end_users(agent_with_webhook, owner):
    assert APIClient().delete(f"/api/v1/end-users/{END_USER}/").status_code == 401
    assert client_for(owner).get(f"/api/v1/end-users/{uuid.uuid4()}/").status_code in (404, 405)
    start_run(agent_with_webhook, CONTENT, _conversation(agent_with_webhook, owner, END_USER))
    response = client_for(owner).delete(f"/api/v1/end-users/{END_USER}/")
    assert response.status_code == 409 and "in progress" in response.json()["message"]


# --- the admin ---------------------------------------------------------------------------------


def _staff(*codenames: str) -> User:
    user = make_user(staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return user


def test_the_admin_action_confirms_then_forgets_and_records_who_asked(client, agent_with_webhook, owner):
    runs = _end_user_rows(agent_with_webhook, owner, END_USER, SECRET)
    operator = _staff("view_conversation", "forget_end_user")
    client.force_login(operator)
    changelist = reverse("admin:conversations_conversation_changelist")
    selected = {"action": "forget_end_user", "_selected_action": [runs[0].conversation_id]}
    page = client.post(changelist, selected)
    assert page.status_code == 200
    assert END_USER in page.content.decode() and owner.username in page.content.decode()
    assert not EndUserErasure.objects.exists()

    response = client.post(changelist, {**selected, "apply": "1"}, follow=True)
    assert response.status_code == 200
    erasure = EndUserErasure.objects.get()
    assert erasure.channel == "admin" and erasure.requested_by == operator
    # Both of the end user's conversations, not only the one selected.
    assert erasure.counts["conversations_anonymised"] == 2
    assert _tables_holding(SECRET) == {} and _tables_holding(END_USER) == {}


def test_without_the_forget_permission_the_action_is_not_offered_and_does_nothing(client, agent_with_webhook, owner):
    runs = _end_user_rows(agent_with_webhook, owner, END_USER, SECRET)
    client.force_login(_staff("view_conversation"))
    changelist = reverse("admin:conversations_conversation_changelist")
    assert "forget_end_user" not in client.get(changelist).content.decode()
    client.post(changelist, {"action": "forget_end_user", "_selected_action": [runs[0].conversation_id], "apply": "1"})
    assert not EndUserErasure.objects.exists() and Conversation.objects.filter(end_user=END_USER).count() == 2


def test_erasures_are_read_only_and_need_their_view_permission(client, owner, agent_with_webhook):
    _end_user_rows(agent_with_webhook, owner, END_USER, SECRET)
    erasure = end_user_forget(person=EndUser(owner.pk, END_USER), requested_by=owner, channel="api")
    changelist = reverse("admin:conversations_endusererasure_changelist")
    change = reverse("admin:conversations_endusererasure_change", args=[erasure.pk])
    client.force_login(_staff("view_conversation"))
    assert client.get(changelist).status_code == 403
    client.force_login(
        _staff("view_endusererasure", "add_endusererasure", "change_endusererasure", "delete_endusererasure")
    )
    assert client.get(changelist).status_code == 200
    page = client.get(change)
    assert page.status_code == 200 and erasure.end_user_digest in page.content.decode()
    assert client.post(change, {"channel": "admin"}).status_code == 403
    assert client.get(reverse("admin:conversations_endusererasure_add")).status_code == 403
    assert client.post(reverse("admin:conversations_endusererasure_delete", args=[erasure.pk])).status_code == 403
    assert EndUserErasure.objects.get().counts == erasure.counts


# --- copies: forks still going, delegated runs of forks --------------------------------------------


def test_a_fork_still_running_refuses_the_erasure_and_changes_nothing(agent_with_webhook, owner, no_enqueue):
    run = ask(agent_with_webhook, CONTENT, _conversation(agent_with_webhook, owner, END_USER))
    fork = run_fork(source=run, request=ForkRequest(step=1), user=None)
    assert fork.status == "queued"
    with pytest.raises(EndUserBusy):
        end_user_forget(person=EndUser(owner.pk, END_USER), requested_by=owner, channel="api")
    assert Message.objects.filter(run=fork, content=CONTENT).exists() and not EndUserErasure.objects.exists()
    response = client_for(owner).delete(f"/api/v1/end-users/{END_USER}/")
    assert response.status_code == 409 and "fork" in response.json()["message"]


def test_the_runs_a_fork_delegated_to_are_forgotten_with_it(agent_with_webhook, owner, no_enqueue):
    run = ask(agent_with_webhook, CONTENT, _conversation(agent_with_webhook, owner, END_USER))
    fork = advance(run_fork(source=run, request=ForkRequest(step=2), user=None))
    child_conversation = conversation_create(agent=agent_with_webhook, title=f"{SECRET} delegated by a fork")
    child = Run.objects.create(
        conversation=child_conversation,
        agent=agent_with_webhook,
        agent_version=fork.agent_version,
        status="completed",
        parent_run=fork,
    )
    Message.objects.create(conversation=child_conversation, run=child, order=1, role="user", content=SECRET)
    erasure = end_user_forget(person=EndUser(owner.pk, END_USER), requested_by=owner, channel="api")
    assert _tables_holding(SECRET) == {}
    assert erasure.counts["runs_anonymised"] == 3 and erasure.counts["conversations_anonymised"] == 3


# --- one person across the command line, the API and the admin ----------------------------------


def _platform_end_user(agent, secret: str = SECRET, conversations: int = 5) -> list[Conversation]:
    """An end user of the platform's own, as `agentry_chat --end-user` starts them (no owner): five
    conversations, one answered, and what the agent remembers of them."""
    started = [conversation_create(agent=agent, title=f"{secret} {n}", end_user=END_USER) for n in range(conversations)]
    ask(agent, f"{secret} 我住在成都", started[0])
    Memory.objects.create(
        scope=f"agent:{agent.pk}", owner=None, end_user=END_USER, kind="fact", statement=f"{secret} 住在成都"
    )
    return started


def _remembered(agent, owner_id) -> list[str]:
    """What a run of the agent for this end user would be shown."""
    return [
        m.statement
        for m in memory_held(
            workspace_id=default_workspace_id(), scope=f"agent:{agent.pk}", owner_id=owner_id, end_user=END_USER
        )
    ]


def test_the_admin_confirmation_counts_the_conversations_of_an_end_user_with_no_owner(client, agent_with_webhook):
    conversations = _platform_end_user(agent_with_webhook)
    client.force_login(_staff("view_conversation", "forget_end_user"))
    changelist = reverse("admin:conversations_conversation_changelist")
    selected = {"action": "forget_end_user", "_selected_action": [conversations[0].pk]}
    page = client.post(changelist, selected).content.decode()
    # Five conversations, one run.
    assert f"<td>{END_USER}</td><td>5</td><td>1</td>" in page and "platform&#x27;s own" in page

    client.post(changelist, {**selected, "apply": "1"})
    erasure = EndUserErasure.objects.get()
    assert erasure.counts["conversations_anonymised"] == 5 and erasure.counts["memories_deleted"] == 1
    assert _remembered(agent_with_webhook, None) == [] and _tables_holding(SECRET) == {}


def test_staff_holding_the_forget_permission_forget_an_end_user_with_no_owner_through_the_api(agent_with_webhook):
    _platform_end_user(agent_with_webhook)
    assert _remembered(agent_with_webhook, None) == [f"{SECRET} 住在成都"]
    staff = _staff("forget_end_user")
    response = client_for(staff).delete(f"/api/v1/end-users/{END_USER}/?owner=none")
    assert response.status_code == 200, response.content
    erasure = EndUserErasure.objects.get()
    assert response.json()["end_user_digest"] == end_user_digest(owner_id=None, end_user=END_USER)
    assert erasure.requested_by == staff and erasure.counts["conversations_anonymised"] == 5
    # The agent no longer remembers them, and nothing they said is left.
    assert (
        _remembered(agent_with_webhook, None) == []
        and _tables_holding(SECRET) == {}
        and _tables_holding(END_USER) == {}
    )
    assert client_for(staff).delete(f"/api/v1/end-users/{END_USER}/?owner=none").status_code == 404


@pytest.mark.parametrize(
    "caller, query, status",
    [
        ("token owner", "", 404),  # their own end users of that id: none
        ("token owner", "?owner=none", 403),
        ("staff without the permission", "?owner=none", 403),
        ("permission without staff", "?owner=none", 403),
        ("staff with the permission", "?owner=alice", 400),
    ],
)
def test_forgetting_an_end_user_with_no_owner_is_refused_to_everyone_else(
    agent_with_webhook, owner, caller, query, status
):
    _platform_end_user(agent_with_webhook)
    kept = _tables_holding(SECRET)
    user = {
        "token owner": owner,
        "staff without the permission": _staff("view_conversation"),
        "permission without staff": _staff("forget_end_user"),
        "staff with the permission": _staff("forget_end_user"),
    }[caller]
    if caller == "permission without staff":
        User.objects.filter(pk=user.pk).update(is_staff=False)
    response = client_for(user).delete(f"/api/v1/end-users/{END_USER}/{query}")
    assert response.status_code == status, response.content
    assert set(response.json()) == {"message", "extra"}
    assert _tables_holding(SECRET) == kept and not EndUserErasure.objects.exists()
    assert _remembered(agent_with_webhook, None) == [f"{SECRET} 住在成都"]


def test_no_owner_and_each_owner_are_different_people_of_the_same_id(agent_with_webhook, owner, fake_llm):
    _end_user_rows(agent_with_webhook, owner, END_USER, SECRET)
    _platform_end_user(agent_on(fake_llm, _script(OTHER_SECRET)), secret=OTHER_SECRET)
    owners_rows = _tables_holding(SECRET)
    # Another application's token reaches neither.
    assert client_for(make_user()).delete(f"/api/v1/end-users/{END_USER}/").status_code == 404
    # ?owner=none forgets the platform's end user only.
    response = client_for(_staff("forget_end_user")).delete(f"/api/v1/end-users/{END_USER}/?owner=none")
    assert response.status_code == 200 and response.json()["counts"]["conversations_anonymised"] == 5
    assert _tables_holding(OTHER_SECRET) == {} and _tables_holding(SECRET) == owners_rows
    assert Conversation.objects.filter(owner=owner, end_user=END_USER).count() == 2
    assert _remembered(agent_with_webhook, owner.pk) == [f"{SECRET} 住在成都"]
    # The owner's own token forgets theirs.
    assert client_for(owner).delete(f"/api/v1/end-users/{END_USER}/").status_code == 200
    assert _tables_holding(SECRET) == {} and _remembered(agent_with_webhook, owner.pk) == []


def test_the_command_line_speaks_only_for_the_platforms_own_end_user(agent_with_webhook, owner, no_enqueue):
    theirs = _conversation(agent_with_webhook, owner, END_USER)
    with pytest.raises(CommandError, match="not with end user"):
        call_command("agentry_chat", "你好", conversation=str(theirs.pk), end_user=END_USER, timeout=0.2)
    assert not Message.objects.filter(conversation=theirs).exists()
    # The platform's own conversation with that end user is theirs to continue (the message is
    # posted; no worker answers it here).
    own = conversation_create(agent=agent_with_webhook, end_user=END_USER)
    with pytest.raises(CommandError, match="still queued"):
        call_command("agentry_chat", "你好", conversation=str(own.pk), end_user=END_USER, timeout=0.2)
    assert Message.objects.filter(conversation=own, content="你好").exists()


def test_the_migration_links_the_replayed_cases_made_before_the_link_to_their_runs(
    agent_with_webhook, owner, no_enqueue
):
    run = ask(agent_with_webhook, CONTENT, _conversation(agent_with_webhook, owner, END_USER))
    eval_run = replay_start(filter=ReplayFilter(agent=agent_with_webhook), candidate=run.agent_version, user=None)
    suite = eval_run.suite
    advance(EvalResult.objects.get(eval_run=eval_run).run)
    EvalCase.objects.update(source_run=None)
    unlisted = EvalCase.objects.create(
        suite=suite, name=f"run {uuid.uuid4()}", turns=[{"role": "user", "content": "x"}]
    )
    [migration] = (Path(evals.__file__).parent / "migrations").glob("*_evalcase_source_run.py")
    importlib.import_module(f"evals.migrations.{migration.stem}").link_replayed_cases(django_apps, None)
    assert EvalCase.objects.get(name=f"run {run.pk}").source_run_id == run.pk
    assert EvalCase.objects.get(pk=unlisted.pk).source_run_id is None
    end_user_forget(person=EndUser(owner.pk, END_USER), requested_by=owner, channel="api")
    assert _tables_holding(SECRET) == {}
