"""Bad input is a 4xx in the error shape, never a 500: lone surrogates, invalid UTF-8, deep
nesting, out-of-range numbers and wrong methods, on every route; a system prompt that cannot
render is refused when saved; a chat completion's own system message reaches the model."""

import json
import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from agents.models import Agent, ModelConfig
from api.completions import completion_request_parse, completion_start
from conversations.models import Approval, Conversation, Message, Run
from engine.loop import run_advance
from tests.approvals.conftest import Scenario, counter_steps
from tests.security.bad_input import (
    BAD_BODIES,
    BAD_QUERY,
    DEEP,
    METHODS,
    NO_BODY,
    ROUTES,
    SURROGATE_BODIES,
    assert_error_shape,
    eval_ids,
    review_ids,
    site_routes,
)
from tests.support.admin_forms import agent_admin_inlines
from tests.support.api import client_for
from tests.support.factories import make_user, token_for
from tools.models import ToolDefinition

pytestmark = pytest.mark.django_db


@pytest.fixture
def enqueued(monkeypatch):
    from engine.tasks import run_advance_task

    ids = []
    monkeypatch.setattr(run_advance_task, "delay", lambda run_id: ids.append(run_id))
    return ids


@pytest.fixture
def admin_user():
    return User.objects.create_superuser("root", password="root-pass-1")


@pytest.fixture
def site(fake_llm, enqueued, admin_user):
    """A pending approval on a parked run, owned by the superuser who also calls the API."""
    scenario = Scenario(fake_llm, steps=counter_steps("bad-input"), owner=admin_user)
    run = scenario.post("Please count.")
    run_advance(run_id=run.pk)
    approval = Approval.objects.get(run=run)
    return {
        "approval": approval.pk,
        "run": run.pk,
        "conversation": run.conversation_id,
        "agent": scenario.agent.slug,
        "action": "cancel",
        "step": 1,
        "end_user": "u1",
        "memory": "00000000-0000-0000-0000-000000000000",
        "hook": "00000000-0000-0000-0000-000000000000",
        "attachment": "00000000-0000-0000-0000-000000000000",
        "widget": "00000000-0000-0000-0000-000000000000",
        "chat_channel": "00000000-0000-0000-0000-000000000000",
        **eval_ids(agent_version=run.agent_version),
        **review_ids(run=run),
    }


def _url(route: str, ids: dict) -> str:
    return "/" + route.format(**ids)


def _api(user) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {token_for(user)}")


def _session(user) -> tuple[Client, str]:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    client.get("/approvals/")
    return client, client.cookies["csrftoken"].value


def _json(response) -> dict:
    assert response["Content-Type"].startswith("application/json"), (response.status_code, response.content[:300])
    return json.loads(response.content)


def test_every_route_is_listed():
    assert site_routes() == set(ROUTES)


def test_wrong_methods_get_a_json_405_on_every_route(site, admin_user):
    api = _api(admin_user)
    pages, csrf = _session(admin_user)
    checked = 0
    for route, allowed in ROUTES.items():
        if allowed is None:
            continue
        url = _url(route, site)
        for method in METHODS:
            if method in allowed:
                continue
            # Page routes are sent without a CSRF token: the answer must still be the 405.
            client = api if route.startswith(("api/", "v1/")) else pages
            response = client.generic(method, url, b"{}", content_type="application/json")
            assert response.status_code == 405, (method, url, response.status_code, response.content[:200])
            assert_error_shape(route, _json(response))
            assert method not in response["Allow"]
            checked += 1
    assert checked > 100
    assert Run.objects.count() == 1 and Approval.objects.get().status == Approval.Status.PENDING


def test_bad_bodies_and_queries_are_4xx_on_every_route(site, admin_user):
    api = _api(admin_user)
    pages, csrf = _session(admin_user)
    messages_before = Message.objects.count()
    for route, allowed in ROUTES.items():
        url = _url(route, site)
        api_route = route.startswith(("api/", "v1/"))
        client = api if api_route else pages
        for method in sorted(allowed or {"GET", "POST"}):
            if method == "GET":
                response = client.get(
                    f"{url}?{BAD_QUERY}", HTTP_LAST_EVENT_ID="\xed\xa0\x80", HTTP_IDEMPOTENCY_KEY="\xff\xfe"
                )
                assert response.status_code < 500, (url, response.status_code)
                if api_route and response.status_code >= 400:
                    assert_error_shape(route, _json(response))
                continue
            if route in NO_BODY:
                continue
            for name, body in BAD_BODIES.items():
                response = client.generic(
                    method,
                    f"{url}?{BAD_QUERY}",
                    body,
                    content_type="application/json",
                    HTTP_X_CSRFTOKEN=csrf,
                    HTTP_IDEMPOTENCY_KEY="\xff\xfe",
                )
                assert 400 <= response.status_code < 500, (
                    name,
                    method,
                    url,
                    response.status_code,
                    response.content[:300],
                )
                if api_route:
                    assert_error_shape(route, _json(response))
    # Nothing bad was stored, and the approval is still waiting.
    assert Message.objects.count() == messages_before
    assert Conversation.objects.count() == 1
    assert Approval.objects.get().status == Approval.Status.PENDING


