"""Feedback on runs: the conversation's owner rates a finished run (a later post replaces the
earlier), nobody else sees or rates it; the admin's review list reads negative feedback first,
links to the run's timeline and turns runs into eval cases; the dashboard counts it per version."""

import uuid
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse
from django.utils import timezone
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from agents.releases import version_publish
from console.monitoring.selectors import live_versions
from conversations.models import Conversation, RunFeedback
from evals.models import EvalCase, EvalSuite
from tests.security.privileges import user_with
from tests.support.api import client_for
from tests.support.factories import make_agent, make_user
from tests.support.ledger import ledger_run
from tests.support.llm import agent_on, echo_script
from tests.support.runs import advance, ask, start_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def owner():
    return make_user()


@pytest.fixture
def api(owner):
    return client_for(owner)


def _owned_run(owner, **fields):
    run = ledger_run(make_agent(), **fields)
    Conversation.objects.filter(pk=run.conversation_id).update(owner=owner, end_user="eu-1")
    return run


def _url(run) -> str:
    return f"/api/v1/runs/{run.pk}/feedback/"


def test_the_owner_rates_a_finished_run_and_a_later_post_replaces_it(api, owner):
    run = _owned_run(owner, finished_at=timezone.now())
    assert api.get(_url(run)).status_code == 404

    first = api.post(_url(run), {"rating": -1, "comment": "  wrong city  "}, format="json")
    assert first.status_code == 201, first.content
    assert first.json()["rating"] == -1 and first.json()["comment"] == "wrong city"
    assert first.json()["run"] == str(run.pk)

    second = api.post(_url(run), {"rating": 1}, format="json")
    assert second.status_code == 200
    feedback = RunFeedback.objects.get()
    assert feedback.rating == 1 and feedback.comment == "" and feedback.created_by == owner
    assert api.get(_url(run)).json() == second.json()


def test_a_failed_run_may_be_rated_a_running_one_not(api, owner):
    assert api.post(_url(_owned_run(owner, status="failed")), {"rating": -1}, format="json").status_code == 201
    running = _owned_run(owner, status="running", stop_reason="")
    response = api.post(_url(running), {"rating": 1}, format="json")
    assert response.status_code == 409 and "running" in response.json()["message"]
    assert not RunFeedback.objects.filter(run=running).exists()


def test_a_run_through_the_engine_is_rated_once_it_ends(fake_llm, owner, api):
    agent = agent_on(fake_llm, echo_script("x"))
    conversation = Conversation.objects.create(agent=agent, owner=owner)
    run = start_run(agent, "hello", conversation)
    assert api.post(_url(run), {"rating": 1}, format="json").status_code == 409
    run = advance(run)
    assert run.status == "completed"
    assert api.post(_url(run), {"rating": 1, "comment": "好"}, format="json").status_code == 201


def test_nobody_else_sees_or_rates_the_run(owner):
    run = _owned_run(owner)
    RunFeedback.objects.create(run=run, rating=-1, comment="private")
    # Not even staff who may view everyone's runs: feedback is the application's.
    viewer = user_with("conversations.view_run", "conversations.view_conversation")
    for client in (client_for(make_user()), client_for(viewer)):
        assert client.get(_url(run)).status_code == 404
        response = client.post(_url(run), {"rating": 1}, format="json")
        assert response.status_code == 404 and set(response.json()) == {"message", "extra"}
    assert RunFeedback.objects.get().rating == -1
    assert APIClient().post(_url(run), {"rating": 1}, format="json").status_code == 401


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"rating": 0},
        {"rating": 2},
        {"rating": "up"},
        {"rating": True},
        {"rating": 1.5},
        {"rating": None},
        {"rating": 1, "comment": "x" * 2001},
        {"rating": 1, "comment": "nul\x00"},
        {"rating": 1, "comment": {"text": "x"}},
    ],
)
def test_bad_feedback_is_400_and_writes_nothing(api, owner, body):
    run = _owned_run(owner)
    response = api.post(_url(run), body, format="json")
    assert response.status_code == 400, response.content
    assert set(response.json()) == {"message", "extra"}
    assert not RunFeedback.objects.exists()


def test_unknown_and_malformed_run_ids_are_404(api):
    assert api.post(f"/api/v1/runs/{uuid.uuid4()}/feedback/", {"rating": 1}, format="json").status_code == 404
    response = api.post("/api/v1/runs/not-a-uuid/feedback/", {"rating": 1}, format="json")
    assert response.status_code == 404 and set(response.json()) == {"message", "extra"}
    assert api.put(f"/api/v1/runs/{uuid.uuid4()}/feedback/", {"rating": 1}, format="json").status_code == 405


