"""End users through the API: set when a conversation is created (or by the OpenAI façade's `user`),
fixed afterwards, listed per owner, and limited per agent (messages a minute, tokens a day) with
a 429 and Retry-After."""

import math
import uuid
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from unittest import mock

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import Permission
from django.test import AsyncClient
from django.utils import timezone

from conversations.end_users import day_bounds
from conversations.models import Conversation, Run, RunTrigger
from engine.admission_limits import AdmissionRefused, end_user_limits_check
from tests.support.api import client_for
from tests.support.factories import make_agent, make_user, token_for
from tests.support.llm import agent_on
from tests.support.runs import advance

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice():
    return make_user()


@pytest.fixture
def api(alice):
    return client_for(alice)


@pytest.fixture
def enqueuing_agent():
    return make_agent(slug=f"eu-{uuid.uuid4().hex[:8]}", concurrent_messages="enqueue")


def _someone() -> str:
    """An end user no earlier test session counted in Redis (its windows outlive a session)."""
    return f"person-{uuid.uuid4().hex[:10]}"


def _create(api, agent, **fields):
    return api.post("/api/v1/conversations/", {"agent": agent.slug, **fields}, format="json")


def _post(api, conversation_id, content="hi"):
    return api.post(f"/api/v1/conversations/{conversation_id}/messages/", {"content": content}, format="json")


# --- set on create, shown, fixed ----------------------------------------------------------------


def test_the_end_user_is_set_on_create_stripped_and_shown(api, enqueuing_agent):
    created = _create(api, enqueuing_agent, end_user="  客户-42 ")
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["end_user"] == "客户-42"
    assert Conversation.objects.get(pk=body["id"]).end_user == "客户-42"
    assert api.get(f"/api/v1/conversations/{body['id']}/").json()["end_user"] == "客户-42"
    assert _create(api, enqueuing_agent).json()["end_user"] == ""


@pytest.mark.parametrize(
    "end_user",
    ["line\nbreak", "bell\x07", "nul\x00", "zero\u200bwidth", "x" * 201, {"id": 1}, ["a"]],
    ids=["newline", "control", "nul", "format-char", "too-long", "object", "list"],
)
def test_a_bad_end_user_is_a_400_naming_the_field(api, enqueuing_agent, end_user):
    response = _create(api, enqueuing_agent, end_user=end_user)
    assert response.status_code == 400, response.content
    assert "end_user" in response.json()["extra"]["fields"]
    assert not Conversation.objects.exists()


def test_the_end_user_cannot_change_later(api, enqueuing_agent):
    conversation = _create(api, enqueuing_agent, end_user="bob").json()
    url = f"/api/v1/conversations/{conversation['id']}/"
    refused = api.patch(url, {"end_user": "eve", "title": "new"}, format="json")
    assert refused.status_code == 400 and "cannot change" in refused.json()["message"]
    assert api.patch(url, {"agent": "other"}, format="json").status_code == 400
    assert Conversation.objects.get(pk=conversation["id"]).end_user == "bob"
    # What may change, changes.
    renamed = api.patch(url, {"title": "Trip", "metadata": {"k": 1}}, format="json")
    assert renamed.status_code == 200 and renamed.json()["title"] == "Trip"
    saved = Conversation.objects.get(pk=conversation["id"])
    assert (saved.title, saved.metadata, saved.end_user) == ("Trip", {"k": 1}, "bob")
    assert api.patch(url, {"metadata": [1]}, format="json").status_code == 400


def test_only_the_owner_may_patch_a_conversation(api, enqueuing_agent):
    conversation = _create(api, enqueuing_agent, end_user="bob").json()
    url = f"/api/v1/conversations/{conversation['id']}/"
    assert client_for(make_user()).patch(url, {"title": "x"}, format="json").status_code == 404
    reader = make_user(staff=True)
    reader.user_permissions.add(Permission.objects.get(codename="view_conversation"))
    assert client_for(reader).patch(url, {"title": "x"}, format="json").status_code == 403
    assert api.put(url, {"title": "x"}, format="json").status_code == 405


# --- listing --------------------------------------------------------------------------------------


@pytest.fixture
def world(api, alice, enqueuing_agent):
    """alice's end users bob (two agents) and carol; mallory's own bob (another person)."""
    other_agent = make_agent(slug=f"eu-other-{uuid.uuid4().hex[:6]}")
    mallory = make_user()
    ids = {
        "bob": _create(api, enqueuing_agent, end_user="bob").json()["id"],
        "bob_other": _create(api, other_agent, end_user="bob").json()["id"],
        "carol": _create(api, enqueuing_agent, end_user="carol").json()["id"],
        "nobody": _create(api, enqueuing_agent).json()["id"],
        "mallory_bob": _create(client_for(mallory), enqueuing_agent, end_user="bob").json()["id"],
    }
    runs = {name: _post(api, ids[name]).json()["id"] for name in ("bob", "bob_other", "carol")}
    runs["mallory_bob"] = _post(client_for(mallory), ids["mallory_bob"]).json()["id"]
    return SimpleNamespace(ids=ids, runs=runs, agent=enqueuing_agent, other_agent=other_agent, mallory=mallory)


