"""The audit export (conversations/export.py) through `manage.py agentry_export`: JSONL and CSV
that parse and count right, filters, no secrets, and memory that does not grow with the ledger."""

import csv
import io
import json
import tracemalloc
from collections import Counter
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from conversations.export import CSV_COLUMNS
from conversations.models import Run
from notifications.models import Webhook
from tests.support.factories import make_agent
from tests.support.ledger_seed import ROWS_PER_RUN, ledger_seed

pytestmark = pytest.mark.django_db

API_KEY = "sk-live-do-not-export-0123456789"
WEBHOOK_SECRET = "whsec-do-not-export-9876543210"


def _export(**options) -> str:
    out = io.StringIO()
    call_command("agentry_export", stdout=out, **options)
    return out.getvalue()


@pytest.fixture
def agent_with_secrets():
    agent_with_secrets = make_agent(slug="weather")
    agent_with_secrets.model_config.api_key = API_KEY
    agent_with_secrets.model_config.save()
    Webhook.objects.create(agent=agent_with_secrets, url="https://hooks.example.com/in", secret=WEBHOOK_SECRET)
    return agent_with_secrets


def test_jsonl_has_one_line_per_run_with_its_rows_nested_in_order_and_no_secret(agent_with_secrets):
    now = timezone.now()
    older = ledger_seed(agent_with_secrets, 2, created_at=now - timedelta(days=2))
    newer = ledger_seed(agent_with_secrets, 3)
    text = _export(format="jsonl")
    assert API_KEY not in text and WEBHOOK_SECRET not in text
    lines = [json.loads(line) for line in text.splitlines()]
    # Oldest first; runs created at the same instant by id.
    assert [line["id"] for line in lines[:2]] == sorted(str(r.pk) for r in older)
    assert {line["id"] for line in lines[2:]} == {str(r.pk) for r in newer}
    first = lines[0]
    assert first["agent"] == "weather" and first["agent_version"] == 1
    assert first["input"] == "Weather?" and first["output"] == "Sunny."
    assert first["status"] == "completed" and first["cost"] == "0.00042000"
    assert {key: len(first[key]) for key in ROWS_PER_RUN} == ROWS_PER_RUN
    assert [call["iteration"] for call in first["llm_calls"]] == [1, 2]
    assert first["llm_calls"][0]["request"]["messages"][0]["role"] == "user"
    assert [event["seq"] for event in first["events"]] == [1, 2, 3]
    assert first["approvals"][0]["invocation_id"] == first["tool_invocations"][0]["id"]
    assert first["tool_invocations"][0]["llm_call_id"] == first["llm_calls"][0]["id"]


def test_csv_is_one_table_with_a_kind_column_and_formulas_kept_as_text(agent_with_secrets):
    runs = ledger_seed(agent_with_secrets, 4)
    text = _export(format="csv")
    assert API_KEY not in text and WEBHOOK_SECRET not in text
    rows = list(csv.DictReader(io.StringIO(text)))
    assert list(rows[0]) == CSV_COLUMNS
    kinds = Counter(row["kind"] for row in rows)
    assert kinds == {
        "run": 4,
        "llm_call": 4 * ROWS_PER_RUN["llm_calls"],
        "tool_invocation": 4 * ROWS_PER_RUN["tool_invocations"],
        "approval": 4 * ROWS_PER_RUN["approvals"],
        "event": 4 * ROWS_PER_RUN["events"],
    }
    assert {row["run_id"] for row in rows} == {str(r.pk) for r in runs}
    run_row = next(row for row in rows if row["kind"] == "run")
    assert run_row["total_tokens"] == "340" and run_row["name"] == "final_answer"
    assert json.loads(run_row["detail"])["output"] == "Sunny."
    call_row = next(row for row in rows if row["kind"] == "llm_call")
    assert call_row["name"] == "demo" and call_row["latency_ms"] == "900"
    tool_detail = json.loads(next(row for row in rows if row["kind"] == "tool_invocation")["detail"])
    # The model's text starting with "=" would run as a formula in a spreadsheet; it is text here.
    assert tool_detail["result"] == "=SUM(A1:A9) sunny, 24°C"
    event_row = next(row for row in rows if row["kind"] == "event")
    assert event_row["name"] == "run.queued" and event_row["step"] == "1"


