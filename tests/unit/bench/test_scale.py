"""bench.scale's tables, targets and docs section: pure formatting of measured rows."""

import pytest

from bench.scale import (
    END,
    START,
    axis_section,
    docs_replace,
    knowledge_targets,
    markdown_table,
    runs_targets,
    turns_targets,
)


def _runs(efficiencies: dict, cpu: dict) -> list[dict]:
    return [{"runs_in_flight": n, "efficiency": efficiencies[n], "cpu_ms_per_run": cpu[n]} for n in efficiencies]


def test_a_table_prints_each_row_in_its_column_format_and_a_dash_for_what_is_missing():
    columns = [("n", "runs", "{:,}"), ("cpu", "CPU (ms)", "{:.1f}")]
    table = markdown_table([{"n": 1000, "cpu": 25.04}, {"n": 2000, "cpu": None}], columns)
    assert table.splitlines() == ["| runs | CPU (ms) |", "| --- | --- |", "| 1,000 | 25.0 |", "| 2,000 | – |"]


def test_a_table_without_columns_takes_every_key_in_the_order_first_seen():
    table = markdown_table([{"chunks": 1000, "keyword_p95_ms": 12.5}, {"chunks": 10000, "method": "gin"}])
    assert table.splitlines()[0] == "| chunks | keyword p95 ms | method |"
    assert table.splitlines()[2] == "| 1,000 | 12.5 | – |"
    assert table.splitlines()[3] == "| 10,000 | – | gin |"


def test_runs_targets_read_efficiency_as_a_floor_and_cpu_against_the_200_figure():
    # Within 20 % of the 200 figure at 1,000 in flight, within 10 % at 2,000.
    rows = _runs({200: 0.7, 1000: 0.61, 2000: 0.45}, {200: 25.0, 1000: 29.9, 2000: 27.6})
    verdicts = {t.label: (round(t.value, 3), t.verdict) for t in runs_targets(rows)}
    assert verdicts == {
        "efficiency at 1,000 in flight": (0.61, "met"),
        "efficiency at 2,000 in flight": (0.45, "missed"),
        "CPU per run at 1,000 ÷ at 200": (1.196, "met"),
        "CPU per run at 2,000 ÷ at 200": (1.104, "missed"),
    }


def test_a_target_whose_points_were_not_measured_says_so():
    targets = runs_targets(_runs({20: 0.5, 50: 0.6}, {20: 40.0, 50: 30.0}))
    assert {t.verdict for t in targets} == {"not measured"}


def test_turns_targets_compare_200_prior_turns_with_1_for_both_runs():
    rows = [
        {"prior_turns": 1, "cpu_ms_per_step": 3.0, "next_cpu_ms_per_step": 3.0},
        {"prior_turns": 200, "cpu_ms_per_step": 7.5, "next_cpu_ms_per_step": 3.6},
    ]
    assert [(t.value, t.verdict) for t in turns_targets(rows)] == [(2.5, "missed"), (1.2, "met")]
    section = axis_section("turns", rows, "note")
    assert section.startswith("**Conversation length** (note)")
    assert "- CPU per step at 200 prior turns ÷ at 1, next run: 1.20 (target ≤ 1.5): met" in section


def test_knowledge_targets_take_each_method_at_100000_chunks_on_the_new_path():
    rows = [
        {"chunks": 100_000, "method": "keyword", "path": "arrays", "p95_ms": 40.0},
        {"chunks": 100_000, "method": "keyword", "path": "python", "p95_ms": 900.0},
        {"chunks": 100_000, "method": "vector", "path": "arrays", "p95_ms": 120.0},
        {"chunks": 1_000, "method": "combined", "path": "arrays", "p95_ms": 5.0},
    ]
    assert [(t.label, t.verdict) for t in knowledge_targets(rows)] == [
        ("keyword search p95 at 100,000 chunks (ms)", "met"),
        ("vector search p95 at 100,000 chunks (ms)", "missed"),
        ("combined search p95 at 100,000 chunks (ms)", "not measured"),
    ]


def test_an_axis_without_rows_prints_why():
    assert axis_section("ledger", None, "not measured yet") == "**Ledger size** (not measured yet)"


def test_the_docs_section_between_the_markers_is_replaced_and_the_rest_kept():
    text = f"# Benchmark\n\n## Scale curves\n\n{START}\nold table\n{END}\n\n## Other\n"
    assert (
        docs_replace(text, "new table") == f"# Benchmark\n\n## Scale curves\n\n{START}\nnew table\n{END}\n\n## Other\n"
    )
    with pytest.raises(ValueError):
        docs_replace("# no markers\n", "new table")
