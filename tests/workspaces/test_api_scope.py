"""The API acts in its token's workspace: every route of api/urls.py (read from the resolver, so
a route added later is swept too), the /v1 façade, widgets and hooks. Workspace B's objects
answer a token of A exactly as missing ones do, and nothing of B is read, written, counted or
named; each role of A does what its row of workspaces.roles allows."""

import json
import uuid
from datetime import UTC, datetime

import pytest
from asgiref.sync import async_to_sync
from django.test import Client
from django.urls import URLPattern, URLResolver, reverse
from django.utils import timezone

from api import urls as api_urls
from attachments.models import Attachment
from conversations.models import Approval, Conversation, Run, ToolInvocation
from conversations.services import conversation_create
from conversations.tokens import api_token_create
from engine.admission import AgentOutsideWorkspace, conversation_start
from engine.delegation import _refusal as delegation_refusal
from engine.forks import ForkInvalid, ForkRequest, run_fork
from evals.models import EvalRun, EvalSuite
from evals.replays import ReplayFilter, ReplayInvalid, replay_suite_create
from knowledge.keyword import term_counts
from memory.models import Memory
from memory.services import memory_search
from tests.support.factories import ModelConfigFactory, make_agent, make_user
from tests.support.ledger import ledger_call, ledger_run
from tests.support.runs import start_run
from triggers.hooks import hook_signature
from triggers.models import Hook
from widgets.models import Widget
from widgets.tokens import end_user_token_sign
from workspaces.defaults import default_workspace_id
from workspaces.membership import membership_set
from workspaces.models import Workspace
from workspaces.roles import Role

pytestmark = pytest.mark.django_db

MARK = "B-SECRET"
END_USER = "eu-shared"
METHODS = ("get", "post", "put", "patch", "delete")
# Authenticated by their own secrets, not an API token: a token of A is no credential there.
OWN_CREDENTIALS = {
    "hook",
    "widget-conversations",
    "widget-conversation",
    "widget-messages",
    "widget-run-events",
    "widget-attachments",
    "widget-attachment-content",
}
# Every route's rows are swept, the configuration audit's included (its rows carry a workspace).
AUDIT_ROWS: set[str] = set()


def _routes():
    """(name, parameter names) of every route under /api/v1/, read from the resolver."""
    found = []

    def walk(patterns):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns)
            elif isinstance(pattern, URLPattern) and pattern.name:
                inner = pattern.pattern
                names = set(getattr(inner, "converters", {})) | set(inner.regex.groupindex)
                found.append((pattern.name, frozenset(names)))

    walk(api_urls.urlpatterns)
    return sorted(set(found))


def _pending_approval(agent, conversation) -> Approval:
    run = ledger_run(agent, status="awaiting_approval", stop_reason="")
    Run.objects.filter(pk=run.pk).update(conversation=conversation)
    call = ledger_call(run, started_at=timezone.now())
    invocation = ToolInvocation.objects.create(
        run=run,
        llm_call=call,
        tool_call_id="call_1",
        tool_name="test-counter",
        arguments={"label": "x"},
        raw_arguments=json.dumps({"label": "x"}),
        status="awaiting_approval",
    )
    return Approval.objects.create(
        run=run, invocation=invocation, tool_call_id="call_1", arguments={"label": "x"}, arguments_hash="h"
    )


