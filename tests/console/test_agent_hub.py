"""An agent's page (the hub): each section for a seeded agent (configuration, versions, quality,
traffic from the rollups, ways in), every number linked to the filtered admin list behind it and
every address absolute; another workspace's agent is a 404 and a staff member without the
operator permission a 403; the statement count does not grow with the agent's runs; and every
list that shows an agent links to its page."""

import io
import re
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from agents.models import Agent, AgentDelegate, GuardrailRule
from agents.releases import version_publish
from agents.services import agent_version_current
from alerts.models import AlertFiring, AlertRule
from conversations.models import Approval, GuardrailTrigger, RunFeedback
from conversations.monitoring.rollups import rollups_refresh
from demo.customer_service import customer_service_seed
from demo.seed import demo_memory_seed
from demo.workspaces import RESEARCH_AGENT
from evals.models import EvalRun, EvalRunStatus, EvalSuite, ReleaseGate
from notifications.models import Webhook
from tests.support.factories import ModelConfigFactory, make_agent
from tests.support.ledger import ledger_call, ledger_run
from tests.support.ledger_seed import ledger_seed
from triggers.models import Hook, Schedule
from widgets.models import Widget
from workspaces.defaults import default_workspace_id
from workspaces.models import Workspace

pytestmark = pytest.mark.django_db

DEMO_LLM = "http://127.0.0.1:9/v1"
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
    Webhook.objects.create(
        agent=agent,
        url="https://open.feishu.cn/open-apis/bot/v2/hook/secret-key",
        format=Webhook.Format.FEISHU,
        secret="x" * 32,
        receives_alerts=True,
    )
    GuardrailTrigger.objects.create(
        run=runs[1], side="input", rule_id=1, kind="pattern", action=GuardrailTrigger.Action.FLAG, matched="x"
    )
    rollups_refresh(since=now - timedelta(days=1))
    return {"agent": agent, "helper": helper, "widget": widget, "failed": failed}


@pytest.fixture
def publisher(staff):
    """The on-call member, who may also publish (the admin's release actions' permission)."""
    staff.user_permissions.add(Permission.objects.get(codename="publish_agent", content_type__app_label="agents"))
    return staff


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


def test_versions_and_releases(client, seeded, publisher):
    text = _section(_page(client, seeded["agent"]), "versions")
    agent = seeded["agent"]
    # The draft has changes since v1, frozen into v2 already: compared with live in one click.
    assert 'id="hub-live">v1<' in text and 'id="hub-draft">v2, unpublished changes<' in text
    diff = reverse("admin:agents_agent_diff", args=[agent.pk])
    assert _href(text, "hub-draft-diff") == diff + "?a=1&b=2"
    assert _href(text, "hub-versions-link") == reverse("admin:agents_agent_versions", args=[agent.pk])
    assert "<td>publish</td><td>v1</td>" in text and "<td>first</td>" in text
    # The versions with their diff to live; the release actions for one who may publish.
    assert text.count(f'href="{diff}?a=1&amp;b=2"') == 2  # the draft's line and v2's row
    # Nothing published before v1 to roll back to.
    assert 'id="hub-publish"' in text and 'id="hub-canary-start"' in text and 'id="hub-rollback"' not in text
    # The diff the link opens.
    client.force_login(_superuser())
    assert client.get(diff + "?a=1&b=2").status_code == 200


def test_the_draft_the_same_as_live_offers_no_publish(client, publisher):
    agent = make_agent(tools=["test-counter"])
    version_publish(agent=agent, user=publisher, note="first")
    text = _section(_page(client, agent), "versions")
    assert 'id="hub-draft">the same as the live version<' in text and 'id="hub-publish"' not in text


def _release(client, agent, **data):
    return client.post(reverse("monitoring:agent-release", args=[agent.slug]), data)


