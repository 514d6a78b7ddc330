"""The runs changelist found the way operators look: by source (fork or replay), version of the
chosen agent, tag, metadata pair, cost and duration ranges, each under its fixed parameter name;
bad values are the admin's invalid-lookup answer, never a 500; the search box finds a run by its
id, its conversation's id and its end user; each row's conversation opens its thread; and the
list's statement count with every filter applied is pinned."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from agents.services import agent_version_current
from conversations.models import Conversation, Run, RunLabel
from tests.support.factories import make_agent
from tests.support.ledger import ledger_run

pytestmark = pytest.mark.django_db

RUNS = reverse("admin:conversations_run_changelist")


@pytest.fixture
def admin_client(client):
    client.force_login(get_user_model().objects.create_superuser("root", password="pw"))
    return client


@pytest.fixture
def agent():
    agent = make_agent(name="Filter agent", slug="filter-agent", system_prompt="first")
    agent_version_current(agent=agent)
    return agent


def labelled(agent, *, tags=(), metadata=None, seconds=None, **fields) -> Run:
    run = ledger_run(agent, tags=list(tags), metadata=metadata or {}, **fields)
    RunLabel.objects.bulk_create(
        [RunLabel(run=run, key="", value=tag) for tag in tags]
        + [RunLabel(run=run, key=key, value=value) for key, value in (metadata or {}).items()]
    )
    if seconds is not None:
        now = timezone.now()
        Run.objects.filter(pk=run.pk).update(started_at=now - timedelta(seconds=seconds), finished_at=now)
    return run


def shown(client, **params) -> set:
    response = client.get(RUNS, params)
    assert response.status_code == 200, response.status_code
    return {str(pk) for pk in Run.objects.values_list("pk", flat=True) if f'title="{pk}"' in response.text}


def test_each_filter_narrows_the_list_under_its_parameter(admin_client, agent):
    v1 = agent_version_current(agent=agent)
    cheap = labelled(agent, tags=["vip"], metadata={"customer": "acme"}, cost=Decimal("0.01"), seconds=2)
    agent.system_prompt = "second"
    agent.save()
    v2 = agent_version_current(agent=agent)
    assert v2.pk != v1.pk
    dear = labelled(agent, tags=["beta"], metadata={"customer": "globex"}, cost=Decimal("3"), seconds=90)
    replay = labelled(agent, trigger="fork", fork_change={"kind": "none"})
    fork = labelled(agent, trigger="fork", fork_change={"kind": "version", "version": 1})

    assert shown(admin_client, tag="vip") == {str(cheap.pk)}
    assert shown(admin_client, meta="customer:globex") == {str(dear.pk)}
    assert shown(admin_client, cost_min="1") == {str(dear.pk)}
    assert shown(admin_client, cost_max="0.5", cost_min="0") == {str(cheap.pk), str(replay.pk), str(fork.pk)}
    assert shown(admin_client, duration_min="60") == {str(dear.pk)}
    assert shown(admin_client, duration_max="10") == {str(cheap.pk)}
    assert shown(admin_client, source="replay") == {str(replay.pk)}
    assert shown(admin_client, source="fork") == {str(fork.pk)}
    assert shown(admin_client, trigger__exact="fork") == {str(replay.pk), str(fork.pk)}
    assert shown(admin_client, agent_version__id__exact=v1.pk) == {str(cheap.pk)}


def test_the_version_filter_lists_the_chosen_agent_s_versions_only(admin_client, agent):
    other = make_agent(name="Other agent", slug="other-agent", model_config=agent.model_config)
    theirs = agent_version_current(agent=other)
    mine = agent_version_current(agent=agent)
    ledger_run(agent)
    unchosen = admin_client.get(RUNS).text
    assert f"agent_version__id__exact={mine.pk}" not in unchosen
    chosen = admin_client.get(RUNS, {"agent__id__exact": agent.pk}).text
    assert f"agent_version__id__exact={mine.pk}" in chosen and ">v1</a>" in chosen
    assert f"agent_version__id__exact={theirs.pk}" not in chosen
    # A version chosen without its agent is still shown, to clear it.
    alone = admin_client.get(RUNS, {"agent_version__id__exact": theirs.pk}).text
    assert "Other agent v1" in alone


def test_the_typed_filters_are_labelled_forms_keeping_the_other_parameters(admin_client, agent):
    ledger_run(agent)
    page = admin_client.get(RUNS, {"status__exact": "completed", "tag": "vip", "p": "0"}).text
    for name in ("tag", "meta", "cost_min", "cost_max", "duration_min", "duration_max"):
        field_id = "filter-" + name.replace("_", "-")
        assert f'<label for="{field_id}">' in page and f'id="{field_id}"' in page
    assert '<input type="hidden" name="status__exact" value="completed">' in page
    assert 'name="tag" id="filter-tag" value="vip"' in page
    assert '<input type="hidden" name="p"' not in page


@pytest.mark.parametrize(
    "params",
    [
        {"cost_min": "cheap"},
        {"cost_min": "5", "cost_max": "1"},
        {"duration_max": "NaN"},
        {"duration_min": "-3"},
        {"agent_version__id__exact": "999999"},
        {"agent_version__id__exact": "v1"},
        {"meta": "no-colon"},
        {"tag": "two words"},
        {"source": "nowhere"},
        "cost_max=%ED%A0%80&tag=%ff",
    ],
)
def test_a_bad_value_is_the_admin_s_invalid_lookup_answer(admin_client, agent, params):
    ledger_run(agent)
    response = admin_client.get(f"{RUNS}?{params}") if isinstance(params, str) else admin_client.get(RUNS, params)
    assert response.status_code == 302 and response.url.endswith("?e=1"), response.status_code


def test_the_search_box_finds_a_run_by_its_id_its_conversation_and_its_end_user(admin_client, agent):
    run = ledger_run(agent)
    second = ledger_run(agent)
    Conversation.objects.filter(pk=second.conversation_id).update(end_user="customer-77")
    ledger_run(agent)
    assert shown(admin_client, q=str(run.pk)) == {str(run.pk)}
    assert shown(admin_client, q=f" {run.conversation_id} ") == {str(run.pk)}
    assert shown(admin_client, q="customer-77") == {str(second.pk)}
    assert shown(admin_client, q="nobody") == set()


def test_each_row_s_conversation_opens_its_thread(admin_client, agent):
    run = ledger_run(agent)
    page = admin_client.get(RUNS).text
    assert reverse("monitoring:conversation", args=[run.conversation_id]) in page


def _statements(client, params) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(RUNS, params).status_code == 200
    return len(queries)


def test_the_list_s_statement_count_with_every_filter_is_pinned(admin_client, agent):
    version = agent_version_current(agent=agent)
    params = {
        "status__exact": "completed",
        "trigger__exact": "api",
        "source": "api",
        "agent__id__exact": agent.pk,
        "agent_version__id__exact": version.pk,
        "tag": "vip",
        "meta": "customer:acme",
        "cost_min": "0",
        "cost_max": "10",
        "duration_min": "0",
        "duration_max": "600",
        "end_user": "customer-77",
        "q": "customer-77",
    }
    # One matching run first: an empty list reads neither its page nor its date bounds
    # (console.run_changelist), so the few and the many are both lists with rows.
    first = labelled(agent, tags=["vip"], metadata={"customer": "acme"}, seconds=1)
    Conversation.objects.filter(pk=first.conversation_id).update(end_user="customer-77")
    few = _statements(admin_client, params)
    for _ in range(14):
        run = labelled(agent, tags=["vip"], metadata={"customer": "acme"}, seconds=1)
        Conversation.objects.filter(pk=run.conversation_id).update(end_user="customer-77")
    many = _statements(admin_client, params)
    assert len(shown(admin_client, **params)) == 15
    assert many == few
    # Session and user, the list's page and its filters' choices (agents, versions), the
    # workspace binding: pinned so that a filter reading per row shows here.
    assert many <= 10, many