def test_the_schema_documents_feedback_and_forgetting():
    paths = SchemaGenerator().get_schema(request=None, public=True)["paths"]
    assert {"get", "post"} <= set(paths["/api/v1/runs/{run_id}/feedback/"])
    assert set(paths["/api/v1/runs/{run_id}/feedback/"]["post"]["responses"]) >= {"200", "201", "400", "409"}
    assert {"404", "409"} <= set(paths["/api/v1/end-users/{end_user}/"]["delete"]["responses"])


# --- the admin's review list -------------------------------------------------------------------


def test_the_review_list_shows_negative_feedback_first_with_a_link_to_the_timeline(client, owner):
    good, bad = _owned_run(owner), _owned_run(owner)
    RunFeedback.objects.create(run=good, rating=1, comment="great")
    RunFeedback.objects.create(run=bad, rating=-1, comment="wrong city")
    client.force_login(user_with("conversations.view_runfeedback"))
    changelist = reverse("admin:conversations_runfeedback_changelist")
    page = client.get(changelist).content.decode()
    assert page.index("wrong city") < page.index("great")
    assert reverse("monitoring:run", args=[bad.pk]) in page
    # The filters: rating, agent, date.
    only_bad = client.get(changelist, {"rating": "-1"}).content.decode()
    assert "wrong city" in only_bad and "great" not in only_bad
    by_agent = client.get(changelist, {"run__agent__id__exact": good.agent_id}).content.decode()
    assert "great" in by_agent and "wrong city" not in by_agent
    today = client.get(changelist, {"created_at__gte": (timezone.now() - timedelta(days=1)).isoformat()})
    assert today.status_code == 200 and "wrong city" in today.content.decode()
    # Read-only: nobody edits an end user's rating.
    change = reverse("admin:conversations_runfeedback_change", args=[bad.feedback.pk])
    assert client.post(change, {"rating": 1}).status_code == 403
    client.force_login(user_with("conversations.view_run"))
    assert client.get(changelist).status_code == 403


def test_add_to_eval_suite_makes_cases_of_the_runs_with_the_eval_permission_only(client, fake_llm, owner):
    agent = agent_on(fake_llm, echo_script("成都"))
    run = ask(agent, "我在成都，明天天气如何？", Conversation.objects.create(agent=agent, owner=owner))
    feedback = RunFeedback.objects.create(run=run, rating=-1, comment="wrong")
    suite = EvalSuite.objects.create(name="regressions")
    changelist = reverse("admin:conversations_runfeedback_changelist")
    selected = {"action": "add_to_eval_suite", "_selected_action": [feedback.pk]}

    client.force_login(user_with("conversations.view_runfeedback"))
    assert "add_to_eval_suite" not in client.get(changelist).content.decode()
    client.post(changelist, {**selected, "apply": "1", "suite": suite.pk})
    assert not EvalCase.objects.exists()

    client.force_login(user_with("conversations.view_runfeedback", "evals.add_evalcase"))
    page = client.post(changelist, selected)
    assert page.status_code == 200 and "regressions" in page.content.decode()
    bad_choice = client.post(changelist, {**selected, "apply": "1", "suite": 999999})
    assert bad_choice.status_code == 200 and not EvalCase.objects.exists()
    client.post(changelist, {**selected, "apply": "1", "suite": suite.pk})
    case = EvalCase.objects.get()
    assert case.suite == suite and case.name == f"feedback {str(run.pk)[:8]}"
    assert "我在成都" in str(case.turns)
    # The same run again: the duplicate name is reported, nothing else is written.
    response = client.post(changelist, {**selected, "apply": "1", "suite": suite.pk}, follow=True)
    assert response.status_code == 200 and EvalCase.objects.count() == 1


# --- the dashboard -----------------------------------------------------------------------------


def test_the_live_versions_table_counts_feedback_and_its_negative_rate_per_version(client, owner, admin_user):
    now = timezone.now()
    agent = make_agent(name="Rated")
    version = version_publish(agent=agent, user=user_with("agents.publish_agent"), note="v1").version
    for rating in (1, -1, -1, -1):
        run = ledger_run(agent, finished_at=now)
        run.agent_version = version
        run.save(update_fields=["agent_version"])
        RunFeedback.objects.create(run=run, rating=rating)
    ledger_run(agent, finished_at=now)  # not rated
    [row] = live_versions(user=admin_user, start=now - timedelta(hours=1))
    [published] = row["versions"]
    assert published["feedback"] == 4 and published["negative_feedback"] == 3
    assert published["negative_feedback_rate"] == 0.75

    staff = user_with("conversations.view_run")
    staff.user_permissions.add(Permission.objects.get(codename="view_run"))
    client.force_login(staff)
    panel = client.get(reverse("monitoring:panel")).content.decode()
    assert 'class="feedback">4 <small>(75' in panel
