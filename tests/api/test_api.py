"""The REST API under /api/v1/: success, isolation between users, bad input, limits."""

import json

import pytest
from django.contrib.auth.models import Group, Permission
from django.core.cache import cache
from django.utils import timezone
from rest_framework.test import APIClient

from agents.models import AgentTool
from conversations.models import LLMCall, Message, Run, RunRequest, ToolInvocation
from conversations.services import conversation_create
from engine.admission import message_post
from engine.runs import run_finish
from tests.support.api import client_for
from tests.support.factories import AgentFactory, make_agent, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice():
    return make_user()


@pytest.fixture
def api(alice):
    return client_for(alice)


def _conversation(api, agent, **extra) -> dict:
    response = api.post("/api/v1/conversations/", {"agent": agent.slug, **extra}, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def _error(response, status: int) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"message", "extra"}
    return body


# --- authentication ----------------------------------------------------------------------------


def test_requests_without_a_valid_token_are_401_in_the_error_shape(alice):
    body = _error(APIClient().get("/api/v1/agents/"), 401)
    assert "credentials" in body["message"]
    anonymous = APIClient()
    anonymous.credentials(HTTP_AUTHORIZATION="Bearer agt_not-a-token")
    assert _error(anonymous.get("/api/v1/agents/"), 401)["message"] == "Invalid or revoked token."


def test_token_keyword_works_as_well_as_bearer(alice, agent):
    response = client_for(alice, keyword="Token").get("/api/v1/agents/")
    assert response.status_code == 200
    assert [a["slug"] for a in response.json()["results"]] == ["helper"]


# --- agents --------------------------------------------------------------------------------------


def test_agents_lists_only_what_the_caller_may_use(alice, agent):
    finance = Group.objects.create(name="finance")
    make_agent(slug="ledger").allowed_groups.set([finance])
    AgentFactory(slug="retired", is_active=False)
    treasurer = make_user(groups=[finance])

    assert [a["slug"] for a in client_for(alice).get("/api/v1/agents/").json()["results"]] == ["helper"]
    assert [a["slug"] for a in client_for(treasurer).get("/api/v1/agents/").json()["results"]] == ["helper", "ledger"]
    _error(client_for(alice).get("/api/v1/agents/ledger/"), 404)
    detail = client_for(treasurer).get("/api/v1/agents/ledger/").json()
    assert detail["slug"] == "ledger" and detail["concurrent_messages"] == "reject"
    helper = client_for(alice).get("/api/v1/agents/helper/").json()
    assert helper["tools"] == [
        {"name": "test-echo", "description": "Returns its text argument.", "approval": "never", "approval_rule": ""}
    ]
    assert "system_prompt" not in helper
    # What the agent's model is shown: its own wording of the tool when it has one.
    AgentTool.objects.filter(agent__slug="helper").update(description_override="Says it again.")
    helper = client_for(alice).get("/api/v1/agents/helper/").json()
    assert helper["tools"][0]["description"] == "Says it again."


# --- conversations -------------------------------------------------------------------------------


def test_create_list_and_read_a_conversation(api, alice, agent):
    created = _conversation(api, agent, metadata={"customer": 42}, title="Order help")
    assert created["agent"] == "helper" and created["metadata"] == {"customer": 42}
    assert created["messages"] == [] and created["runs"] == []

    api.post(f"/api/v1/conversations/{created['id']}/messages/", {"content": "hello"}, format="json")
    detail = api.get(f"/api/v1/conversations/{created['id']}/").json()
    assert [(m["role"], m["content"]) for m in detail["messages"]] == [("user", "hello")]
    assert [r["status"] for r in detail["runs"]] == ["queued"]
    listed = api.get("/api/v1/conversations/").json()
    assert [c["id"] for c in listed["results"]] == [created["id"]]