@pytest.fixture
def world():
    a = Workspace.objects.get(pk=default_workspace_id())
    b = Workspace.objects.create(name="Beta", slug="beta")
    # The owner of A is an owner of B too: only the token's workspace keeps B's objects out.
    both = make_user(staff=True)
    membership_set(user=both, workspace=a, role=Role.OWNER)
    membership_set(user=both, workspace=b, role=Role.OWNER)
    members = {Role.OWNER: both}
    for role in (Role.BUILDER, Role.OPERATOR, Role.APPROVER, Role.VIEWER):
        members[role] = make_user(staff=True)
        membership_set(user=members[role], workspace=a, role=role)
    model_b = ModelConfigFactory(workspace=b, name=f"{MARK}-model")
    agent_b = make_agent(
        workspace=b, model_config=model_b, slug="b-agent", name=f"{MARK}-agent", memory_space="support"
    )
    agent_a = make_agent(workspace=a, slug="a-agent", memory_space="support")
    conversation_b = conversation_create(agent=agent_b, owner=both, title=f"{MARK}-title", end_user=END_USER)
    run_b = ledger_run(agent_b)
    Run.objects.filter(pk=run_b.pk).update(conversation=conversation_b)
    approval_b = _pending_approval(agent_b, conversation_b)
    memory_b = Memory.objects.create(
        workspace=b,
        scope="support",
        owner=both,
        end_user=END_USER,
        kind="fact",
        statement=f"{MARK}-memory",
        terms=term_counts(f"{MARK}-memory"),
    )
    suite_b = EvalSuite.objects.create(workspace=b, name=f"{MARK}-suite")
    eval_run_b = EvalRun.objects.create(suite=suite_b, agent_version=agent_b.versions.first(), created_by=both)
    widget_b = Widget.objects.create(
        workspace=b, agent=agent_b, name=f"{MARK}-widget", secret="wsec_" + "b" * 40, owner=both
    )
    hook_b = Hook.objects.create(
        workspace=b, agent=agent_b, name=f"{MARK}-hook", secret="whsec_b", message="{{ payload.note }}", owner=both
    )
    attachment_b = Attachment.objects.create(
        workspace=b,
        owner=both,
        end_user=END_USER,
        kind="image",
        media_type="image/png",
        size=1,
        sha256="0" * 64,
        name=f"{MARK}-photo.png",
        storage_key=f"sweep/{uuid.uuid4().hex}",
    )
    return {
        "a": a,
        "b": b,
        "members": members,
        "attachment_b": attachment_b,
        "agent_a": agent_a,
        "agent_b": agent_b,
        "model_b": model_b,
        "conversation_b": conversation_b,
        "run_b": run_b,
        "approval_b": approval_b,
        "memory_b": memory_b,
        "suite_b": suite_b,
        "eval_run_b": eval_run_b,
        "widget_b": widget_b,
        "hook_b": hook_b,
    }


def _token(user, workspace, **fields) -> str:
    return api_token_create(user=user, name="sweep", workspace=workspace, **fields)[1]


def _ids(world) -> dict:
    """The path parameters naming B's objects, by route name prefix and parameter."""
    return {
        "pk": {
            "conversation": world["conversation_b"].pk,
            "run": world["run_b"].pk,
            "approval": world["approval_b"].pk,
            "eval-suite": world["suite_b"].pk,
            "eval-run": world["eval_run_b"].pk,
            "end-user-memory": world["memory_b"].pk,
        },
        "slug": world["agent_b"].slug,
        "run_id": world["run_b"].pk,
        "conversation_id": world["conversation_b"].pk,
        "widget_id": world["widget_b"].pk,
        "hook_id": world["hook_b"].pk,
        "attachment_id": world["attachment_b"].pk,
        "end_user": END_USER,
    }


MISSING = {
    "pk": {"eval-suite": 987654, "eval-run": 987654},
    "slug": "no-such-agent",
    "end_user": END_USER,
}


def _kwargs(name: str, params, ids: dict) -> dict:
    kwargs = {}
    for param in params:
        value = ids.get(param, uuid.uuid4())
        if isinstance(value, dict):
            prefix = max((p for p in value if name.startswith(p)), key=len, default=None)
            value = value.get(prefix, uuid.uuid4()) if prefix else uuid.uuid4()
        kwargs[param] = value
    return kwargs


def _body(response) -> str:
    if not getattr(response, "streaming", False):
        return response.content.decode()
    content = response.streaming_content
    if hasattr(content, "__aiter__"):

        async def read():
            return b"".join([chunk async for chunk in content])

        return async_to_sync(read)().decode()
    return b"".join(content).decode()


def _send(client, method, url, payload, token):
    call = getattr(client, method)
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    if method == "get":
        return call(url, **headers)
    return call(url, json.dumps(payload), content_type="application/json", **headers)


