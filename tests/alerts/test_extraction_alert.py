"""Long-term memory that silently writes nothing is seen: the memory extraction success rate rule
fires when the share of extraction calls that succeeded falls below its threshold (with enough
calls to mean something) and resolves when it recovers; the monitoring page shows the rate per
agent and today's spend against the daily extraction budget."""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import timezone

from alerts.models import AlertFiring, AlertRule
from alerts.selectors import alert_rule_measure, window_extractions
from alerts.services import alert_rules_evaluate
from conversations.models import LLMCall
from tests.alerts.conftest import make_rule
from tests.console.conftest import staff  # noqa: F401 (a fixture)
from tests.console.test_monitoring_pages import quiet_broker  # noqa: F401 (a fixture)
from tests.support.factories import make_agent
from tests.support.ledger import ledger_call, ledger_run

pytestmark = pytest.mark.django_db


def _extraction(agent, status: str, *, at, tokens: int = 800) -> LLMCall:
    call = ledger_call(ledger_run(agent), started_at=at, status=status, prompt_tokens=tokens, completion_tokens=0)
    LLMCall.objects.filter(pk=call.pk).update(purpose="memory")
    return call


def test_an_agents_extractions_failing_fire_the_rule_and_its_recovery_resolves_it():
    now = timezone.now()
    agent, other = make_agent(memory_enabled=True), make_agent(memory_enabled=True)
    rule = make_rule(kind="extraction_rate", agent=agent, window="hour", threshold=50, min_runs=3)
    for _ in range(3):
        _extraction(other, "failed", at=now - timedelta(minutes=5))  # another agent's: not counted
    _extraction(agent, "failed", at=now - timedelta(minutes=90))  # outside the hour
    _extraction(agent, "failed", at=now - timedelta(minutes=20))
    _extraction(agent, "failed", at=now - timedelta(minutes=10))
    _extraction(agent, "started", at=now - timedelta(minutes=1))  # not ended: not counted
    ledger_call(ledger_run(agent), started_at=now - timedelta(minutes=3))  # a step: not an extraction
    # None of 2 succeeded, but fewer calls than min_runs.
    assert window_extractions(rule=rule, now=now) == {"total": 2, "succeeded": 0}
    assert alert_rules_evaluate(now=now)["fired"] == 0

    _extraction(agent, "failed", at=now - timedelta(minutes=2))
    assert alert_rules_evaluate(now=now) == {"evaluated": 1, "fired": 1, "resolved": 0}
    firing = AlertFiring.objects.get(rule=rule, resolved_at__isnull=True)
    assert firing.value == 0
    assert firing.summary == "0 of 3 memory extraction calls succeeded in 1 h (0.00%, fires below 50%)"

    for _ in range(3):
        _extraction(agent, "succeeded", at=now - timedelta(minutes=1))
    assert alert_rules_evaluate(now=now)["resolved"] == 1  # 3 of 6: no longer below 50 %


def test_a_rule_on_everything_counts_every_agents_extractions():
    now = timezone.now()
    rule = make_rule(kind="extraction_rate", window="day", threshold=90, min_runs=2)
    _extraction(make_agent(), "succeeded", at=now - timedelta(hours=20))
    _extraction(make_agent(), "failed", at=now - timedelta(hours=2))
    measurement = alert_rule_measure(rule=rule, now=now)
    assert measurement.holds and measurement.value == 50
    assert "1 of 2 memory extraction calls succeeded in 24 h" in measurement.summary


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"threshold": 0}, "threshold"),
        ({"threshold": "100.5"}, "threshold"),
        ({"threshold": 10, "min_runs": 0}, "min_runs"),
    ],
)
def test_bad_extraction_rate_rules_are_refused(fields, field):
    rule = AlertRule(name="bad", kind="extraction_rate", window="hour", **fields)
    with pytest.raises(ValidationError) as refused:
        rule.full_clean()
    assert field in refused.value.message_dict


def test_an_extraction_rule_on_a_model_config_is_refused():
    agent = make_agent()
    rule = AlertRule(name="bad", kind="extraction_rate", window="hour", threshold=50, model_config=agent.model_config)
    with pytest.raises(ValidationError) as refused:
        rule.full_clean()
    assert "model_config" in refused.value.message_dict


def test_the_monitoring_page_shows_each_agents_extraction_rate_and_budget(client, staff, quiet_broker):
    now = timezone.now()
    failing = make_agent(name="Weak model bot", memory_enabled=True, memory_daily_tokens=1000)
    _extraction(failing, "failed", at=now - timedelta(minutes=5), tokens=800)
    _extraction(failing, "failed", at=now - timedelta(minutes=4), tokens=800)
    healthy = make_agent(name="Strong model bot", memory_enabled=True)
    _extraction(healthy, "succeeded", at=now - timedelta(minutes=5), tokens=300)
    make_agent(name="No memory bot")

    panel = client.get(reverse("monitoring:panel")).content.decode()

    table = panel.split('id="memory-extraction"', 1)[1].split("</table>", 1)[0]
    weak = table.split(f'data-agent="{failing.pk}"', 1)[1].split("</tr>", 1)[0]
    assert "0 of 2 succeeded" in weak and 'class="rate warn"' in weak
    assert "1600 / 1000" in weak and "spent: extraction skipped until the day ends" in weak
    strong = table.split(f'data-agent="{healthy.pk}"', 1)[1].split("</tr>", 1)[0]
    assert "1 of 1 succeeded" in strong and "300 / no limit" in strong and "warn" not in strong
    assert "No memory bot" not in table
    data = client.get(reverse("monitoring:data")).json()
    row = next(row for row in data["memory"] if row["id"] == failing.pk)
    assert (row["calls"], row["succeeded"], row["spent_today"], row["budget_spent"]) == (2, 0, 1600, True)