def test_another_users_conversation_is_a_404_and_staff_see_all(api, agent):
    mine = _conversation(api, agent)
    bob = client_for(make_user())
    _error(bob.get(f"/api/v1/conversations/{mine['id']}/"), 404)
    _error(bob.post(f"/api/v1/conversations/{mine['id']}/messages/", {"content": "hi"}, format="json"), 404)
    assert bob.get("/api/v1/conversations/").json()["results"] == []
    reader = make_user(staff=True)
    reader.user_permissions.add(Permission.objects.get(codename="view_conversation"))
    staff = client_for(reader)
    assert staff.get(f"/api/v1/conversations/{mine['id']}/").status_code == 200


@pytest.mark.parametrize(
    "payload,field",
    [
        ({"agent": "nope"}, "agent"),
        ({}, "agent"),
        ({"agent": "helper", "metadata": [1, 2]}, "metadata"),
        ({"agent": "helper", "metadata": {"note": "a\u0000b"}}, "metadata"),
        ({"agent": "helper", "metadata": {"blob": "x" * 20000}}, "metadata"),
        ({"agent": "helper", "title": "t" * 201}, "title"),
    ],
)
def test_bad_conversation_input_is_a_400_naming_the_field(api, agent, payload, field):
    body = _error(api.post("/api/v1/conversations/", payload, format="json"), 400)
    assert body["message"].startswith(f"{field}: ")
    assert field in body["extra"]["fields"]


def test_group_restricted_agent_cannot_be_used_by_others(api, agent):
    make_agent(slug="ledger").allowed_groups.set([Group.objects.create(name="finance")])
    body = _error(api.post("/api/v1/conversations/", {"agent": "ledger"}, format="json"), 400)
    assert body["message"] == "agent: There is no agent 'ledger' that you may use."


# --- messages ------------------------------------------------------------------------------------


def test_posting_a_message_returns_202_with_the_queued_run(api, alice, agent):
    conversation = _conversation(api, agent)
    response = api.post(f"/api/v1/conversations/{conversation['id']}/messages/", {"content": "hello"}, format="json")
    assert response.status_code == 202
    run = response.json()
    assert run["status"] == "queued" and run["input"] == "hello" and run["output"] is None
    assert run["conversation"] == conversation["id"] and run["agent"] == "helper" and run["agent_version"] == 1
    assert response["Location"] == f"/api/v1/runs/{run['id']}/"
    assert run["events_url"].endswith(f"/api/v1/runs/{run['id']}/events/")
    assert RunRequest.objects.get(run_id=run["id"]).user == alice


@pytest.mark.parametrize(
    "payload,message",
    [
        ({}, "content: This field is required."),
        ({"content": "   "}, "content: This field may not be blank."),
        ({"content": 5 * [1]}, "content: Not a valid string."),
        ({"content": "a\u0000b"}, "content: Null characters are not allowed."),
    ],
)
def test_bad_message_input_is_a_400_naming_the_field(api, agent, payload, message):
    conversation = _conversation(api, agent)
    body = _error(api.post(f"/api/v1/conversations/{conversation['id']}/messages/", payload, format="json"), 400)
    assert body["message"] == message
    assert not Run.objects.exists()


def test_message_length_and_body_size_are_limited(api, agent, settings):
    settings.AGENTRY_MESSAGE_MAX_CHARS = 10
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 200
    url = f"/api/v1/conversations/{_conversation(api, agent)['id']}/messages/"
    body = _error(api.post(url, {"content": "x" * 11}, format="json"), 400)
    assert body["message"] == "content: Ensure this field has no more than 10 characters."
    body = _error(api.post(url, {"content": "x", "padding": "y" * 300}, format="json"), 413)
    assert body["message"] == "The request body is larger than 200 bytes."
    _error(api.post(url, "{not json", content_type="application/json"), 400)
    assert not Run.objects.exists()