def _payload(world, named: bool) -> dict:
    """A body naming B's objects (or missing ones) wherever a route takes one."""
    return {
        "agent": world["agent_b"].slug if named else "no-such-agent",
        "suite": world["suite_b"].pk if named else 987654,
        "model_config": world["model_b"].pk if named else 987654,
        "step": 1,
        "change": "model",
        "content": "hello",
        "decision": "approve",
        "rating": 1,
        "name": f"made-{uuid.uuid4().hex[:8]}",
        "title": "retitled",
    }


def _b_identifiers(world) -> list[str]:
    return [
        MARK,
        str(world["conversation_b"].pk),
        str(world["run_b"].pk),
        str(world["memory_b"].pk),
        str(world["widget_b"].pk),
        str(world["hook_b"].pk),
        str(world["attachment_b"].pk),
        world["agent_b"].slug,
    ]


# The view reads on threads of its own (the async views): the rows must be committed.
@pytest.mark.django_db(transaction=True)
def test_every_route_answers_another_workspace_s_objects_as_missing_ones(world):
    routes = _routes()
    names = {name for name, _params in routes}
    # The resolver is read, not a list kept here: these are some of what it must hold.
    assert {"run-detail", "run-events", "conversation-messages", "approval-decision", "end-user-memory"} <= names
    client = Client()
    conversations_of_b = Conversation.objects.filter(agent__workspace=world["b"]).count()
    for role, user in world["members"].items():
        token = _token(user, world["a"])
        for name, params in routes:
            b_kwargs, missing_kwargs = _kwargs(name, params, _ids(world)), _kwargs(name, params, MISSING)
            b_url, missing_url = reverse(name, kwargs=b_kwargs), reverse(name, kwargs=missing_kwargs)
            for method in METHODS:
                where = f"{role} {method.upper()} {b_url}"
                answered = _send(client, method, b_url, _payload(world, named=True), token)
                missing = _send(client, method, missing_url, _payload(world, named=False), token)
                body = _body(answered)
                if name not in AUDIT_ROWS:
                    sent = {str(v) for v in b_kwargs.values()} | {world["agent_b"].slug}
                    leaked = [marker for marker in _b_identifiers(world) if marker in body and marker not in sent]
                    assert not leaked, f"{where}: {leaked} in {body[:300]}"
                    assert MARK not in body, f"{where}: {body[:300]}"
                if name in OWN_CREDENTIALS:
                    assert answered.status_code in (401, 403, 404, 405), where
                    continue
                assert answered.status_code == missing.status_code, f"{where}: {answered.status_code} {body[:300]}"
                if answered.status_code >= 400 and answered.status_code != 429:
                    # The same words as for a missing object, the names swapped back.
                    expected = _body(missing)
                    for param, value in missing_kwargs.items():
                        expected = expected.replace(str(value), str(b_kwargs[param]))
                    for field in ("agent", "suite", "model_config"):
                        expected = expected.replace(
                            str(_payload(world, False)[field]), str(_payload(world, True)[field])
                        )
                    assert body == expected, f"{where}: {body[:300]} != {expected[:300]}"
    # Nothing of B was written or changed.
    assert Conversation.objects.filter(agent__workspace=world["b"]).count() == conversations_of_b
    assert Approval.objects.get(pk=world["approval_b"].pk).status == Approval.Status.PENDING
    assert Memory.objects.filter(pk=world["memory_b"].pk).exists()
    assert EvalSuite.objects.filter(workspace=world["b"]).count() == 1
    assert Conversation.objects.get(pk=world["conversation_b"].pk).title == f"{MARK}-title"


# The /v1 views read on threads of their own: the rows must be committed.
@pytest.mark.django_db(transaction=True)
def test_the_v1_facade_lists_and_runs_only_the_workspace_s_agents(world):
    client = Client()
    headers = {"HTTP_AUTHORIZATION": f"Bearer {_token(world['members'][Role.OWNER], world['a'])}"}
    runs_before = Run.objects.count()
    listed = client.get("/v1/models", **headers)
    assert listed.status_code == 200, listed.content
    assert [m["id"] for m in listed.json()["data"]] == ["a-agent"]

    def complete(model):
        body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
        return client.post("/v1/chat/completions", json.dumps(body), content_type="application/json", **headers)

    other, unknown = complete("b-agent"), complete("no-such-agent")
    assert other.status_code == unknown.status_code == 404
    assert other.content.decode() == unknown.content.decode().replace("no-such-agent", "b-agent")
    assert Run.objects.count() == runs_before