def _listed(api, url, **params) -> list[str]:
    response = api.get(url, params)
    assert response.status_code == 200, response.content
    return [row["id"] for row in response.json()["results"]]


def test_an_end_users_conversations_are_the_owners_only(api, world):
    url = "/api/v1/end-users/bob/conversations/"
    assert _listed(api, url) == [world.ids["bob_other"], world.ids["bob"]]  # newest first
    assert _listed(api, url, agent=world.agent.slug) == [world.ids["bob"]]
    assert _listed(api, url, agent="no-such-agent") == []
    assert _listed(api, "/api/v1/end-users/carol/conversations/") == [world.ids["carol"]]
    assert _listed(client_for(world.mallory), url) == [world.ids["mallory_bob"]]
    assert _listed(api, "/api/v1/end-users/nobody-at-all/conversations/") == []


def test_an_end_users_runs_are_the_owners_only(api, world):
    url = "/api/v1/end-users/bob/runs/"
    listed = api.get(url).json()
    assert set(listed) == {"next", "previous", "results"}  # by cursor, as GET /runs/ pages
    assert [row["id"] for row in listed["results"]] == [world.runs["bob_other"], world.runs["bob"]]
    assert listed["results"][0]["input"] == "hi" and listed["results"][0]["status"] == "queued"
    assert _listed(api, url, agent=world.other_agent.slug) == [world.runs["bob_other"]]
    assert _listed(client_for(world.mallory), url) == [world.runs["mallory_bob"]]


def test_staff_who_see_every_conversation_list_only_their_own_end_users(world):
    staff = make_user(staff=True)
    staff.user_permissions.add(*Permission.objects.filter(codename__in=["view_conversation", "view_run"]))
    assert _listed(client_for(staff), "/api/v1/end-users/bob/conversations/") == []
    assert _listed(client_for(staff), "/api/v1/end-users/bob/runs/") == []


def test_an_end_user_id_holding_a_slash_is_listed_too(api, enqueuing_agent):
    created = _create(api, enqueuing_agent, end_user="tenant/42").json()["id"]
    assert _listed(api, "/api/v1/end-users/tenant/42/conversations/") == [created]
    assert _listed(api, "/api/v1/end-users/tenant%2F42/conversations/") == [created]


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("/api/v1/end-users/a%0Ab/conversations/", {}),
        ("/api/v1/end-users/%20/runs/", {}),
        (f"/api/v1/end-users/{'x' * 201}/runs/", {}),
        ("/api/v1/end-users/bob/conversations/", {"agent": "not a slug!"}),
        ("/api/v1/end-users/bob/conversations/", {"page": "999"}),
        ("/api/v1/end-users/bob/runs/", {"cursor": "nope"}),
    ],
    ids=["control-char", "blank", "too-long", "bad-agent", "no-such-page", "bad-cursor"],
)
def test_bad_list_requests_are_4xx(api, path, params):
    response = api.get(path, params)
    assert 400 <= response.status_code < 500 and "message" in response.json(), response.content


def test_listing_needs_a_token(client):
    assert client.get("/api/v1/end-users/bob/conversations/").status_code == 401


# --- limits per end user ------------------------------------------------------------------------------


def test_messages_per_minute_per_end_user_answer_429_with_retry_after(api, enqueuing_agent):
    enqueuing_agent.end_user_messages_per_minute = 2
    enqueuing_agent.save()
    bob, carol = _someone(), _someone()
    conversation = _create(api, enqueuing_agent, end_user=bob).json()["id"]
    another_of_bob = _create(api, enqueuing_agent, end_user=bob).json()["id"]
    statuses = [_post(api, conversation).status_code, _post(api, another_of_bob).status_code]
    refused = _post(api, conversation)
    assert statuses == [202, 202] and refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert "2 messages in the last minute" in refused.json()["message"]
    assert Run.objects.filter(conversation__end_user=bob).count() == 2
    # Another end user, and a conversation without one, are not held back.
    assert _post(api, _create(api, enqueuing_agent, end_user=carol).json()["id"]).status_code == 202
    assert [_post(api, _create(api, enqueuing_agent).json()["id"]).status_code for _ in range(3)] == [202] * 3


def test_the_minute_window_slides(enqueuing_agent):
    enqueuing_agent.end_user_messages_per_minute = 2
    bob = _someone()

    def check(now: float):
        at = datetime.fromtimestamp(now, UTC)
        try:
            end_user_limits_check(agent=enqueuing_agent, owner_id=1, end_user=bob, trigger=RunTrigger.API, now=at)
        except AdmissionRefused as exc:
            return exc.retry_after
        return None

    assert [check(1000), check(1010), check(1030)] == [None, None, 30]
    assert check(1061) is None  # the first left the window; the refused one was not counted
    assert check(1065) == 5