def test_publish_canary_and_rollback_from_the_page(client, seeded, publisher):
    agent = seeded["agent"]
    hub = hub_url(agent)
    # A refusal is said on the page: publishing takes a note.
    response = _release(client, agent, action="publish", note="")
    assert response.status_code == 302 and response["Location"] == hub + "#hub-versions"
    assert "a note is required" in client.get(hub).content.decode()
    agent.refresh_from_db()
    assert agent.published_version.number == 1

    response = _release(client, agent, action="canary_start", percent="20", note="try v2 on a fifth")
    assert response.status_code == 302
    agent.refresh_from_db()
    assert agent.canary_version.number == 2 and agent.canary_percent == 20
    text = _section(_page(client, agent), "versions")
    assert 'id="hub-canary">v2<' in text and 'id="hub-canary-promote"' in text and 'id="hub-publish"' not in text
    assert _release(client, agent, action="canary_promote", note="good").status_code == 302
    agent.refresh_from_db()
    assert agent.published_version.number == 2 and agent.canary_version is None

    assert _release(client, agent, action="rollback", version="1", note="back").status_code == 302
    agent.refresh_from_db()
    assert agent.published_version.number == 1
    assert "version 1." in client.get(hub).content.decode()  # the success message
    # A version the agent does not have is refused, not a 500.
    assert _release(client, agent, action="rollback", version="99", note="x").status_code == 302
    assert "The agent has no such version." in client.get(hub).content.decode()
    # A publish with a fresh draft, then an abort of a canary.
    agent.system_prompt = "Another prompt."
    agent.save()
    assert _release(client, agent, action="publish", note="new prompt").status_code == 302
    agent.refresh_from_db()
    assert agent.published_version.number == 3
    # A canary of a newer draft, aborted: the live version stays.
    agent.system_prompt = "A third prompt."
    agent.save()
    assert _release(client, agent, action="canary_start", percent="5", note="small").status_code == 302
    agent.refresh_from_db()
    assert agent.canary_version.number == 4
    assert _release(client, agent, action="canary_abort", note="worse").status_code == 302
    agent.refresh_from_db()
    assert agent.canary_version is None and agent.published_version.number == 3
    assert "Roll back the canary" not in _section(_page(client, agent), "versions")
    # A form the page did not send: 400 with the page and its errors.
    response = _release(client, agent, action="explode")
    assert response.status_code == 400 and 'id="hub-release-errors"' in response.content.decode()


def test_a_release_check_s_refusal_is_a_message(client, seeded, monkeypatch, publisher):
    from agents import releases

    def gate(*, agent, version, action):
        raise releases.ReleaseRefused("The eval gate says no.")

    monkeypatch.setattr(releases, "_release_checks", [gate])
    agent = seeded["agent"]
    assert _release(client, agent, action="publish", note="v2").status_code == 302
    assert "The eval gate says no." in client.get(hub_url(agent)).content.decode()
    agent.refresh_from_db()
    assert agent.published_version.number == 1


