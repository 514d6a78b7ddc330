"""Posting a message: what the 202 says, who may post, and what a post does not wait for."""

import threading
from types import SimpleNamespace

import pytest
import redis
from django.conf import settings as django_settings
from django.contrib.auth.models import Group, Permission
from django.db import connection, connections

from api.throttles import RunStartThrottle
from engine.runs import run_finish
from tests.support.api import client_for
from tests.support.factories import make_agent, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice():
    return make_user()


@pytest.fixture
def api(alice):
    return client_for(alice)


def _messages_url(api, agent) -> str:
    conversation = api.post("/api/v1/conversations/", {"agent": agent.slug}, format="json").json()
    return f"/api/v1/conversations/{conversation['id']}/messages/"


def test_a_new_conversation_reads_as_get_shows_it(api, agent):
    # The 201 is made from the row just written, not read back: it must say what a read says.
    metadata = {"channel": "网页", "n": 1.5, "tags": ["a", None]}
    created = api.post(
        "/api/v1/conversations/", {"agent": agent.slug, "title": "标题", "metadata": metadata}, format="json"
    )
    assert created.status_code == 201
    body = created.json()
    assert body["messages"] == [] and body["runs"] == [] and body["agent"] == "helper"
    assert body == api.get(f"/api/v1/conversations/{body['id']}/").json()


def test_the_accepted_run_reads_as_get_shows_it(api, agent):
    response = api.post(_messages_url(api, agent), {"content": "hello"}, format="json")
    assert response.status_code == 202
    assert api.get(response["Location"]).json() == response.json()


