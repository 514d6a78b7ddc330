"""A workspace's budgets and quotas (tokens and cost per day and month, runs in flight): refused
at admission with 429 and Retry-After whichever way a message comes in, shown on the usage page,
exported to Prometheus; a workspace without limits costs a post no statement, one with limits one."""

import json
import time
import uuid
from datetime import timedelta
from decimal import Decimal
from unittest import mock

import pytest
from asgiref.sync import async_to_sync
from django.db import connection
from django.test import AsyncClient, Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from agents.models import Agent, AgentUsageDay
from api.completions import CompletionRequest, completion_agent, completion_start
from conversations.models import Conversation, Run, RunTrigger
from conversations.services import conversation_create
from conversations.tokens import api_token_authenticate, api_token_create
from conversations.workspace_usage import Period
from engine.admission import message_submit
from engine.admission_limits import IN_FLIGHT_RETRY_AFTER, AdmissionRefused, workspace_limits_check
from tests.support.factories import make_agent, make_user
from triggers.hooks import hook_signature
from triggers.models import Hook
from workspaces.access import workspace_bind
from workspaces.models import Membership, Workspace
from workspaces.roles import Role

pytestmark = pytest.mark.django_db


def _workspace(slug: str, **limits) -> Workspace:
    return Workspace.objects.create(name=slug.title(), slug=slug, **limits)


def _member(workspace: Workspace, role: str = Role.OPERATOR, *, staff: bool = False):
    user = make_user(staff=staff)
    # A new account may have joined the only workspace already (workspaces.membership).
    Membership.objects.update_or_create(user=user, workspace=workspace, defaults={"role": role})
    return user


def _api(user, workspace):
    client = APIClient()
    token = api_token_create(user=user, name="tests", workspace=workspace)[1]
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    client.token = token
    return client


def _period() -> Period:
    return Period.at(timezone.now())


def _use(agent, *, tokens: int = 0, cost: str = "0", day=None, shard: int = 0) -> None:
    AgentUsageDay.objects.create(
        agent=agent, day=day or _period().today, shard=shard, total_tokens=tokens, cost=Decimal(cost)
    )


def _post(api, agent):
    conversation = api.post("/api/v1/conversations/", {"agent": agent.slug}, format="json")
    assert conversation.status_code == 201, conversation.content
    return api.post(f"/api/v1/conversations/{conversation.json()['id']}/messages/", {"content": "hi"}, format="json")


def _waits_until(retry_after: str, end) -> bool:
    """Retry-After says the seconds to `end`, counted when the request was answered (a moment
    ago: a loaded machine may take seconds)."""
    return 0 <= int(retry_after) - int((end - timezone.now()).total_seconds()) <= 30


@pytest.fixture
def limited():
    return _workspace("limited")


@pytest.fixture
def other():
    """Another workspace, far over the first one's limits but with none of its own."""
    workspace = _workspace("other")
    agent = make_agent(workspace=workspace, slug="other-agent")
    _use(agent, tokens=10**9, cost="100000")
    return workspace


# --- admission: REST ----------------------------------------------------------------------------------

BUDGETS = {
    # limit field: (limit, usage reaching it, whether the usage is today or earlier this month)
    "daily_token_limit": (100, {"tokens": 100}, "day"),
    "daily_cost_limit": (Decimal("1.5"), {"cost": "1.5"}, "day"),
    "monthly_token_limit": (1000, {"tokens": 1000}, "month"),
    "monthly_cost_limit": (Decimal("20"), {"cost": "20"}, "month"),
}