@pytest.mark.parametrize("name", sorted(SURROGATE_BODIES))
def test_surrogates_in_api_bodies_are_a_400_naming_the_problem(site, admin_user, name):
    api = client_for(admin_user)
    body = json.dumps({"agent": site["agent"], "metadata": {"note": "\ud800"}, "title": "ok"})
    if name == "key":
        body = json.dumps({"agent": site["agent"], "metadata": {"\ud800": "x"}})
    elif name == "value":
        body = json.dumps({"agent": site["agent"], "title": "\udfff"})
    response = api.post("/api/v1/conversations/", body, content_type="application/json")
    assert response.status_code == 400
    assert "surrogate" in response.json()["message"]
    response = api.post(
        f"/api/v1/conversations/{site['conversation']}/messages/",
        json.dumps({"content": "hi \ud83d there"}),
        content_type="application/json",
    )
    assert response.status_code == 400 and "surrogate" in response.json()["message"]
    assert Conversation.objects.count() == 1


def test_form_encoded_json_fields_are_checked_too(site, admin_user):
    api = client_for(admin_user)
    for metadata in ['{"a": "\\ud800"}', DEEP, '{"n": 1e999}']:
        response = api.post(
            "/api/v1/conversations/", {"agent": site["agent"], "metadata": metadata}, format="multipart"
        )
        assert response.status_code == 400, response.content[:200]
        assert response.json()["message"].startswith("metadata: ")
    response = api.post(
        f"/api/v1/approvals/{site['approval']}/decision/",
        {"decision": "approve", "arguments": '{"label": "\\udfff"}'},
        format="multipart",
    )
    assert response.status_code == 400 and response.json()["message"].startswith("arguments: ")
    assert Conversation.objects.count() == 1
    assert Approval.objects.get().status == Approval.Status.PENDING


def test_nesting_is_bounded_at_the_parser_with_a_clear_400(site, admin_user):
    api = client_for(admin_user)
    for depth in (65, 1000, 100_000):
        metadata = '{"a":' * depth + "1" + "}" * depth
        response = api.post(
            "/api/v1/conversations/",
            f'{{"agent": "{site["agent"]}", "metadata": {metadata}}}',
            content_type="application/json",
        )
        assert response.status_code == 400
        assert response.json()["message"] == "The JSON is nested more than 64 levels deep."
    # Brackets inside strings are text, not nesting.
    response = api.post(
        "/api/v1/conversations/",
        json.dumps({"agent": site["agent"], "title": "[" * 150, "metadata": {"a": {"b": ["{" * 100]}}}),
        content_type="application/json",
    )
    assert response.status_code == 201 and response.json()["title"] == "[" * 150


def test_approval_page_decision_and_preview_refuse_bad_json(site, admin_user):
    client, csrf = _session(admin_user)
    approval = site["approval"]
    response = client.post(
        f"/approvals/{approval}/decision/", {"decision": "approve", "arguments": DEEP, "csrfmiddlewaretoken": csrf}
    )
    assert response.status_code == 400 and b"nested more than 64 levels" in response.content
    response = client.post(
        f"/approvals/{approval}/decision/",
        {"decision": "approve", "arguments": '{"label": "\\ud800"}', "csrfmiddlewaretoken": csrf},
    )
    assert response.status_code == 400 and b"lone surrogate" in response.content
    for body, error in [
        (DEEP, "nested more than 64 levels"),
        ('{"label": "\\udbff"}', "lone surrogate"),
        (b'{"label": "\xff"}', "not valid UTF-8"),
    ]:
        response = client.post(
            f"/approvals/{approval}/preview/", body, content_type="application/json", HTTP_X_CSRFTOKEN=csrf
        )
        result = _json(response)
        assert result["ok"] is False and error in result["errors"][0], result
    assert Approval.objects.get().status == Approval.Status.PENDING


# Commits: the API token is read on a thread of the async view, with a connection of its own.
@pytest.mark.django_db(transaction=True)
def test_chat_completions_refuses_bad_json_in_openai_shape(site, admin_user):
    api = client_for(admin_user)
    bodies = {
        "surrogate model": json.dumps({"model": "\ud800", "messages": [{"role": "user", "content": "hi"}]}),
        "surrogate content": json.dumps({"model": site["agent"], "messages": [{"role": "user", "content": "\ud800"}]}),
        "deep": DEEP,
        "infinite": '{"model": "x", "messages": [], "temperature": 1e999}',
    }
    for name, body in bodies.items():
        response = api.post("/v1/chat/completions", body, content_type="application/json")
        assert response.status_code == 400, (name, response.content[:200])
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error" and error["message"], name
    assert Run.objects.count() == 1


def test_unknown_paths_under_v1_are_a_json_404():
    response = Client().get("/v1/chat/completion")
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"


