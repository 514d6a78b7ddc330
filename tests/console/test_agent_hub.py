"""An agent's page (the hub): each section for a seeded agent (configuration, versions, quality,
traffic from the rollups, ways in), every number linked to the filtered admin list behind it and
every address absolute; another workspace's agent is a 404 and a staff member without the
operator permission a 403; the statement count does not grow with the agent's runs; and every
list that shows an agent links to its page."""

import re
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from agents.models import AgentDelegate, GuardrailRule
from agents.releases import version_publish
from agents.services import agent_version_current
from conversations.models import Approval, RunFeedback
from conversations.monitoring.rollups import rollups_refresh
from evals.models import EvalRun, EvalRunStatus, EvalSuite
from tests.support.factories import ModelConfigFactory, make_agent
from tests.support.ledger import ledger_call, ledger_run
from tests.support.ledger_seed import ledger_seed
from triggers.models import Hook, Schedule
from widgets.models import Widget
from workspaces.models import Workspace

pytestmark = pytest.mark.django_db

PROMPT = "You answer questions about the weather in Hangzhou. " * 20


def hub_url(agent) -> str:
    return reverse("monitoring:agent", args=[agent.slug])


@pytest.fixture
def seeded(staff):
    """A published agent with a newer draft, a tool that always asks, a delegate, a guardrail, a
    hook, a schedule, a widget, an eval run, ratings, three ended runs (one failed) in the
    rollups and one approval waiting."""
    agent = make_agent(
        name="Weather desk",
        slug="weather-desk",
        system_prompt=PROMPT,
        tools=["test-counter"],
        approval={"test-counter": "always"},
        run_token_budget=12345,
    )
    helper = make_agent(name="Helper agent", slug="helper-agent", model_config=agent.model_config)
    AgentDelegate.objects.create(parent=agent, child=helper, tool_name="ask_helper", description="Ask the helper.")
    GuardrailRule.objects.create(agent=agent, kind=GuardrailRule.Kind.PII_EMAIL, action=GuardrailRule.Action.BLOCK)
    version_publish(agent=agent, user=staff, note="first")
    agent.refresh_from_db()
    agent.system_prompt = PROMPT + "Be brief."
    agent.save()
    agent_version_current(agent=agent)  # the draft, v2
    agent.refresh_from_db()

    now = timezone.now()
    runs = ledger_seed(agent, 2, created_at=now - timedelta(minutes=5))
    Approval.objects.filter(run=runs[0]).update(status=Approval.Status.PENDING)
    failed = ledger_run(agent, status="failed", stop_reason="provider_error", error="boom", finished_at=now)
    ledger_call(failed, started_at=now - timedelta(minutes=1), status="failed", error="boom")
    RunFeedback.objects.create(run=runs[0], rating=-1, comment="wrong city")
    RunFeedback.objects.create(run=runs[1], rating=1)
    suite = EvalSuite.objects.create(name="Weather suite")
    EvalRun.objects.create(
        suite=suite,
        agent_version=agent.published_version,
        repetitions=1,
        status=EvalRunStatus.COMPLETED,
        metrics={"task_completion_rate": 0.75},
        finished_at=now,
    )
    Hook.objects.create(agent=agent, name="Alerts hook", secret="s" * 32, message="{{ payload.note }}", owner=staff)
    Schedule.objects.create(agent=agent, name="Morning report", cron="0 9 * * *", message="report")
    widget = Widget.objects.create(agent=agent, name="Site widget", secret="wsec_" + "a" * 40, owner=staff)
    rollups_refresh(since=now - timedelta(days=1))
    return {"agent": agent, "helper": helper, "widget": widget, "failed": failed}


def _page(client, agent) -> str:
    response = client.get(hub_url(agent))
    assert response.status_code == 200
    return response.content.decode()


def _section(text: str, section: str) -> str:
    start = text.index(f'id="hub-{section}"')
    end = text.index("</section>", start)
    return text[start:end]


def _href(text: str, element_id: str) -> str:
    match = re.search(rf'<a href="([^"]+)"[^>]*id="{element_id}"', text)
    assert match, element_id
    return match.group(1).replace("&amp;", "&")


def test_what_it_is(client, seeded):
    text = _section(_page(client, seeded["agent"]), "identity")
    agent = seeded["agent"]
    assert agent.model_config.name in text and agent.model_config.model in text
    assert "You answer questions about the weather in Hangzhou." in text and "…" in text
    assert "Be brief." not in text  # an excerpt, not the whole prompt
    # The live version's tools, the tool's "always" in force, the delegate as the version runs it.
    tool_row = re.search(r'<tr data-tool="test-counter">(.*?)</tr>', text, re.S).group(1)
    assert "<td>always</td>" in tool_row
    assert 'data-tool="ask_helper"' in text
    assert reverse("monitoring:agent", args=["helper-agent"]) in text and "Helper agent" in text
    assert "PII: email addresses" in text
    assert "12345" in text


def test_versions_and_releases(client, seeded):
    text = _section(_page(client, seeded["agent"]), "versions")
    agent = seeded["agent"]
    assert 'id="hub-live">v1<' in text and 'id="hub-draft">v2<' in text
    assert reverse("admin:agents_agent_diff", args=[agent.pk]) + "?a=1&amp;b=2" in text
    assert _href(text, "hub-versions-link") == reverse("admin:agents_agent_versions", args=[agent.pk])
    assert "<td>publish</td><td>v1</td>" in text