def test_a_text_cell_that_starts_like_a_formula_is_prefixed(agent_with_secrets):
    ledger_seed(agent_with_secrets, 1)
    Run.objects.update(error='=HYPERLINK("http://evil")')
    rows = list(csv.DictReader(io.StringIO(_export(format="csv"))))
    assert next(row for row in rows if row["kind"] == "run")["error"] == '\'=HYPERLINK("http://evil")'


def test_filters_by_agent_and_time_range(agent_with_secrets, tmp_path):
    other = make_agent(slug="other")
    now = timezone.now()
    old = ledger_seed(agent_with_secrets, 2, created_at=now - timedelta(days=10))
    recent = ledger_seed(agent_with_secrets, 3, created_at=now - timedelta(days=1))
    ledger_seed(other, 4, created_at=now - timedelta(days=1))
    since = (now - timedelta(days=5)).isoformat()

    def ids(**options):
        return {json.loads(line)["id"] for line in _export(format="jsonl", **options).splitlines()}

    assert ids(agent="weather") == {str(r.pk) for r in old + recent}
    assert ids(agent="weather", since=since) == {str(r.pk) for r in recent}
    assert ids(agent="weather", until=since) == {str(r.pk) for r in old}
    # A bare date is that day's midnight.
    assert ids(agent="weather", until=(now - timedelta(days=5)).date().isoformat()) == {str(r.pk) for r in old}
    assert len(ids()) == 9
    output = tmp_path / "ledger.jsonl"
    call_command("agentry_export", format="jsonl", agent="other", output=str(output))
    assert len(output.read_text().splitlines()) == 4


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"agent": "nobody"}, "--agent: No agent has the slug 'nobody'."),
        ({"since": "yesterday"}, "--since: since must be an ISO 8601 date or date-time"),
        ({"until": "2026-13-45"}, "--until: until must be an ISO 8601 date or date-time"),
        ({"since": "2026-02-01", "until": "2026-01-01"}, "--until: until must be later than since."),
    ],
)
def test_bad_filters_stop_the_command_with_a_message(agent_with_secrets, options, message):
    with pytest.raises(CommandError) as caught:
        _export(format="jsonl", **options)
    assert str(caught.value).startswith(message)


def test_an_unknown_format_is_refused():
    with pytest.raises(CommandError, match="invalid choice: 'xml'"):
        call_command("agentry_export", "--format", "xml")


def _peak_growth(export, *args, **kwargs) -> int:
    """Bytes allocated at the peak of `export(*args, **kwargs)` beyond what was allocated when it
    started."""
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        export(*args, **kwargs)
        return tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()


def test_the_export_streams_in_memory_that_does_not_grow_with_the_ledger(tmp_path):
    small, large = make_agent(slug="small"), make_agent(slug="large")
    ledger_seed(small, 300)
    ledger_seed(large, 3000)
    growth = {}
    for agent, count in ((small, 300), (large, 3000)):
        for format in ("jsonl", "csv"):
            output = tmp_path / f"{agent.slug}.{format}"
            growth[agent.slug, format] = _peak_growth(
                call_command, "agentry_export", format=format, agent=agent.slug, output=str(output)
            )
            size = output.stat().st_size
            with output.open(newline="") as f:
                if format == "jsonl":
                    lines = [json.loads(line) for line in f]
                    assert len(lines) == count
                    assert sum(len(line["llm_calls"]) for line in lines) == count * ROWS_PER_RUN["llm_calls"]
                else:
                    kinds = Counter(row["kind"] for row in csv.DictReader(f))
                    assert kinds["run"] == count and kinds["event"] == count * ROWS_PER_RUN["events"]
            if agent is large:
                # The file is larger than what the export ever held at once.
                assert size > 2 * growth[agent.slug, format], (size, growth)
    for format in ("jsonl", "csv"):
        # Ten times the runs: about the same memory (one batch at a time), not ten times as much.
        assert growth["large", format] < 1.5 * growth["small", format] + 1_000_000, growth
