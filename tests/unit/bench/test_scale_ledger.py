"""bench.scale_ledger's arithmetic and the ledger axis's targets: pure functions of numbers."""

from bench.scale import ledger_targets
from bench.scale_ledger import CALLS_PER_RUN, chunks, percentile, retention_days, runs_to_add


def test_a_ledger_grows_by_the_whole_runs_it_is_missing_and_never_shrinks():
    assert runs_to_add(0, 1_000_000) == 1_000_000 // CALLS_PER_RUN
    assert runs_to_add(1_000_000, 5_000_000) == 4_000_000 // CALLS_PER_RUN
    assert runs_to_add(1_000_300, 1_000_000) == 0  # live runs added a few calls: nothing to do
    assert 9 + CALLS_PER_RUN * runs_to_add(9, 1_000_000) == 1_000_001  # never short of the size


def test_rows_are_written_in_chunks_that_add_up_to_the_whole():
    assert chunks(600_000, 250_000) == [250_000, 250_000, 100_000]
    assert chunks(0, 250_000) == []


def test_the_p95_is_the_nearest_rank_value():
    values = list(range(1, 21))  # 20 timings: the 19th is the 95th percentile
    assert percentile(values, 0.95) == 19
    assert percentile([7.0], 0.95) == 7.0
    assert percentile([3, 1, 2], 0.5) == 2


def test_the_policy_that_removes_the_oldest_days_of_a_year():
    assert retention_days(365, 30) == 335
    assert retention_days(365, 3) == 362


def test_the_targets_are_read_at_ten_million_calls_only():
    rows = [
        {"llm_calls": 1_000_000, "dashboard_ms": 900.0},
        {
            "llm_calls": 10_000_204,  # the calls present: live runs add a few
            "dashboard_ms": 120.0,
            "pages_slowest_ms": 350.0,
            "runs_list_p95_ms": 400.0,
            "runs_filtered_p95_ms": 80.0,
            "timeline_ms": 12.0,
            "retention_slowdown": 1.3,
        },
    ]
    verdicts = {t.label: t.verdict for t in ledger_targets(rows)}
    assert verdicts == {
        "dashboard at 10M calls (ms)": "met",
        "runs list p95 at 10M calls (ms)": "missed",
        "runs list by status p95 at 10M calls (ms)": "met",
        "timeline at 10M calls (ms)": "met",
        "live run wall during retention ÷ without, at 10M calls": "missed",
        "slowest operator page at 10M calls (ms)": "missed",
    }


def test_without_the_ten_million_point_every_target_is_not_measured():
    assert {t.verdict for t in ledger_targets([{"llm_calls": 20_000, "dashboard_ms": 10.0}])} == {"not measured"}
