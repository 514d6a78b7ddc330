"""The dashboard's numbers: hourly rollups rebuilt from the ledger, read back as rates,
percentiles, stop reasons, errors and usage."""

from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from console.monitoring.selectors import dashboard_snapshot
from conversations.monitoring.histogram import percentile
from conversations.monitoring.models import LLMCallHourly, RunHourly
from conversations.monitoring.rollups import error_summary, floor_hour, rollups_refresh
from tests.support.factories import ModelConfigFactory, make_agent
from tests.support.ledger import ledger_call, ledger_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def broker_probes(monkeypatch):
    """The dashboard's broker part is tested with the real broker elsewhere; here it is kept out."""
    monkeypatch.setattr("console.monitoring.selectors.queue_depths", lambda: {"queues": []})
    monkeypatch.setattr("console.monitoring.selectors.workers_online", lambda: {"online": []})


def test_latency_percentiles_per_model_come_from_the_hourly_histograms(broker_probes, admin_user):
    now = timezone.now()
    fast = make_agent(model_config=ModelConfigFactory(name="fast"))
    slow = make_agent(model_config=ModelConfigFactory(name="slow"))
    run_fast, run_slow = ledger_run(fast, finished_at=now), ledger_run(slow, finished_at=now)
    # Spread over two hours, so the percentiles come from summed histograms.
    for i in range(1, 101):
        ledger_call(run_fast, started_at=now - timedelta(minutes=i), latency_ms=i * 10, iteration=i)
        ledger_call(run_slow, started_at=now - timedelta(minutes=i), latency_ms=5000 + i, iteration=i)
    ledger_call(run_fast, started_at=now, latency_ms=90000, status="failed", error="HTTP 500", iteration=101)

    rollups_refresh()
    latency = {row["name"]: row for row in dashboard_snapshot(user=admin_user)["latency"]}

    assert latency["fast"]["calls"] == 101 and latency["fast"]["failed"] == 1
    # True p50 = 500 ms and p95 = 950 ms; the failed 90 s attempt does not count.
    assert 440 <= latency["fast"]["p50_ms"] <= 560
    assert 840 <= latency["fast"]["p95_ms"] <= 1060
    assert 4400 <= latency["slow"]["p50_ms"] <= 5600


def test_runs_by_hour_failure_rate_stop_reasons_and_top_errors(broker_probes, admin_user):
    now = timezone.now()
    agent = make_agent()
    for _ in range(3):
        ledger_run(agent, finished_at=now)
    ledger_run(agent, status="completed", stop_reason="max_iterations", finished_at=now - timedelta(hours=2))
    for run_id in ("1b4e28ba-2fa1-11d2-883f-0016d3cca427", "6fa459ea-ee8a-3ca4-894e-db77e160355e"):
        ledger_run(
            agent,
            status="failed",
            stop_reason="internal_error",
            finished_at=now,
            error=f"Traceback (most recent call last):\n  File x\nKeyError: 'run {run_id}'",
        )
    failing = ledger_run(
        agent,
        status="failed",
        stop_reason="provider_error",
        finished_at=now,
        error="The model could not be reached: HTTP 503",
    )
    for i in range(3):
        ledger_call(failing, started_at=now, status="failed", error="HTTP 503: overloaded", iteration=i + 1)
    ledger_run(agent, status="running", finished_at=None)

    rollups_refresh()
    snapshot = dashboard_snapshot(user=admin_user, hours=6)

    outcomes = snapshot["outcomes"]
    assert (outcomes["runs_ended"], outcomes["runs_failed"]) == (7, 3)
    assert outcomes["run_failure_rate"] == pytest.approx(3 / 7)
    assert outcomes["llm_call_failure_rate"] == 1.0
    reasons = {(r["status"], r["stop_reason"]): r["count"] for r in outcomes["stop_reasons"]}
    assert reasons == {
        ("completed", "final_answer"): 3,
        ("failed", "internal_error"): 2,
        ("failed", "provider_error"): 1,
        ("completed", "max_iterations"): 1,
    }
    errors = {(e["source"], e["message"]): e["count"] for e in outcomes["top_errors"]}
    # The two tracebacks differ only by an id: one line, counted twice.
    assert errors[("run", "KeyError: 'run <id>'")] == 2
    assert errors[("llm_call", "HTTP 503: overloaded")] == 3
    assert outcomes["top_errors"][0]["count"] == 3
    by_hour = snapshot["runs_by_hour"]
    assert len(by_hour) == 6
    assert (by_hour[-1]["completed"], by_hour[-1]["failed"]) == (3, 3)
    assert by_hour[-3]["completed"] == 1
    assert snapshot["runs_now"]["running"] == 1