def test_a_shared_memory_space_name_in_two_workspaces_is_two_spaces(world):
    owner = world["members"][Role.OWNER]
    args = {"scope": "support", "owner_id": owner.pk, "end_user": END_USER, "query": "secret", "limit": 5}
    assert memory_search(workspace_id=world["a"].pk, **args) == []
    assert [m.pk for m in memory_search(workspace_id=world["b"].pk, **args)] == [world["memory_b"].pk]
    # Through the API: the token of A lists none of B's, even filtered by A's agent of that space.
    client = Client(HTTP_AUTHORIZATION=f"Bearer {_token(owner, world['a'])}")
    for query in ("", "?agent=a-agent"):
        listed = client.get(f"/api/v1/end-users/{END_USER}/memories/{query}")
        assert listed.status_code == 200 and listed.json()["results"] == []
    gone = client.delete(f"/api/v1/end-users/{END_USER}/memories/{world['memory_b'].pk}/")
    assert gone.status_code == 404 and Memory.objects.filter(pk=world["memory_b"].pk).exists()


def test_a_widget_or_hook_of_b_never_starts_a_run_of_a_s_agent(world):
    agent_a, b = world["agent_a"], world["b"]
    before = Run.objects.count()
    # Its row names A's agent (a fault the model's clean keeps out); admission refuses it all the same.
    widget = Widget.objects.create(workspace=b, agent=agent_a, name="w", secret="wsec_" + "c" * 40, owner=make_user())
    client = Client(HTTP_AUTHORIZATION=f"Bearer {end_user_token_sign(widget=widget, end_user='alice')}")
    opened = client.post(f"/api/v1/widget/{widget.pk}/conversations/", {}, content_type="application/json")
    if opened.status_code in (200, 201):
        url = f"/api/v1/widget/{widget.pk}/conversations/{opened.json()['id']}/messages/"
        sent = client.post(url, {"content": "hi"}, content_type="application/json")
        assert sent.status_code == 404
    secret = "whsec_cross"
    hook = Hook.objects.create(workspace=b, agent=agent_a, name="h", secret=secret, message="{{ payload.note }}")
    body = json.dumps({"note": "hi"}).encode()
    stamp = str(int(datetime.now(UTC).timestamp()))
    delivered = Client().post(
        f"/api/v1/hooks/{hook.pk}/",
        body,
        content_type="application/json",
        HTTP_X_AGENTRY_TIMESTAMP=stamp,
        HTTP_X_AGENTRY_SIGNATURE=hook_signature(secret=secret, timestamp=stamp, body=body),
        HTTP_X_AGENTRY_DELIVERY="d-1",
    )
    assert delivered.status_code == 404
    assert Run.objects.count() == before
    with pytest.raises(AgentOutsideWorkspace):
        conversation_start(agent=agent_a, user=None, content="hi", workspace_id=b.pk)


def test_a_delegate_of_another_workspace_is_refused_at_call_time(world):
    run = ledger_run(world["agent_a"])
    spec = {"name": "b_helper", "delegate": {"agent_id": world["agent_b"].pk}}
    refusal = delegation_refusal(run=run, spec=spec)
    assert refusal is not None and "no longer available" in refusal and MARK not in refusal


def test_a_fork_picks_no_model_config_of_another_workspace(world):
    owner = world["members"][Role.OWNER]
    source = ledger_run(world["agent_a"])
    model_b = world["model_b"]
    with pytest.raises(ForkInvalid) as refused:
        run_fork(source=source, user=None, request=ForkRequest(step=1, change="model", model_config_id=model_b.pk))
    assert MARK not in str(refused.value)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {_token(owner, world['a'])}")
    answered = client.post(
        f"/api/v1/runs/{source.pk}/fork/",
        json.dumps({"step": 1, "change": "model", "model_config": model_b.pk}),
        content_type="application/json",
    )
    assert answered.status_code in (400, 404) and MARK not in answered.content.decode()