def test_quality(client, seeded):
    text = _section(_page(client, seeded["agent"]), "quality")
    agent = seeded["agent"]
    assert "Weather suite" in text and "75.0 %" in text
    negative = _href(text, "hub-negative")
    assert urlsplit(negative).path == reverse("admin:conversations_runfeedback_changelist")
    assert parse_qs(urlsplit(negative).query) == {"run__agent__id__exact": [str(agent.pk)], "rating__exact": ["-1"]}
    assert ">1 negative rating to review<" in text and ">2 ratings<" in text
    # An eval run still going has no metrics: its row says so instead of failing the page.
    EvalRun.objects.create(
        suite=EvalSuite.objects.get(name="Weather suite"),
        agent_version=agent.published_version,
        repetitions=1,
        status=EvalRunStatus.RUNNING,
    )
    assert "<td>–</td>" in _section(_page(client, agent), "quality")


def test_traffic_numbers_link_to_their_filtered_lists(client, staff, seeded):
    text = _section(_page(client, seeded["agent"]), "traffic")
    agent = seeded["agent"]
    assert re.search(r'id="hub-runs">3<', text) and re.search(r'id="hub-failed">1<', text)
    assert re.search(r'id="hub-pending">1<', text)
    assert re.search(r'id="hub-tokens">\d+<', text) and not re.search(r'id="hub-tokens">0<', text)
    assert "–" not in re.search(r'id="hub-latency">([^<]*)<', text).group(1)
    failed = _href(text, "hub-failed")
    assert parse_qs(urlsplit(failed).query) == {"agent__id__exact": [str(agent.pk)], "status__exact": ["failed"]}
    # The filters exist on those changelists: the admin answers them with the rows counted here.
    staff.is_superuser = True
    staff.save()
    listing = client.get(failed)
    assert listing.status_code == 200 and listing.context["cl"].result_count == 1
    pending = client.get(_href(text, "hub-pending"))
    assert pending.status_code == 200 and pending.context["cl"].result_count == 1
    runs = client.get(_href(text, "hub-runs"))
    assert runs.status_code == 200 and runs.context["cl"].result_count == 3
    today = re.findall(r'<td><a href="([^"]+)">(\d+)</a></td>', text)[-1]
    day_list = client.get(today[0].replace("&amp;", "&"))
    assert day_list.status_code == 200 and day_list.context["cl"].result_count == int(today[1]) == 3


def test_how_it_is_reached_with_absolute_addresses(client, seeded):
    text = _section(_page(client, seeded["agent"]), "reach")
    widget = seeded["widget"]
    assert "http://testserver/api/v1/agents/weather-desk/" in text
    assert 'id="hub-model-name">weather-desk<' in text
    assert (
        "curl http://testserver/v1/chat/completions" in text and "&quot;model&quot;: &quot;weather-desk&quot;" in text
    )
    hook = Hook.objects.get(agent=seeded["agent"])
    assert f"POST http://testserver/api/v1/hooks/{hook.pk}/" in text
    assert "Morning report" in text and "0 9 * * *" in text
    # The widget admin's own snippet.
    assert f"data-widget=&quot;{widget.pk}&quot;" in text and "src=&quot;http://testserver/" in text


def test_another_workspace_s_agent_is_a_404(client, seeded):
    bravo = Workspace.objects.create(name="Bravo", slug="bravo")
    theirs = make_agent(
        name="Bravo agent", slug="bravo-agent", workspace=bravo, model_config=ModelConfigFactory(workspace=bravo)
    )
    assert client.get(hub_url(theirs)).status_code == 404
    assert client.get(reverse("monitoring:agent", args=["no-such-agent"])).status_code == 404
    assert b"Bravo agent" not in client.get("/").content


def test_without_the_operator_permission_it_is_a_403(client, seeded):
    user = get_user_model().objects.create_user("no-perm", password="pw", is_staff=True)
    client.force_login(user)
    assert client.get(hub_url(seeded["agent"])).status_code == 403
    client.logout()
    assert client.get(hub_url(seeded["agent"])).status_code == 302  # to the sign-in page


def _statements(client, agent) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(hub_url(agent)).status_code == 200
    return len(queries)


def test_statement_count_does_not_grow_with_the_agent_s_history(client, staff):
    agent = make_agent(tools=["test-counter"])
    version_publish(agent=agent, user=staff, note="first")
    agent.refresh_from_db()
    now = timezone.now()
    ledger_seed(agent, 1, created_at=now - timedelta(hours=1))
    rollups_refresh(since=now - timedelta(days=8))
    few = _statements(client, agent)
    for days_ago in range(1, 7):
        ledger_seed(agent, 3, created_at=now - timedelta(days=days_ago))
    ledger_seed(agent, 1, created_at=now - timedelta(minutes=1))
    rollups_refresh(since=now - timedelta(days=8))
    assert _statements(client, agent) == few
    assert few <= 40, few


def test_every_list_that_shows_an_agent_links_to_its_page(client, staff, seeded):
    agent, url = seeded["agent"], hub_url(seeded["agent"])
    front = client.get("/").content.decode()
    assert f'href="{url}"' in front and 'id="front-door-agents"' in front
    dashboard = client.get(reverse("monitoring:dashboard")).content.decode()
    assert f'href="{url}" class="agent-hub-link"' in dashboard
    timeline = client.get(reverse("monitoring:run", args=[seeded["failed"].pk])).content.decode()
    assert f'href="{url}" id="run-agent-link"' in timeline
    staff.is_superuser = True
    staff.save()
    changelist = client.get(reverse("admin:agents_agent_changelist")).content.decode()
    assert f'href="{url}" class="agent-hub-link"' in changelist
    change = client.get(reverse("admin:agents_agent_change", args=[agent.pk])).content.decode()
    assert f'href="{url}" id="agent-hub-link"' in change
    hub = client.get(url).content.decode()
    assert _href(hub, "agent-change-link") == reverse("admin:agents_agent_change", args=[agent.pk])