def test_release_actions_take_the_publish_permission(client, seeded):
    agent = seeded["agent"]
    user = get_user_model().objects.create_user("watcher", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_run", content_type__app_label="conversations"))
    client.force_login(user)
    text = _section(_page(client, agent), "versions")
    assert 'id="hub-release-actions"' not in text
    assert _release(client, agent, action="publish", note="v2").status_code == 403
    agent.refresh_from_db()
    assert agent.published_version.number == 1
    assert client.get(reverse("monitoring:agent-release", args=[agent.slug])).status_code == 405


def test_release_actions_on_another_workspace_s_agent_are_a_404(client, seeded, publisher):
    bravo = Workspace.objects.create(name="Bravo", slug="bravo")
    theirs = make_agent(
        name="Bravo agent", slug="bravo-agent", workspace=bravo, model_config=ModelConfigFactory(workspace=bravo)
    )
    assert _release(client, theirs, action="publish", note="theirs").status_code == 404
    theirs.refresh_from_db()
    assert theirs.published_version is None


def test_release_actions_check_csrf(seeded, publisher):
    from django.test import Client

    guarded = Client(enforce_csrf_checks=True)
    guarded.force_login(publisher)
    assert _release(guarded, seeded["agent"], action="publish", note="v2").status_code == 403


def test_quality(client, seeded):
    agent = seeded["agent"]
    suite = EvalSuite.objects.get(name="Weather suite")
    ReleaseGate.objects.create(agent=agent, suite=suite, enabled=False)
    rule = AlertRule.objects.create(
        name="Weather failures", kind=AlertRule.Kind.FAILURE_RATE, agent=agent, threshold=10
    )
    AlertFiring.objects.create(rule=rule, value=30, threshold=10, summary="30 % failed")
    text = _section(_page(client, agent), "quality")
    # Alerts are for those who may read firings, as on the dashboard.
    assert 'id="hub-alerts"' not in text
    assert "Weather suite</a> (off)" in _section(text + "</section>", "gate")
    assert "Weather suite" in text and "75.0 %" in text
    negative = _href(text, "hub-negative")
    assert urlsplit(negative).path == reverse("admin:conversations_runfeedback_changelist")
    query = parse_qs(urlsplit(negative).query)
    assert query["run__agent__id__exact"] == [str(agent.pk)] and query["rating__exact"] == ["-1"]
    assert 'id="hub-negative">1<' in text and 'id="hub-positive">1<' in text
    assert 'id="hub-flagged">1<' in text
    # Each number opens the list it counts.
    client.force_login(_superuser())
    text = _section(_page(client, agent), "quality")
    assert 'id="hub-alerts">1<' in text
    for element_id in ("hub-negative", "hub-positive", "hub-flagged", "hub-alerts"):
        listing = client.get(_href(text, element_id))
        assert listing.status_code == 200 and listing.context["cl"].result_count == 1, element_id
    flagged = parse_qs(urlsplit(_href(text, "hub-flagged")).query)
    assert flagged["guardrail"] == ["flag"] and flagged["agent__id__exact"] == [str(agent.pk)]
    # An eval run still going has no metrics: its row says so instead of failing the page.
    EvalRun.objects.create(
        suite=EvalSuite.objects.get(name="Weather suite"),
        agent_version=agent.published_version,
        repetitions=1,
        status=EvalRunStatus.RUNNING,
    )
    assert ">–</a></td>" in _section(_page(client, agent), "quality")


def _superuser():
    return get_user_model().objects.create_superuser("root", password="pw")


def test_traffic_numbers_link_to_their_filtered_lists(client, staff, seeded):
    text = _section(_page(client, seeded["agent"]), "traffic")
    agent = seeded["agent"]
    assert re.search(r'id="hub-runs">3<', text) and re.search(r'id="hub-failed">1<', text)
    assert re.search(r'id="hub-pending">1<', text)
    assert re.search(r'id="hub-tokens">\d+<', text) and not re.search(r'id="hub-tokens">0<', text)
    assert "–" not in re.search(r'id="hub-latency">(.*?)</td>', text).group(1)
    failed = _href(text, "hub-failed")
    query = parse_qs(urlsplit(failed).query)
    assert query["agent__id__exact"] == [str(agent.pk)] and query["status__exact"] == ["failed"]
    assert "created_at__gte" in query
    # The shortcuts: the last failed run's timeline, the oldest approval waiting, the queue.
    assert _href(text, "hub-last-failed") == reverse("monitoring:run", args=[seeded["failed"].pk])
    pending = Approval.objects.get(run__agent=agent, status=Approval.Status.PENDING)
    assert _href(text, "hub-oldest-pending") == reverse("approvals:detail", args=[pending.pk])
    assert _href(text, "hub-pending") == reverse("approvals:queue") + "?agent=weather-desk"
    # The filters exist on those changelists: the admin answers them with the rows counted here.
    staff.is_superuser = True
    staff.save()
    expected = {"hub-failed": 1, "hub-runs": 3, "hub-cost": 3, "hub-tokens": 3, "hub-calls-failed": 1}
    for element_id, count in expected.items():
        listing = client.get(_href(text, element_id))
        assert listing.status_code == 200, element_id
        assert listing.context["cl"].result_count == count, element_id
    calls = client.get(_href(text, "hub-calls"))
    assert calls.status_code == 200 and calls.context["cl"].result_count == int(
        re.search(r'id="hub-calls">(\d+)<', text).group(1)
    )
    slow = client.get(_href(text, "hub-p95"))
    assert slow.status_code == 200 and 1 <= slow.context["cl"].result_count
    queue = client.get(_href(text, "hub-pending"))
    assert queue.status_code == 200 and str(pending.pk) in queue.content.decode()
    assert client.get(_href(text, "hub-oldest-pending")).status_code == 200
    today = re.findall(r'<td><a href="([^"]+)">(\d+)</a></td>', text)[-1]
    day_list = client.get(today[0].replace("&amp;", "&"))
    assert day_list.status_code == 200 and day_list.context["cl"].result_count == int(today[1]) == 3
    day_failed = re.findall(r'<a href="([^"]+)" class="hub-day-failed">(\d+)</a>', text)[-1]
    listing = client.get(day_failed[0].replace("&amp;", "&"))
    assert listing.context["cl"].result_count == int(day_failed[1]) == 1


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
    # Each snippet has a copy button naming it; the button is a real button (keyboard).
    for target in ("hub-rest", "hub-model-name", "hub-curl", f"hub-hook-{hook.pk}", f"hub-widget-{widget.pk}"):
        assert f'<button type="button" class="button copy-button" data-copy="{target}"' in text, target
        assert f'id="{target}"' in text and f'id="{target}-status"' in text
    # The chat channel: its host, not its key-bearing address.
    assert "open.feishu.cn" in text and "hook/secret-key" not in text


def test_the_mcp_address_shows_once_the_agent_is_exposed(client, seeded):
    agent = seeded["agent"]
    assert 'id="hub-mcp"' not in _section(_page(client, agent), "reach")
    agent.mcp_exposed = True
    agent.save(update_fields=["mcp_exposed"])
    text = _section(_page(client, agent), "reach")
    assert 'id="hub-mcp">http://testserver/mcp/<' in text and 'data-copy="hub-mcp"' in text


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
    runs = ledger_seed(agent, 4, created_at=now - timedelta(minutes=1))
    # More of everything else the page reads: ratings, flags, approvals waiting, a failure,
    # versions and releases.
    Approval.objects.filter(run__in=runs[:2]).update(status=Approval.Status.PENDING)
    for run, rating in zip(runs, (1, -1, -1), strict=False):
        RunFeedback.objects.create(run=run, rating=rating)
        GuardrailTrigger.objects.create(run=run, side="input", rule_id=1, kind="pattern", action="flag")
    ledger_run(agent, status="failed", stop_reason="provider_error", error="boom", finished_at=now)
    for note in ("second", "third"):
        agent.system_prompt = note
        agent.save()
        version_publish(agent=agent, user=staff, note=note)
        agent.refresh_from_db()
    rollups_refresh(since=now - timedelta(days=8))
    assert _statements(client, agent) == few
    assert few <= 40, few


def test_every_list_that_shows_an_agent_links_to_its_page(client, staff, seeded):
    agent, url = seeded["agent"], hub_url(seeded["agent"])
    front = client.get("/").content.decode()
    assert f'href="{url}"' in front and 'id="front-door-agents"' in front
    dashboard = client.get(reverse("monitoring:dashboard")).content.decode()
    assert f'href="{url}" class="agent-hub-link"' in dashboard
    # The tokens-per-agent-per-day rows too.
    assert re.search(rf'<tr><td><a href="{url}" class="agent-hub-link">Weather desk</a></td><td>\d{{4}}-', dashboard)
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
    # Every admin list with an agent column names it with the one helper (agents.page_links).
    for model in (
        "conversations_run",
        "conversations_conversation",
        "conversations_approval",
        "conversations_runfeedback",
        "evals_evalrun",
        "triggers_schedule",
        "triggers_hook",
        "widgets_widget",
        "notifications_webhook",
        "agents_agentversion",
        "agents_agentrelease",
    ):
        listing = client.get(reverse(f"admin:{model}_changelist"))
        assert listing.status_code == 200, model
        assert f'<a href="{url}" class="agent-hub-link">Weather desk</a>' in listing.content.decode(), model
    # The approval queue's cards.
    queue = client.get(reverse("approvals:queue")).content.decode()
    assert f'agent <strong><a href="{url}" class="agent-hub-link">Weather desk</a></strong>' in queue


def _demo_seed() -> None:
    """What docs/demo.md's commands seed: seed 000's agent, the agent that remembers, seed 001's
    customer service and the research workspace (on a model server nobody calls here)."""
    call_command("agentry_seed_demo", llm_base_url=DEMO_LLM, stdout=io.StringIO())
    demo_memory_seed(llm_base_url=DEMO_LLM)
    customer_service_seed(llm_base_url=DEMO_LLM, order_service_url="http://127.0.0.1:9")


def test_the_front_door_links_every_demo_agent(client, staff):
    _demo_seed()
    front = client.get("/").content.decode()
    default_agents = Agent.objects.filter(workspace_id=default_workspace_id())
    assert default_agents.count() >= 6  # customer-service, the memory agent, the four cs-* agents
    for agent in default_agents:
        assert f'<li class="card" data-agent="{agent.slug}"><a href="{hub_url(agent)}">' in front, agent.slug
        assert client.get(hub_url(agent)).status_code == 200, agent.slug
    # The research workspace's agent is on its members' front door, not on this one.
    assert RESEARCH_AGENT not in front


def test_traffic_shows_the_cached_share_of_prompt_tokens_and_what_it_saved(client, staff):
    model = ModelConfigFactory(price_input_per_million="3", price_cached_input_per_million="0.3")
    agent = make_agent(name="Cached desk", slug="cached-desk", model_config=model)
    now = timezone.now()
    for cached in (800, 0):
        run = ledger_run(agent, created_at=now - timedelta(minutes=5), finished_at=now)
        ledger_call(run, started_at=now - timedelta(minutes=2), prompt_tokens=1000, cached_tokens=cached)
    rollups_refresh(since=now - timedelta(days=1))
    text = _section(_page(client, agent), "traffic")
    # 800 cached tokens, each 3 - 0.3 per million cheaper than at the input price.
    cell = re.search(r'id="hub-cache">(.*?)</td>', text).group(1)
    assert cell == "800 of 2000 (40 %), saved 0.00216000"