def test_a_retried_post_with_the_same_idempotency_key_returns_the_same_run(api, agent):
    url = f"/api/v1/conversations/{_conversation(api, agent)['id']}/messages/"
    first = api.post(url, {"content": "pay invoice 7"}, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    again = api.post(url, {"content": "pay invoice 7"}, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert first.status_code == again.status_code == 202
    assert again.json()["id"] == first.json()["id"]
    assert again["Idempotent-Replayed"] == "true" and "Idempotent-Replayed" not in first
    assert Run.objects.count() == 1 and Message.objects.filter(role="user").count() == 1

    body = _error(api.post(url, {"content": "pay invoice 8"}, format="json", HTTP_IDEMPOTENCY_KEY="k-1"), 422)
    assert "already used with different content" in body["message"]
    _error(api.post(url, {"content": "x"}, format="json", HTTP_IDEMPOTENCY_KEY="k" * 201), 400)


def test_reject_policy_answers_409_while_a_run_is_active(api, agent):
    url = f"/api/v1/conversations/{_conversation(api, agent)['id']}/messages/"
    first = api.post(url, {"content": "one"}, format="json").json()
    body = _error(api.post(url, {"content": "two"}, format="json"), 409)
    assert "already has an active run" in body["message"]
    assert body["extra"] == {"active_run": first["id"]}
    run_finish(run_id=first["id"], status="completed", stop_reason="final_answer")
    assert api.post(url, {"content": "two"}, format="json").status_code == 202


def test_a_disabled_agent_takes_no_new_messages(api, agent):
    url = f"/api/v1/conversations/{_conversation(api, agent)['id']}/messages/"
    agent.is_active = False
    agent.save()
    assert "not available any more" in _error(api.post(url, {"content": "hi"}, format="json"), 409)["message"]


def test_starting_runs_is_throttled_per_user(api, agent, settings):
    cache.clear()
    settings.AGENTRY_API_RUN_RATE = "2/min"
    agent.concurrent_messages = "enqueue"
    agent.save()
    url = f"/api/v1/conversations/{_conversation(api, agent)['id']}/messages/"
    for text in ("one", "two"):
        assert api.post(url, {"content": text}, format="json").status_code == 202
    response = api.post(url, {"content": "three"}, format="json")
    body = _error(response, 429)
    assert body["message"].startswith("Request was throttled.") and int(response["Retry-After"]) > 0
    other = client_for(make_user())
    other_url = f"/api/v1/conversations/{_conversation(other, agent)['id']}/messages/"
    assert other.post(other_url, {"content": "one"}, format="json").status_code == 202


# --- runs ----------------------------------------------------------------------------------------


@pytest.fixture
def finished_run(alice, agent) -> Run:
    """A run as the engine leaves it: a model call asking for a tool, the tool, the answer."""
    conversation = conversation_create(agent=agent, owner=alice)
    run = message_post(conversation=conversation, content="echo hi", user=alice)
    call = LLMCall.objects.create(
        run=run,
        iteration=1,
        attempt=1,
        model_config=agent.model_config,
        provider="openai_compatible",
        model_name="demo",
        request={},
        status="succeeded",
        prompt_tokens=10,
        completion_tokens=5,
        total_tokens=15,
        finish_reason="tool_calls",
        latency_ms=12,
    )
    tool_calls = [{"id": "c1", "type": "function", "function": {"name": "test-echo", "arguments": '{"text": "hi"}'}}]
    Message.objects.create(
        conversation=conversation, run=run, llm_call=call, order=2, role="assistant", tool_calls=tool_calls
    )
    ToolInvocation.objects.create(
        run=run,
        llm_call=call,
        tool_name="test-echo",
        tool_call_id="c1",
        raw_arguments='{"text": "hi"}',
        arguments={"text": "hi"},
        status="succeeded",
        result="hi",
        idempotency_key=f"{run.pk}:c1",
    )
    answer = LLMCall.objects.create(
        run=run,
        iteration=2,
        attempt=1,
        model_config=agent.model_config,
        provider="openai_compatible",
        model_name="demo",
        request={},
        status="succeeded",
        prompt_tokens=20,
        completion_tokens=3,
        cached_tokens=4,
        total_tokens=23,
        finish_reason="stop",
    )
    Message.objects.create(
        conversation=conversation, run=run, llm_call=answer, order=4, role="assistant", content="You said hi."
    )
    Run.objects.filter(pk=run.pk).update(
        prompt_tokens=30,
        completion_tokens=8,
        cached_tokens=4,
        total_tokens=38,
        cost="0.00004600",
        iterations=2,
        started_at=timezone.now(),
    )
    run_finish(run_id=run.pk, status="completed", stop_reason="final_answer")
    return run


def test_run_detail_has_status_totals_timings_and_answer(api, finished_run):
    run = api.get(f"/api/v1/runs/{finished_run.pk}/").json()
    assert run["status"] == "completed" and run["stop_reason"] == "final_answer"
    assert run["usage"] == {
        "prompt_tokens": 30,
        "completion_tokens": 8,
        "cached_tokens": 4,
        "reasoning_tokens": 0,
        "total_tokens": 38,
        "estimated": False,
    }
    assert run["cost"] == "0.00004600" and run["iterations"] == 2
    assert run["output"] == "You said hi." and run["input"] == "echo hi"
    assert run["duration_ms"] is not None and run["finished_at"] is not None


def test_run_steps_are_the_calls_and_tools_in_order(api, finished_run):
    steps = api.get(f"/api/v1/runs/{finished_run.pk}/steps/").json()
    assert steps["count"] == 3
    kinds = [(s["kind"], s.get("tool") or s.get("finish_reason")) for s in steps["results"]]
    assert kinds == [("llm_call", "tool_calls"), ("tool_invocation", "test-echo"), ("llm_call", "stop")]
    first, tool, last = steps["results"]
    assert first["tool_calls"][0]["function"]["name"] == "test-echo" and first["usage"]["total_tokens"] == 15
    assert tool["arguments"] == {"text": "hi"} and tool["result"] == "hi" and tool["approval"] is None
    assert last["content"] == "You said hi." and last["usage"]["cached_tokens"] == 4


def test_runs_of_other_users_are_404(finished_run):
    bob = client_for(make_user())
    for url in (f"/api/v1/runs/{finished_run.pk}/", f"/api/v1/runs/{finished_run.pk}/steps/"):
        _error(bob.get(url), 404)
    _error(bob.post(f"/api/v1/runs/{finished_run.pk}/cancel/"), 404)
    assert bob.get("/api/v1/runs/").json()["results"] == []


def test_run_list_filters_validate_their_input(api, finished_run):
    listed = api.get(f"/api/v1/runs/?conversation={finished_run.conversation_id}&status=completed").json()
    assert [r["id"] for r in listed["results"]] == [str(finished_run.pk)]
    assert _error(api.get("/api/v1/runs/?conversation=nope"), 400)["message"] == "conversation: Must be a valid UUID."
    _error(api.get("/api/v1/runs/?status=sleeping"), 400)


def test_cancel_a_queued_run_and_not_a_finished_one(api, alice, agent, finished_run):
    run = message_post(conversation=conversation_create(agent=agent, owner=alice), content="hi", user=alice)
    response = api.post(f"/api/v1/runs/{run.pk}/cancel/")
    assert response.status_code == 202 and response.json()["status"] == "cancelled"
    assert api.post(f"/api/v1/runs/{run.pk}/cancel/").status_code == 200
    body = _error(api.post(f"/api/v1/runs/{finished_run.pk}/cancel/"), 409)
    assert body["message"] == "The run is already completed; it can no longer be cancelled."


def test_internal_error_details_stay_with_operators(api, alice, agent):
    run = message_post(conversation=conversation_create(agent=agent, owner=alice), content="hi", user=alice)
    run_finish(
        run_id=run.pk, status="failed", stop_reason="internal_error", error="Traceback (most recent call last): ..."
    )
    body = api.get(f"/api/v1/runs/{run.pk}/").json()
    assert "Traceback" not in json.dumps(body)
    assert body["error"] == "An internal error stopped this run; operators can see the details."