def test_tokens_and_cost_per_agent_per_day(broker_probes, admin_user):
    now = timezone.now()
    alpha, beta = make_agent(name="alpha"), make_agent(name="beta")
    run_a, run_b = ledger_run(alpha, finished_at=now), ledger_run(beta, finished_at=now)
    ledger_call(run_a, started_at=now, prompt_tokens=1000, completion_tokens=200, cached_tokens=300, cost="0.25")
    ledger_call(run_a, started_at=now - timedelta(days=1), prompt_tokens=10, completion_tokens=5, cost="0.01")
    ledger_call(run_b, started_at=now, prompt_tokens=50, completion_tokens=50, reasoning_tokens=20, cost="0.5")

    rollups_refresh(since=now - timedelta(days=2))
    usage = dashboard_snapshot(user=admin_user, days=3)["usage"]

    assert len(usage["days"]) == 3 and usage["days"][-1] == timezone.localdate(now).isoformat()
    alpha_days = {a["name"]: a for a in usage["agents"]}["alpha"]["per_day"]
    assert alpha_days[-1] == {
        "day": usage["days"][-1],
        "prompt_tokens": 1000,
        "completion_tokens": 200,
        "cached_tokens": 300,
        "reasoning_tokens": 0,
        "total_tokens": 1200,
        "cost": "0.25000000",
    }
    assert alpha_days[-2]["total_tokens"] == 15 and alpha_days[0]["total_tokens"] == 0
    beta_today = {a["name"]: a for a in usage["agents"]}["beta"]["per_day"][-1]
    assert beta_today["reasoning_tokens"] == 20 and beta_today["cost"] == "0.50000000"


def test_refresh_rebuilds_recent_hours_and_leaves_older_ones(broker_probes):
    now = timezone.now()
    agent = make_agent()
    run = ledger_run(agent, finished_at=now)
    old = ledger_call(run, started_at=now - timedelta(hours=10), iteration=1)
    ledger_call(run, started_at=now, iteration=2)

    rollups_refresh()  # first refresh: back to the first ledger row
    assert LLMCallHourly.objects.count() == 2

    # A change to an old hour is not picked up by the periodic refresh (it is cheap because it
    # only looks at recent hours) but is by an explicit rebuild.
    old.delete()
    rollups_refresh()
    rollups_refresh()
    assert LLMCallHourly.objects.filter(hour=floor_hour(now - timedelta(hours=10))).exists()
    assert LLMCallHourly.objects.filter(hour__gte=floor_hour(now)).get().calls == 1
    rollups_refresh(since=now - timedelta(hours=12))
    assert list(LLMCallHourly.objects.values_list("calls", flat=True)) == [1]
    assert RunHourly.objects.get().runs == 1


def test_rollups_report_their_freshness(broker_probes, admin_user):
    assert dashboard_snapshot(user=admin_user)["rollups"]["stale"] is True
    before = timezone.now()
    rollups_refresh(since=before)
    rollups = dashboard_snapshot(user=admin_user)["rollups"]
    after = timezone.now()
    # The age counts from this refresh, whatever the machine's speed.
    assert rollups["stale"] is False
    assert before <= datetime.fromisoformat(rollups["refreshed_at"]) <= after
    assert 0 <= rollups["age_seconds"] <= (after - before).total_seconds()


def test_error_summary_and_percentile_helpers():
    assert error_summary("HTTP 429: slow down\nbody") == "HTTP 429: slow down"
    assert error_summary("Traceback (most recent call last):\n  File 'a'\nValueError: id 1234567") == "ValueError: id N"
    assert error_summary("") == "(no message)"
    assert percentile({}, 0.5) is None
    assert percentile({10: 1}, 0.5) == round(1.25**10.5)


def test_an_evaluations_runs_and_calls_stay_out_of_the_rollups(broker_probes, admin_user):
    now = timezone.now()
    agent = make_agent()
    ledger_run(agent, finished_at=now)
    evaluated = ledger_run(
        agent, status="failed", stop_reason="provider_error", finished_at=now, sandbox={"results": {}}
    )
    ledger_call(evaluated, started_at=now, status="failed", error="HTTP 503", iteration=1)

    rollups_refresh()
    outcomes = dashboard_snapshot(user=admin_user, hours=6)["outcomes"]
    assert (outcomes["runs_ended"], outcomes["runs_failed"]) == (1, 0)
    assert not LLMCallHourly.objects.exists()
