"""Prometheus /metrics: who may scrape it, what it says about real runs, and the example alerts."""

from pathlib import Path

import pytest
import yaml
from django.contrib.auth.models import Permission, User
from prometheus_client.parser import text_string_to_metric_families

from conversations.models import LLMCall, Run, ToolInvocation
from conversations.monitoring.rollups import rollups_refresh
from tests.support.llm import agent_on
from tests.support.runs import ask

ROOT = Path(__file__).resolve().parent.parent.parent
TOKEN = "scrape-token-for-tests"

ECHO_THEN_ANSWER = {
    "scenarios": [
        {
            "match": ".",
            "steps": [
                {"tool_calls": [{"name": "test-echo", "arguments": {"text": "hi"}}]},
                {"content": "Done: {last_tool_result}"},
            ],
        }
    ]
}
COUNTER = {
    "scenarios": [{"match": ".", "steps": [{"tool_calls": [{"name": "test-counter", "arguments": {"label": "m"}}]}]}]
}


@pytest.fixture
def token(settings):
    settings.AGENTRY_METRICS_TOKEN = TOKEN
    return TOKEN


def _samples(text: str) -> dict:
    """{(sample name, frozenset of labels): value}."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_scraping_needs_the_token_or_a_staff_member_who_sees_runs(client, token, db):
    anonymous = client.get("/metrics")
    assert anonymous.status_code == 401 and anonymous["WWW-Authenticate"].startswith("Bearer")
    assert "message" in anonymous.json()
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Basic {TOKEN}").status_code == 401
    ok = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert ok.status_code == 200 and ok["Content-Type"].startswith("text/plain")
    assert client.post("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 405

    client.force_login(User.objects.create_user("someone", password="pw"))
    assert client.get("/metrics").status_code == 403
    staff = User.objects.create_user("staff", password="pw", is_staff=True)
    client.force_login(staff)
    assert client.get("/metrics").status_code == 403
    staff.user_permissions.add(Permission.objects.get(codename="view_run"))
    client.force_login(User.objects.get(pk=staff.pk))
    assert client.get("/metrics").status_code == 200


def test_a_bearer_token_is_refused_when_none_is_configured(client, settings, db):
    settings.AGENTRY_METRICS_TOKEN = ""
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer anything").status_code == 401


def test_metrics_count_runs_calls_tokens_cost_tools_and_approvals(client, token, fake_llm, no_enqueue, db):
    agent = agent_on(fake_llm, ECHO_THEN_ANSWER, tools=["test-echo"])
    done = [ask(agent, f"question {n}") for n in range(2)]
    assert {run.status for run in done} == {"completed"}
    parked = ask(agent_on(fake_llm, COUNTER, tools=["test-counter"]), "count")
    assert parked.status == "awaiting_approval"
    refused = agent_on(fake_llm, {"fallback": {"content": "never", "fault": {"status": 401}}})
    assert ask(refused, "hello").status == "failed"
    rollups_refresh()

    samples = _samples(client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").content.decode())
    model = agent.model_config.name

    def value(name, **labels):
        if "agent" in labels:
            # The per-agent families name the agent's workspace too.
            labels["workspace"] = agent.workspace.slug
        return samples[(name, frozenset(labels.items()))]

    assert value("agentry_runs", status="awaiting_approval") == 1
    assert value("agentry_runs", status="running") == 0
    assert value("agentry_runs_finished_total", agent=agent.slug, status="completed", stop_reason="final_answer") == 2
    calls = LLMCall.objects.filter(run__in=done)
    assert value("agentry_model_calls_total", agent=agent.slug, model=model, status="succeeded") == calls.count() == 4
    assert value("agentry_model_calls_total", agent=agent.slug, model=model, status="failed") == 0
    refused_model = refused.model_config.name
    assert value("agentry_model_calls_total", agent=refused.slug, model=refused_model, status="failed") == 1
    assert value("agentry_runs_finished_total", agent=refused.slug, status="failed", stop_reason="provider_error") == 1
    runs = Run.objects.filter(pk__in=[r.pk for r in done])
    assert value("agentry_tokens_total", agent=agent.slug, model=model, kind="input") == sum(
        r.prompt_tokens for r in runs
    )
    assert value("agentry_tokens_total", agent=agent.slug, model=model, kind="output") == sum(
        r.completion_tokens for r in runs
    )
    assert value("agentry_cost_total", agent=agent.slug, model=model) == pytest.approx(float(sum(r.cost for r in runs)))
    assert value("agentry_tool_calls_recent", tool="test-echo", status="succeeded") == 2
    assert value("agentry_tool_calls_recent", tool="test-counter", status="awaiting_approval") == 1
    assert value("agentry_approvals_pending") == 1
    assert value("agentry_approval_oldest_pending_age_seconds") > 0

    # Every model call of the window is in the +Inf bucket; buckets only grow with the bound.
    all_calls = LLMCall.objects.filter(latency_ms__isnull=False).count()
    assert value("agentry_model_call_latency_seconds_bucket", le="+Inf") == all_calls == 6
    bounds = sorted(
        (float(dict(labels)["le"]), v)
        for (name, labels), v in samples.items()
        if name == "agentry_model_call_latency_seconds_bucket"
    )
    assert [v for _, v in bounds] == sorted(v for _, v in bounds)
    ran = ToolInvocation.objects.filter(latency_ms__isnull=False).count()
    assert value("agentry_tool_call_latency_seconds_bucket", le="+Inf") == ran == 2


def test_a_window_leaves_older_model_calls_out_of_the_histograms(client, token, settings, fake_llm, no_enqueue, db):
    ask(agent_on(fake_llm, ECHO_THEN_ANSWER, tools=["test-echo"]), "question")
    settings.AGENTRY_METRICS_WINDOW_SECONDS = 0
    samples = _samples(client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").content.decode())
    assert samples[("agentry_model_call_latency_seconds_bucket", frozenset({("le", "+Inf")}))] == 0
    assert not [key for key in samples if key[0] == "agentry_tool_calls_recent"]


def test_the_example_alert_rules_parse_and_use_the_exposed_metrics(client, token, db):
    rules = yaml.safe_load((ROOT / "deploy" / "prometheus" / "alerts.yml").read_text())
    [group] = rules["groups"]
    names = {rule["alert"] for rule in group["rules"]}
    assert {
        "AgentryRunFailureRateHigh",
        "AgentryCostPerHourHigh",
        "AgentryApprovalWaitingTooLong",
        "AgentryQueueBacklog",
    } <= names
    exposed = {
        family.name
        for family in text_string_to_metric_families(
            client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").content.decode()
        )
    }
    for rule in group["rules"]:
        assert rule["expr"] and rule["labels"]["severity"] and rule["annotations"]["summary"]
        used = {name for name in exposed if name in rule["expr"]}
        assert used, f"{rule['alert']} uses no metric that /metrics exposes"