@pytest.mark.parametrize("field", BUDGETS)
def test_each_budget_refuses_a_rest_post_with_429_until_its_period_ends(field, limited, other, no_enqueue):
    limit, usage, period = BUDGETS[field]
    setattr(limited, field, limit)
    limited.save()
    agent = make_agent(workspace=limited, slug="budgeted")
    api = _api(_member(limited), limited)
    # Split over two agents and two shards: the workspace's usage is their sum.
    half = {key: (value // 2 if isinstance(value, int) else str(Decimal(value) / 2)) for key, value in usage.items()}
    second = make_agent(workspace=limited, slug="budgeted-too")
    # A monthly budget counts the month's earlier days (the first of the month may be today).
    day = _period().today if period == "day" else _period().month_start
    _use(agent, day=day, **half)
    _use(second, day=day, shard=3, **half)
    # Last month's usage counts for neither period.
    _use(second, day=_period().month_start - timedelta(days=1), tokens=10**9, cost="10000")
    refused = _post(api, agent)
    assert refused.status_code == 429, refused.content
    end = _period().day_end if period == "day" else _period().month_end
    assert _waits_until(refused["Retry-After"], end)
    assert "workspace" in refused.json()["message"]
    assert not Run.objects.filter(agent__workspace=limited).exists()
    # The other workspace, far over these numbers, has no limits and is not refused.
    assert _post(_api(_member(other), other), other_agent(other)).status_code == 202


def other_agent(workspace) -> Agent:
    return Agent.objects.get(workspace=workspace)


def test_usage_under_the_limits_is_admitted(limited, no_enqueue):
    limited.daily_token_limit, limited.monthly_cost_limit, limited.max_runs_in_flight = 100, Decimal("5"), 3
    limited.save()
    agent = make_agent(workspace=limited)
    _use(agent, tokens=99, cost="4.99")
    assert _post(_api(_member(limited), limited), agent).status_code == 202


def test_runs_in_flight_refuse_with_a_short_wait_until_one_ends(limited, other, no_enqueue):
    limited.max_runs_in_flight = 1
    limited.save()
    agent = make_agent(workspace=limited, concurrent_messages="enqueue")
    api = _api(_member(limited), limited)
    first = _post(api, agent)
    assert first.status_code == 202
    refused = _post(api, agent)
    assert refused.status_code == 429 and int(refused["Retry-After"]) == IN_FLIGHT_RETRY_AFTER
    assert "runs in flight" in refused.json()["message"]
    # Another workspace's runs in flight are not this one's.
    Run.objects.filter(pk=first.json()["id"]).update(status="completed")
    assert _post(_api(_member(other), other), other_agent(other)).status_code == 202
    assert _post(api, agent).status_code == 202


def test_internal_runs_are_not_refused(limited):
    limited.daily_token_limit = 1
    limited.save()
    agent = make_agent(workspace=limited)
    _use(agent, tokens=5)
    with pytest.raises(AdmissionRefused):
        workspace_limits_check(workspace=limited, workspace_id=limited.pk, trigger=RunTrigger.API)
    for trigger in (RunTrigger.DELEGATION, RunTrigger.FORK, RunTrigger.EVAL):
        workspace_limits_check(workspace=limited, workspace_id=limited.pk, trigger=trigger)


def test_a_replayed_idempotency_key_returns_its_run_even_over_the_limit(limited, no_enqueue):
    limited.daily_token_limit = 10
    limited.save()
    agent = make_agent(workspace=limited)
    api = _api(_member(limited), limited)
    conversation = api.post("/api/v1/conversations/", {"agent": agent.slug}, format="json").json()["id"]
    url = f"/api/v1/conversations/{conversation}/messages/"
    first = api.post(url, {"content": "hi"}, format="json", HTTP_IDEMPOTENCY_KEY="k")
    _use(agent, tokens=10)
    again = api.post(url, {"content": "hi"}, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert (first.status_code, again.status_code) == (202, 202) and again.json()["id"] == first.json()["id"]
    assert api.post(url, {"content": "new"}, format="json", HTTP_IDEMPOTENCY_KEY="k2").status_code == 429


# --- admission: /v1 and hooks -------------------------------------------------------------------------


def _complete(token: str, model: str):
    payload = {"model": model, "messages": [{"role": "user", "content": "hello"}]}
    return async_to_sync(AsyncClient().post)(
        "/v1/chat/completions", payload, content_type="application/json", headers={"Authorization": f"Bearer {token}"}
    )


@pytest.mark.django_db(transaction=True)
def test_chat_completions_are_refused_in_openai_s_shape(settings):
    settings.AGENTRY_COMPLETION_TIMEOUT_SECONDS = 0.1
    limited = _workspace("limited", monthly_token_limit=50)
    other = _workspace("other")
    agent = make_agent(workspace=limited, slug="v1-limited")
    free = make_agent(workspace=other, slug="v1-free")
    _use(agent, tokens=50, day=_period().month_start)
    _use(free, tokens=10**6)
    limited_token = _api(_member(limited), limited).token
    other_token = _api(_member(other), other).token
    with mock.patch("engine.tasks.run_advance_task.delay"):
        refused = _complete(limited_token, agent.slug)
        assert refused.status_code == 429, refused.content
        assert _waits_until(refused.headers["Retry-After"], _period().month_end)
        error = refused.json()["error"]
        assert error["code"] == "rate_limit_exceeded" and "monthly limit of 50" in error["message"]
        assert not Conversation.objects.filter(agent=agent).exists()
        assert _complete(other_token, free.slug).status_code == 504  # admitted; the run waits


def _deliver(hook: Hook, body: dict, delivery: str):
    raw = json.dumps(body).encode()
    stamp = str(int(time.time()))
    return Client().post(
        f"/api/v1/hooks/{hook.pk}/",
        raw,
        content_type="application/json",
        HTTP_X_AGENTRY_TIMESTAMP=stamp,
        HTTP_X_AGENTRY_SIGNATURE=hook_signature(secret="whsec_x", timestamp=stamp, body=raw),
        HTTP_X_AGENTRY_DELIVERY=delivery,
    )


def _hook(workspace) -> Hook:
    owner = _member(workspace)
    return Hook.objects.create(
        workspace=workspace,
        agent=make_agent(workspace=workspace),
        name=f"hook-{uuid.uuid4().hex[:6]}",
        secret="whsec_x",
        message="{{ payload.note }}",
        owner=owner,
    )


def test_hook_deliveries_are_refused_and_may_be_sent_again(limited, other, no_enqueue):
    limited.daily_cost_limit = Decimal("0.01")
    limited.save()
    hook, free = _hook(limited), _hook(other)
    _use(hook.agent, cost="0.01")
    refused = _deliver(hook, {"note": "one"}, "d-1")
    assert refused.status_code == 429 and _waits_until(refused["Retry-After"], _period().day_end)
    assert not Run.objects.filter(agent=hook.agent).exists() and not hook.deliveries.exists()
    assert _deliver(free, {"note": "one"}, "d-1").status_code == 202
    limited.daily_cost_limit = None
    limited.save()
    assert _deliver(hook, {"note": "one"}, "d-1").status_code == 202  # not recorded: sent again


# --- statements of the hot path -----------------------------------------------------------------------


def _post_statements(api, agent) -> list[str]:
    conversation = api.post("/api/v1/conversations/", {"agent": agent.slug}, format="json").json()["id"]
    url = f"/api/v1/conversations/{conversation}/messages/"
    api.post(url, {"content": "warm"}, format="json")  # the agent's version is found once
    Run.objects.filter(conversation_id=conversation).update(status="completed")
    with CaptureQueriesContext(connection) as queries:
        assert api.post(url, {"content": "counted"}, format="json").status_code == 202
    return [query["sql"] for query in queries]


def test_a_post_reads_no_usage_without_limits_and_one_statement_with_them(limited, no_enqueue):
    agent = make_agent(workspace=limited)
    api = _api(_member(limited), limited)
    free = _post_statements(api, agent)
    assert not [sql for sql in free if "agentusageday" in sql]
    limited.daily_token_limit, limited.max_runs_in_flight = 10**6, 100
    limited.save()
    counted = _post_statements(api, agent)
    assert len(counted) == len(free) + 1, "\n".join(s[:120] for s in counted)
    assert len([sql for sql in counted if "agentusageday" in sql]) == 1


def test_a_chat_completion_reads_no_usage_without_limits_and_one_statement_with_them(no_enqueue):
    """As /v1/chat/completions admits a message: the token's read (with its workspace), the agent
    found in that workspace (which carries it), conversation_start."""
    workspace = _workspace("counted")
    agent = make_agent(workspace=workspace, slug="v1-counted")
    plaintext = _api(_member(workspace), workspace).token

    def statements() -> list[str]:
        token = api_token_authenticate(plaintext=plaintext)
        workspace_bind(token.user, token.binding)
        request = CompletionRequest(
            model=agent.slug, system="", history=[], content="hi", stream=False, include_usage=False, end_user=""
        )
        with CaptureQueriesContext(connection) as queries:
            completion_start(user=token.user, agent=completion_agent(user=token.user, slug=agent.slug), request=request)
        return [query["sql"] for query in queries]

    statements()  # the agent's version is found once
    free = statements()
    assert not [sql for sql in free if "agentusageday" in sql or '"workspaces_workspace"' in sql]
    workspace.daily_cost_limit = Decimal(1000)
    workspace.save()
    counted = statements()
    assert len(counted) == len(free) + 1 and len([sql for sql in counted if "agentusageday" in sql]) == 1


def test_message_submit_reads_the_limits_with_the_conversation_s_lock(limited, no_enqueue):
    """Every way in that posts to a conversation (the widget, a schedule's, the try page, the CLI)
    is checked by message_submit, from the limits its locked read joins."""
    limited.daily_token_limit = 5
    limited.save()
    agent = make_agent(workspace=limited)
    _use(agent, tokens=5)
    conversation = conversation_create(agent=agent, owner=make_user())
    for trigger in (RunTrigger.WIDGET, RunTrigger.SCHEDULE, RunTrigger.CONSOLE, RunTrigger.CLI):
        with pytest.raises(AdmissionRefused):
            message_submit(conversation=conversation, content="hi", trigger=trigger)
    assert not Run.objects.filter(conversation=conversation).exists()


# --- the usage page -----------------------------------------------------------------------------------


def _page_client(user, workspace=None) -> Client:
    client = Client()
    client.force_login(user)
    if workspace is not None:
        session = client.session
        session["workspace_id"] = workspace.pk
        session.save()
    return client


def _usage_page(client):
    return client.get(reverse("workspace_usage"))


def test_the_usage_page_shows_today_and_the_month_against_the_limits_and_each_agent(limited, other, no_enqueue):
    limited.daily_token_limit, limited.monthly_cost_limit, limited.max_runs_in_flight = 1000, Decimal("10"), 4
    limited.save()
    first = make_agent(workspace=limited, name="Alpha", slug="alpha")
    second = make_agent(workspace=limited, name="Beta", slug="beta")
    _use(first, tokens=300, cost="1.25")
    _use(first, tokens=100, cost="0.75", shard=5)
    _use(second, tokens=50, cost="2", day=_period().month_start - timedelta(days=1))  # last month: not shown
    if _period().today != _period().month_start:
        _use(second, tokens=200, cost="3", day=_period().month_start)
    month_tokens, month_cost = (600, Decimal("5.00")) if _period().today != _period().month_start else (400, Decimal(2))
    viewer = _member(limited, Role.VIEWER, staff=True)
    api = _api(_member(limited), limited)
    assert _post(api, first).status_code == 202  # one run in flight

    response = _usage_page(_page_client(viewer, limited))

    assert response.status_code == 200
    lines = {line.label: (line.used, line.limit, line.percent) for line in response.context["lines"]}
    assert lines["Tokens today"] == (400, 1000, 40)
    assert lines["Cost today"] == (Decimal("2.00"), None, None)
    assert lines["Tokens this month"] == (month_tokens, None, None)
    assert lines["Cost this month"] == (month_cost, Decimal("10"), int(month_cost * 10))
    assert lines["Runs in flight"] == (1, 4, 25)
    agents = {a.slug: (a.tokens_today, a.tokens_month, a.runs_in_flight) for a in response.context["agents"]}
    assert agents == {"alpha": (400, 400, 1), "beta": (0, month_tokens - 400, 0)}
    html = response.content.decode()
    assert 'data-agent="alpha"' in html and "other-agent" not in html and "Other" not in html
    assert f'<a href="{reverse("monitoring:agent", args=["alpha"])}" class="agent-hub-link">Alpha</a>' in html


def test_the_usage_page_reads_the_same_statements_for_one_agent_or_many(limited):
    viewer = _member(limited, Role.VIEWER, staff=True)
    client = _page_client(viewer, limited)
    make_agent(workspace=limited)
    _usage_page(client)  # the session and permissions, as every page reads them

    def statements() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert _usage_page(client).status_code == 200
        return len(queries)

    one = statements()
    for n in range(4):
        _use(make_agent(workspace=limited), tokens=n + 1)
    assert statements() == one


def test_the_usage_page_is_for_members_who_may_view_the_workspace(limited, other):
    assert _usage_page(Client()).status_code == 302  # to the login page
    approver = _member(limited, Role.APPROVER, staff=True)
    assert _usage_page(_page_client(approver, limited)).status_code == 403
    not_staff = _member(limited, Role.VIEWER)
    assert _usage_page(_page_client(not_staff, limited)).status_code == 403
    # A session naming a workspace the person is not a member of shows their own.
    viewer = _member(limited, Role.VIEWER, staff=True)
    response = _usage_page(_page_client(viewer, other))
    assert response.status_code == 200 and response.context["workspace"] == limited
    assert _page_client(viewer, limited).post(reverse("workspace_usage")).status_code == 405


def test_the_usage_page_is_linked_from_the_header_for_those_who_may_open_it(limited):
    viewer = _member(limited, Role.VIEWER, staff=True)
    approver = _member(limited, Role.APPROVER, staff=True)
    home = _page_client(viewer, limited).get(reverse("admin:index")).content.decode()
    assert reverse("workspace_usage") in home
    assert reverse("workspace_usage") not in _page_client(approver, limited).get(reverse("home")).content.decode()


# --- Prometheus ---------------------------------------------------------------------------------------


def test_prometheus_has_each_workspace_s_usage_and_limits_labelled_by_workspace(limited, other, settings, no_enqueue):
    settings.AGENTRY_METRICS_TOKEN = "scrape"
    limited.daily_token_limit, limited.max_runs_in_flight = 1000, 3
    limited.save()
    agent = make_agent(workspace=limited)
    _use(agent, tokens=250, cost="1.5")
    assert _post(_api(_member(limited), limited), agent).status_code == 202

    text = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer scrape").content.decode()

    samples = {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("agentry_workspace_")
    }

    def value(name, **labels):
        return samples[(name, frozenset(labels.items()))]

    assert value("agentry_workspace_tokens", workspace="limited", period="day") == 250
    assert value("agentry_workspace_tokens", workspace="limited", period="month") >= 250
    assert value("agentry_workspace_cost", workspace="limited", period="day") == 1.5
    assert value("agentry_workspace_runs_in_flight", workspace="limited") == 1
    assert value("agentry_workspace_limit", workspace="limited", limit="tokens_day") == 1000
    assert value("agentry_workspace_limit", workspace="limited", limit="runs_in_flight") == 3
    assert value("agentry_workspace_tokens", workspace="other", period="day") == 10**9
    assert value("agentry_workspace_runs_in_flight", workspace="other") == 0
    # Only the limits that are set.
    assert not [key for key in samples if key[0] == "agentry_workspace_limit" and ("workspace", "other") in key[1]]
