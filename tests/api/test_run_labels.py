"""Tags and metadata on runs from the API: given on a posted message or a chat completion, stored
on the run with one lookup row each (none for a run without them), shown with the run, refused
with a field error when out of bounds; and the runs list filtered by them and by the other
filters of the operators' runs list (conversations.run_filters)."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from api.completions import CompletionRequestError, completion_request_parse, completion_start
from conversations.end_users import EndUser
from conversations.models import Run, RunLabel
from memory.forget import end_user_forget
from tests.security.privileges import user_with
from tests.support.api import client_for
from tests.support.factories import make_agent
from tests.support.ledger import ledger_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def api_user():
    return user_with("conversations.view_run", superuser=True)


@pytest.fixture
def api(api_user):
    return client_for(api_user)


@pytest.fixture
def agent():
    return make_agent(slug="labels-agent")


def _post(api, agent, **body):
    conversation = api.post("/api/v1/conversations/", {"agent": agent.slug}, format="json").json()["id"]
    return api.post(f"/api/v1/conversations/{conversation}/messages/", {"content": "hi", **body}, format="json")


def test_a_posted_message_s_tags_and_metadata_go_on_its_run(api, agent, no_enqueue):
    response = _post(api, agent, tags=["vip", "support", "vip"], metadata={"customer": "acme", "ticket": "T-1"})
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["tags"] == ["vip", "support"]
    assert body["metadata"] == {"customer": "acme", "ticket": "T-1"}
    run = Run.objects.get(pk=body["id"])
    assert run.tags == ["vip", "support"] and run.metadata == {"customer": "acme", "ticket": "T-1"}
    labels = set(RunLabel.objects.filter(run=run).values_list("key", "value"))
    assert labels == {("", "vip"), ("", "support"), ("customer", "acme"), ("ticket", "T-1")}
    read = api.get(f"/api/v1/runs/{run.pk}/").json()
    assert read["tags"] == ["vip", "support"] and read["metadata"]["ticket"] == "T-1"


def test_a_run_without_labels_writes_no_lookup_row(api, agent, no_enqueue):
    response = _post(api, agent)
    assert response.status_code == 202
    assert response.json()["tags"] == [] and response.json()["metadata"] == {}
    assert not RunLabel.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"tags": "vip"}, "tags"),
        ({"tags": ["has space"]}, "tags"),
        ({"tags": ["-dash-first"]}, "tags"),
        ({"tags": ["a:b"]}, "tags"),
        ({"tags": ["x" * 65]}, "tags"),
        ({"tags": [f"t{n}" for n in range(21)]}, "tags"),
        ({"metadata": ["a"]}, "metadata"),
        ({"metadata": {"k": 1}}, "metadata"),
        ({"metadata": {"k": "v" * 513}}, "metadata"),
        ({"metadata": {"a:b": "v"}}, "metadata"),
        ({"metadata": {"k" * 65: "v"}}, "metadata"),
        ({"metadata": {f"k{n}": "v" for n in range(17)}}, "metadata"),
    ],
)
def test_bad_tags_or_metadata_are_a_400_naming_the_field(api, agent, no_enqueue, body, field):
    response = _post(api, agent, **body)
    assert response.status_code == 400, response.content
    assert field in response.json()["extra"]["fields"], response.json()
    assert not Run.objects.exists()


def test_a_chat_completion_s_metadata_goes_on_its_run_and_conversation(api_user, agent, no_enqueue):
    request = completion_request_parse(
        {"model": agent.slug, "messages": [{"role": "user", "content": "hi"}], "metadata": {"order": "42"}}
    )
    run = completion_start(user=api_user, agent=agent, request=request)
    run.refresh_from_db()
    assert run.metadata == {"order": "42"} and run.tags == []
    assert run.conversation.metadata == {"order": "42", "source": "chat.completions"}
    assert RunLabel.objects.get(run=run).value == "42"


@pytest.mark.parametrize("metadata", [{"k": 1}, {"a:b": "v"}, "text", {f"k{n}": "v" for n in range(17)}])
def test_bad_chat_completion_metadata_is_refused_on_the_parameter(metadata):
    # The 400 of /v1/chat/completions carries the parse error's param (api.openai_compat).
    with pytest.raises(CompletionRequestError) as refused:
        completion_request_parse(
            {"model": "any", "messages": [{"role": "user", "content": "hi"}], "metadata": metadata}
        )
    assert refused.value.param == "metadata" and refused.value.status == 400


def _labelled(agent, *, tags=(), metadata=None, **fields) -> Run:
    run = ledger_run(agent, tags=list(tags), metadata=metadata or {}, **fields)
    RunLabel.objects.bulk_create(
        [RunLabel(run=run, key="", value=tag) for tag in tags]
        + [RunLabel(run=run, key=key, value=value) for key, value in (metadata or {}).items()]
    )
    return run


def _ids(response) -> set[str]:
    assert response.status_code == 200, response.content
    return {row["id"] for row in response.json()["results"]}


def test_the_runs_list_filters_by_tag_meta_source_version_cost_and_duration(api, agent):
    now = timezone.now()
    cheap = _labelled(
        agent, tags=["vip"], metadata={"customer": "acme"}, cost=Decimal("0.01"), created_at=now - timedelta(seconds=30)
    )
    Run.objects.filter(pk=cheap.pk).update(
        started_at=now - timedelta(seconds=30), finished_at=now - timedelta(seconds=28)
    )
    dear = _labelled(agent, tags=["vip", "beta"], metadata={"customer": "globex"}, cost=Decimal("2.5"))
    Run.objects.filter(pk=dear.pk).update(started_at=now - timedelta(seconds=60), finished_at=now)
    replay = _labelled(agent, trigger="fork", fork_change={"kind": "none"})
    fork = _labelled(agent, trigger="fork", fork_change={"kind": "version", "version": 1})
    other = make_agent(slug="other-agent", model_config=agent.model_config)
    elsewhere = _labelled(other, tags=["vip"])

    assert _ids(api.get("/api/v1/runs/", {"tag": "vip"})) == {str(cheap.pk), str(dear.pk), str(elsewhere.pk)}
    assert _ids(api.get("/api/v1/runs/", {"tag": "beta"})) == {str(dear.pk)}
    assert _ids(api.get("/api/v1/runs/", {"meta": "customer:acme"})) == {str(cheap.pk)}
    assert _ids(api.get("/api/v1/runs/", {"source": "replay"})) == {str(replay.pk)}
    assert _ids(api.get("/api/v1/runs/", {"source": "fork"})) == {str(fork.pk)}
    assert _ids(api.get("/api/v1/runs/", {"cost_min": "1"})) == {str(dear.pk)}
    assert _ids(api.get("/api/v1/runs/", {"cost_max": "0.5", "tag": "vip"})) == {str(cheap.pk), str(elsewhere.pk)}
    assert _ids(api.get("/api/v1/runs/", {"duration_min": "10"})) == {str(dear.pk)}
    assert _ids(api.get("/api/v1/runs/", {"duration_max": "5"})) == {str(cheap.pk)}
    assert _ids(api.get("/api/v1/runs/", {"agent": "other-agent", "version": "1"})) == {str(elsewhere.pk)}
    assert _ids(api.get("/api/v1/runs/", {"agent": "other-agent", "version": "2"})) == set()


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"tag": "not a tag"}, "tag"),
        ({"meta": "no-colon"}, "meta"),
        ({"meta": "a:" + "v" * 600}, "meta"),
        ({"source": "nowhere"}, "source"),
        ({"cost_min": "cheap"}, "cost_min"),
        ({"cost_min": "-1"}, "cost_min"),
        ({"cost_min": "2", "cost_max": "1"}, "cost_min"),
        ({"duration_min": "NaN"}, "duration_min"),
        ({"duration_min": "9", "duration_max": "3"}, "duration_min"),
        ({"version": "2"}, "version"),
        ({"agent": "x", "version": "v2"}, "version"),
    ],
)
def test_a_bad_filter_is_a_400_naming_it(api, params, field):
    response = api.get("/api/v1/runs/", params)
    assert response.status_code == 400, response.content
    assert field in response.json()["extra"]["fields"], response.json()


def test_forgetting_an_end_user_blanks_their_runs_tags_and_metadata(api_user, agent, no_enqueue):
    api = client_for(api_user)
    conversation = api.post("/api/v1/conversations/", {"agent": agent.slug, "end_user": "alice"}, format="json")
    response = api.post(
        f"/api/v1/conversations/{conversation.json()['id']}/messages/",
        {"content": "hi", "tags": ["vip"], "metadata": {"email": "alice@example.com"}},
        format="json",
    )
    run = Run.objects.get(pk=response.json()["id"])
    Run.objects.filter(pk=run.pk).update(status="completed")
    erasure = end_user_forget(person=EndUser(api_user.pk, "alice"), requested_by=api_user, channel="api")
    run.refresh_from_db()
    assert run.tags == [] and run.metadata == {}
    assert not RunLabel.objects.exists() and erasure.counts["run_labels_deleted"] == 2