def test_chat_completions_passes_the_clients_system_message_after_the_agents(fake_llm, admin_user):
    name = fake_llm.script("sc-system", {"fallback": {"content": "Bonjour."}})
    model = ModelConfig.objects.create(name="sc-system", base_url=fake_llm.api_base, model=name)
    agent = Agent.objects.create(
        name="Sys",
        slug="sys-agent",
        model_config=model,
        context_max_turns=1,
        system_prompt="You are the operator's agent.",
    )
    body = {
        "model": "sys-agent",
        "messages": [
            {"role": "system", "content": "Answer in French."},
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Salut."},
            {"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
            {"role": "user", "content": "How are you?"},
        ],
    }
    # What POST /v1/chat/completions does before it waits; the run is advanced here, without a worker.
    run = completion_start(user=admin_user, agent=agent, request=completion_request_parse(body))
    run_advance(run_id=run.pk)
    [request] = fake_llm.requests(name)
    sent = request["messages"]
    assert sent[0] == {"role": "system", "content": "You are the operator's agent."}
    assert sent[1] == {"role": "system", "content": "Answer in French.\n\nBe brief."}
    assert sent[-1]["content"] == "How are you?"


@pytest.mark.parametrize(
    "prompt, error",
    [
        ("Today is {{ now_cn|center:'wide' }}", "cannot be rendered"),
        ("{% if %}x{% endif %}", "cannot be rendered"),
        ("{% include 'secrets.txt' %}", "secrets.txt"),
        ("{% url 'nowhere' %}", "nowhere"),
        ("{% widthratio 1 0 %}", "widthratio takes at least three arguments"),
        # Twenty characters of template, three hundred thousand of prompt.
        ("{{ agent_name|rjust:300000 }}", "renders to 300000 characters; at most 200000"),
        ("Today is {{ now_cn }} ({{ weekday_en }}, {{ time_zone }}). {% widthratio 1 2 100 %}", None),
    ],
)
def test_admin_refuses_a_system_prompt_that_cannot_render(admin_user, prompt, error):
    model = ModelConfig.objects.create(name="m", base_url="http://127.0.0.1:9/v1", model="demo")
    client = Client()
    client.force_login(admin_user)
    form = {
        "name": "Prompted",
        "slug": "prompted",
        "description": "",
        "is_active": "on",
        "system_prompt": prompt,
        "time_zone": "UTC",
        "language": "en",
        "model_config": model.pk,
        "max_iterations": 8,
        "max_same_tool_streak": 3,
        "tool_choice": "auto",
        "parallel_tool_calls": "on",
        "concurrent_messages": "reject",
        **agent_admin_inlines(),
    }
    response = client.post("/admin/agents/agent/add/", form)
    if error is None:
        assert response.status_code == 302, re.findall(r'class="errorlist[^>]*>(.*?)</ul>', response.content.decode())
        assert Agent.objects.filter(slug="prompted").exists()
        return
    assert response.status_code == 200
    assert error in response.content.decode()
    assert not Agent.objects.filter(slug="prompted").exists()


@pytest.mark.parametrize(
    "value, error",
    [
        (DEEP, "nested more than 64 levels"),
        ('{"type": "object", "description": "\\ud800"}', "lone surrogate"),
        ('{"type": "object", "maximum": 1e999}', "too large"),
    ],
)
def test_admin_json_fields_refuse_bad_json(admin_user, value, error):
    client = Client()
    client.force_login(admin_user)
    response = client.post(
        "/admin/agents/modelconfig/add/",
        {
            "name": "json-check",
            "provider": "openai_compatible",
            "base_url": "http://127.0.0.1:9/v1",
            "model": "demo",
            "response_schema": value,
            "stop": "[]",
            "extra_params": "{}",
            "connect_timeout_seconds": 5,
            "read_timeout_seconds": 60,
            "max_retries": 2,
            "price_input_per_million": 0,
            "price_cached_input_per_million": 0,
            "price_output_per_million": 0,
        },
    )
    assert response.status_code == 200, response.status_code
    assert error in response.content.decode()
    assert not ModelConfig.objects.filter(name="json-check").exists()
    response = client.post(
        "/admin/tools/tooldefinition/add/",
        {
            "name": "json-check",
            "description": "d",
            "kind": "http",
            "parameters": value,
            "side_effect": "read",
            "approval_policy": "never",
            "timeout_seconds": 5,
            "max_result_chars": 1000,
            "http_method": "GET",
            "http_url": "http://127.0.0.1:9/x",
            "http_query_params": "{}",
            "http_headers": "{}",
        },
    )
    assert response.status_code == 200, response.status_code
    assert error in response.content.decode()
    assert not ToolDefinition.objects.filter(name="json-check").exists()


def test_a_plain_users_bad_json_is_refused_the_same_way(site):
    # Bad input from a user who is not staff goes through the same parser.
    api = client_for(make_user())
    response = api.post("/api/v1/conversations/", DEEP, content_type="application/json")
    assert response.status_code == 400 and "nested" in response.json()["message"]