USAGE = {"prompt_tokens": 40, "completion_tokens": 10}


def test_tokens_per_day_per_end_user_answer_429_until_the_agents_midnight(fake_llm, alice, api):
    agent = agent_on(
        fake_llm,
        {"fallback": {"content": "fine", "usage": USAGE}},
        end_user_tokens_per_day=100,
        time_zone="Asia/Shanghai",
    )
    bob = _someone()
    conversation = _create(api, agent, end_user=bob).json()["id"]
    with mock.patch("engine.tasks.run_advance_task.delay"):
        for _ in range(2):
            accepted = _post(api, conversation)
            assert accepted.status_code == 202
            assert advance(Run.objects.get(pk=accepted.json()["id"])).total_tokens == 50
        refused = _post(api, conversation)
        assert refused.status_code == 429
        _, midnight = day_bounds(timezone.now(), "Asia/Shanghai")
        assert abs(int(refused["Retry-After"]) - math.ceil((midnight - timezone.now()).total_seconds())) <= 2
        message = refused.json()["message"]
        assert "used 100 tokens" in message and "limit of 100" in message and "Asia/Shanghai" in message
        # The same id of another application (token owner) is another person.
        theirs = client_for(make_user())
        assert _post(theirs, _create(theirs, agent, end_user=bob).json()["id"]).status_code == 202
        # Yesterday's runs do not count.
        Run.objects.filter(conversation_id=conversation).update(created_at=timezone.now() - timedelta(days=2))
        assert _post(api, conversation).status_code == 202


def test_delegated_runs_tokens_count_too(alice, api):
    agent = make_agent(slug=f"eu-{uuid.uuid4().hex[:8]}", end_user_tokens_per_day=100, concurrent_messages="enqueue")
    conversation = _create(api, agent, end_user=_someone()).json()["id"]
    run = _post(api, conversation).json()["id"]
    Run.objects.filter(pk=run).update(total_tokens=60, children_tokens=40)
    assert _post(api, conversation).status_code == 429


# --- the OpenAI façade's `user` -----------------------------------------------------------------------


def _complete(caller, model: str, **body):
    payload = {"model": model, "messages": [{"role": "user", "content": "hello"}], **body}
    headers = {"Authorization": f"Bearer {token_for(caller)}"}
    return async_to_sync(AsyncClient().post)(
        "/v1/chat/completions", payload, content_type="application/json", headers=headers
    )


@pytest.fixture
def facade(settings):
    """An agent for chat completions whose runs stay queued (kept off the broker), answered
    with the wait's 504 at once: what matters here is the run and its conversation."""
    settings.AGENTRY_COMPLETION_TIMEOUT_SECONDS = 0.1
    with mock.patch("engine.tasks.run_advance_task.delay"):
        yield make_agent(slug=f"oa-eu-{uuid.uuid4().hex[:6]}", end_user_messages_per_minute=1)


@pytest.mark.django_db(transaction=True)
def test_the_openai_user_field_is_the_conversations_end_user(facade):
    user, bob = make_user(), f"  {_someone()} "
    response = _complete(user, facade.slug, user=bob)
    assert response.status_code == 504, response.content
    run = Run.objects.get(pk=response.headers["X-Agentry-Run-Id"])
    assert run.conversation.end_user == bob.strip() and run.conversation.owner == user
    # The agent takes one message a minute from each end user.
    refused = _complete(user, facade.slug, user=bob)
    assert refused.status_code == 429 and 1 <= int(refused.headers["Retry-After"]) <= 60
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert Run.objects.count() == 1
    # Without `user` there is no end user, and no such limit.
    assert [_complete(user, facade.slug).status_code for _ in range(2)] == [504, 504]
    assert Conversation.objects.filter(end_user="").count() == 2


@pytest.mark.django_db(transaction=True)
def test_the_openai_user_tokens_per_day(facade):
    facade.end_user_messages_per_minute, facade.end_user_tokens_per_day = None, 10
    facade.save()
    user, bob = make_user(), _someone()
    first = _complete(user, facade.slug, user=bob)
    Run.objects.filter(pk=first.headers["X-Agentry-Run-Id"]).update(total_tokens=10)
    refused = _complete(user, facade.slug, user=bob)
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) > 0
    assert "limit of 10" in refused.json()["error"]["message"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("bad", [42, "a\nb", "x" * 201, ["bob"]], ids=["number", "newline", "too-long", "list"])
def test_a_bad_openai_user_is_a_400_naming_it(facade, bad):
    response = _complete(make_user(), facade.slug, user=bad)
    assert response.status_code == 400, response.content
    assert response.json()["error"]["param"] == "user"
    assert not Run.objects.exists()