def test_a_replayed_post_shows_the_run_as_it_is_now(api, agent):
    url = _messages_url(api, agent)
    first = api.post(url, {"content": "hello"}, format="json", HTTP_IDEMPOTENCY_KEY="k-1").json()
    run_finish(run_id=first["id"], status="completed", stop_reason="final_answer")
    again = api.post(url, {"content": "hello"}, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert again.status_code == 202 and again["Idempotent-Replayed"] == "true"
    assert again.json()["status"] == "completed" and again.json() == api.get(again["Location"]).json()


def test_staff_who_may_read_a_conversation_may_not_post_in_it(api, agent):
    url = _messages_url(api, agent)
    reader = make_user(staff=True)
    reader.user_permissions.add(Permission.objects.get(codename="view_conversation"))
    response = client_for(reader).post(url, {"content": "hi"}, format="json")
    assert response.status_code == 403 and "another user" in response.json()["message"]


def test_a_user_who_lost_access_to_the_agent_gets_a_409(api, alice, agent):
    group = Group.objects.create(name="support")
    alice.groups.add(group)
    agent.allowed_groups.set([group])
    url = _messages_url(api, agent)
    alice.groups.remove(group)
    response = api.post(url, {"content": "hi"}, format="json")
    assert response.status_code == 409 and "not available any more" in response.json()["message"]


@pytest.mark.django_db(transaction=True)
def test_a_post_does_not_wait_for_a_transaction_holding_its_agents_row(api, agent, no_enqueue):
    # no_enqueue: the committed run is only looked at here, not advanced; nothing is left on the
    # broker for a later test.
    if connection.vendor != "postgresql":
        pytest.skip("row locks are PostgreSQL's")
    url = _messages_url(api, agent)
    other = connections.create_connection("default")
    other.set_autocommit(False)
    try:
        with other.cursor() as cursor:
            # What another post's transaction held until it committed, when posts locked the agent too.
            cursor.execute("SELECT 1 FROM agents_agent WHERE id = %s FOR NO KEY UPDATE", [agent.pk])
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '2s'")
        assert api.post(url, {"content": "hi"}, format="json").status_code == 202
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")
        other.rollback()
        other.close()


# --- the run-start budget, counted in Redis ---------------------------------------------------------


def _fresh_user():
    """A user whose run-start window is empty: user ids repeat from one test session to the
    next, and a window outlives its session in Redis for a minute."""
    user = make_user()
    key = RunStartThrottle().get_cache_key(SimpleNamespace(user=user), None)
    redis.Redis.from_url(django_settings.CACHES["default"]["LOCATION"]).delete(f"agentry:{key}")
    return user


def _allowed(user, now: float, monkeypatch) -> tuple[bool, float | None]:
    monkeypatch.setattr(RunStartThrottle, "timer", staticmethod(lambda: now))
    throttle = RunStartThrottle()
    allowed = throttle.allow_request(SimpleNamespace(user=user), None)
    return allowed, None if allowed else throttle.wait()


def test_the_run_start_budget_is_a_sliding_window(settings, monkeypatch):
    settings.AGENTRY_API_RUN_RATE = "3/min"
    user = _fresh_user()
    assert [_allowed(user, t, monkeypatch)[0] for t in (1000, 1010, 1020)] == [True, True, True]
    assert _allowed(user, 1030, monkeypatch) == (False, 30)
    # The oldest request left the window; the refused one was not counted.
    assert _allowed(user, 1061, monkeypatch) == (True, None)
    assert _allowed(user, 1065, monkeypatch) == (False, 5)
    assert _allowed(_fresh_user(), 1065, monkeypatch) == (True, None)


def test_requests_at_the_same_moment_are_counted_exactly(settings):
    settings.AGENTRY_API_RUN_RATE = "5/min"
    user, results, start = _fresh_user(), [], threading.Barrier(20)

    def request():
        throttle = RunStartThrottle()
        start.wait()
        results.append(throttle.allow_request(SimpleNamespace(user=user), None))

    threads = [threading.Thread(target=request) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [False] * 15 + [True] * 5


@pytest.fixture
def budgets(settings, monkeypatch):
    """A user with empty windows in both budgets (10 requests and 2 run starts a minute), the
    two windows' Redis keys, and the number of windows each script call counted."""
    from api import throttles

    settings.AGENTRY_API_RATE, settings.AGENTRY_API_RUN_RATE = "10/min", "2/min"
    user, calls = make_user(), []
    keys = [
        f"agentry:{throttle().get_cache_key(SimpleNamespace(user=user), None)}"
        for throttle in (throttles.ApiUserThrottle, throttles.RunStartThrottle)
    ]
    redis.Redis.from_url(django_settings.CACHES["default"]["LOCATION"]).delete(*keys)
    script = throttles.sliding_windows()

    def counted(**kwargs):
        calls.append(len(kwargs["keys"]))
        return script(**kwargs)

    monkeypatch.setattr(throttles, "sliding_windows", lambda: counted)
    return SimpleNamespace(user=user, keys=keys, calls=calls)


def _window_sizes(keys) -> list[int]:
    store = redis.Redis.from_url(django_settings.CACHES["default"]["LOCATION"])
    return [store.zcard(key) for key in keys]


def test_a_post_counts_against_both_budgets_in_one_round_trip(budgets):
    # The requests budget and the run-start budget: one script call keeps both windows, and a
    # post one refuses is still counted in the other, as when DRF asked each in turn.
    api = client_for(budgets.user)
    url = _messages_url(api, make_agent(slug="budgets", concurrent_messages="enqueue"))
    del budgets.calls[:]  # the conversation's creation: the requests budget alone
    assert [api.post(url, {"content": text}, format="json").status_code for text in ("1", "2", "3")] == [202, 202, 429]
    assert budgets.calls == [2, 2, 2]
    assert _window_sizes(budgets.keys) == [4, 2]  # the conversation's creation and three posts


def test_a_chat_completion_counts_against_both_budgets_in_one_round_trip(budgets):
    # The async views' check (a chat completion starts a run) offers its throttles to each other too.
    from api.async_auth import AsyncApiError, throttle_check
    from api.throttles import ApiUserThrottle, RunStartThrottle

    for _ in range(2):
        throttle_check(SimpleNamespace(), budgets.user, [ApiUserThrottle, RunStartThrottle])
    with pytest.raises(AsyncApiError) as refused:
        throttle_check(SimpleNamespace(), budgets.user, [ApiUserThrottle, RunStartThrottle])
    assert refused.value.status == 429 and int(refused.value.headers["Retry-After"]) > 0
    assert budgets.calls == [2, 2, 2]
    assert _window_sizes(budgets.keys) == [3, 2]


def test_without_redis_the_budget_is_counted_in_the_local_cache(settings, monkeypatch):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    settings.AGENTRY_API_RUN_RATE = "2/min"
    user = make_user()
    assert [_allowed(user, t, monkeypatch)[0] for t in (1000, 1001, 1002)] == [True, True, False]