def test_a_replay_judges_with_no_model_config_of_another_workspace(world):
    ended = start_run(world["agent_a"], "hello")
    Run.objects.filter(pk=ended.pk).update(status="completed", stop_reason="final_answer")
    chosen = ReplayFilter(agent=world["agent_a"])
    with pytest.raises(ReplayInvalid) as refused:
        replay_suite_create(filter=chosen, rubric="Helpful?", judge=world["model_b"])
    assert MARK not in str(refused.value)
    suite = replay_suite_create(filter=chosen)
    assert suite.workspace_id == world["a"].pk


# What each role of A may do through the API (workspaces.roles.role_permissions).
ROLE_ROWS = {
    Role.OWNER: {"start": True, "decide": True, "cancel_others": True, "memories": True},
    Role.BUILDER: {"start": True, "decide": False, "cancel_others": False, "memories": True},
    Role.OPERATOR: {"start": True, "decide": True, "cancel_others": True, "memories": True},
    Role.APPROVER: {"start": False, "decide": True, "cancel_others": False, "memories": False},
    Role.VIEWER: {"start": False, "decide": False, "cancel_others": False, "memories": True},
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("role", list(ROLE_ROWS))
def test_each_role_does_what_its_row_says(world, role):
    row, user, agent = ROLE_ROWS[role], world["members"][role], world["agent_a"]
    client = Client(HTTP_AUTHORIZATION=f"Bearer {_token(user, world['a'])}")

    def post(url, payload):
        return client.post(url, json.dumps(payload), content_type="application/json")

    assert client.get("/api/v1/runs/").status_code == 200
    created = post("/api/v1/conversations/", {"agent": agent.slug})
    assert created.status_code == (201 if row["start"] else 403)
    own = conversation_create(agent=agent, owner=user)
    posted = post(f"/api/v1/conversations/{own.pk}/messages/", {"content": "hello"})
    assert posted.status_code == (202 if row["start"] else 403)
    if not row["start"]:  # (one that may would wait for its run's answer)
        asked = {"model": agent.slug, "messages": [{"role": "user", "content": "x"}]}
        assert post("/v1/chat/completions", asked).status_code == 403
    approval = _pending_approval(agent, conversation_create(agent=agent, owner=make_user()))
    decided = post(f"/api/v1/approvals/{approval.pk}/decision/", {"decision": "reject", "reason": "no"})
    if row["decide"]:
        assert decided.status_code == 200
    else:
        assert decided.status_code in (403, 404)
        assert Approval.objects.get(pk=approval.pk).status == Approval.Status.PENDING
    others = ledger_run(agent, status="queued", stop_reason="")
    cancelled = post(f"/api/v1/runs/{others.pk}/cancel/", {})
    assert (cancelled.status_code in (200, 202)) == row["cancel_others"], cancelled.content
    memories = client.get(f"/api/v1/end-users/{END_USER}/memories/")
    assert memories.status_code == (200 if row["memories"] else 403)


@pytest.mark.django_db(transaction=True)
def test_a_token_s_scopes_and_role_narrow_what_its_owner_may_do(world):
    owner, agent = world["members"][Role.OWNER], world["agent_a"]
    own = conversation_create(agent=agent, owner=owner)
    for fields in ({"scopes": ["approvals"]}, {"role": Role.VIEWER}):
        client = Client(HTTP_AUTHORIZATION=f"Bearer {_token(owner, world['a'], **fields)}")
        posted = client.post(
            f"/api/v1/conversations/{own.pk}/messages/", json.dumps({"content": "hi"}), content_type="application/json"
        )
        assert posted.status_code == 403, fields
        created = client.post(
            "/api/v1/conversations/", json.dumps({"agent": agent.slug}), content_type="application/json"
        )
        assert created.status_code == 403, fields
    scoped = Client(HTTP_AUTHORIZATION=f"Bearer {_token(owner, world['a'], scopes=['approvals'])}")
    assert scoped.get("/api/v1/approvals/").status_code == 200
    asked = {"model": agent.slug, "messages": [{"role": "user", "content": "x"}]}
    completion = scoped.post("/v1/chat/completions", json.dumps(asked), content_type="application/json")
    assert completion.status_code == 403
    assert scoped.get(f"/api/v1/end-users/{END_USER}/memories/").status_code == 403
    assert not Run.objects.filter(conversation=own).exists()
