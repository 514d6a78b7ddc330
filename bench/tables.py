"""The scale curves' tables: each axis's columns and how a row of figures prints in markdown.

Apart from bench.scale so that the axis scripts (bench.scale_ledger) print their own table
without importing the script that calls them."""

# Each axis's table: (key, heading, format). A missing value prints as "–".
COLUMNS = {
    "runs": [
        ("runs_in_flight", "runs in flight", "{:,}"),
        ("latency_ms", "model latency (ms)", "{:,}"),
        ("threads_per_worker", "threads per worker", "{}"),
        ("efficiency", "efficiency, full ÷ bare", "{:.3f}"),
        ("full_ideal_ratio", "full stack, ideal ÷ wall", "{:.3f}"),
        ("bare_ideal_ratio", "bare loop, ideal ÷ wall", "{:.3f}"),
        ("cpu_ms_per_run", "CPU per run (ms)", "{:.1f}"),
        ("cpu_ms_worker", "of which workers (ms)", "{:.1f}"),
        ("cpu_ms_postgres", "PostgreSQL (ms)", "{:.1f}"),
        ("cpu_ms_web", "web (ms)", "{:.1f}"),
        ("worker_peak_mb", "worker peak RSS (MiB)", "{:.0f}"),
        ("runs_failed", "runs failed", "{:,}"),
    ],
    "turns": [
        ("prior_turns", "prior turns", "{:,}"),
        ("cpu_ms_per_step", "first run: CPU per step (ms)", "{:.2f}"),
        ("statements_per_step", "statements per step", "{:.1f}"),
        ("prompt_tokens_per_call", "prompt tokens per model call", "{:,.0f}"),
        ("summary_calls_per_run", "summary calls per run", "{:.1f}"),
        ("summary_cpu_ms", "CPU per summary call (ms)", "{:.2f}"),
        ("next_cpu_ms_per_step", "next run: CPU per step (ms)", "{:.2f}"),
        ("next_statements_per_step", "statements per step", "{:.1f}"),
        ("next_prompt_tokens_per_call", "prompt tokens per model call", "{:,.0f}"),
    ],
    "ledger": [
        ("llm_calls", "model calls", "{:,}"),
        ("generate_s", "added in (s)", "{:.0f}"),
        ("dashboard_ms", "dashboard (ms)", "{:.1f}"),
        ("runs_list_p95_ms", "runs list p95 (ms)", "{:.1f}"),
        ("runs_filtered_p95_ms", "runs list by status p95 (ms)", "{:.1f}"),
        ("timeline_ms", "timeline (ms)", "{:.1f}"),
        ("export_runs_per_s", "export runs/s", "{:,.0f}"),
        ("retention_rows", "retention: rows of the oldest week", "{:,}"),
        ("retention_nopause_seconds", "purge without rest (s)", "{:.0f}"),
        ("retention_nopause_slowdown", "live run wall beside it ÷ none", "{:.2f}"),
        ("retention_seconds", "purge with rest (s)", "{:.0f}"),
        ("retention_rows_per_s", "rows/s", "{:,.0f}"),
        ("retention_slowdown", "live run wall beside it ÷ none", "{:.2f}"),
        ("pages_slowest_ms", "slowest operator page (ms)", "{:.1f}"),
    ],
    # bench.scale_ledger --reads-only: the reads alone, the ledger as it is.
    "ledger_reads": [
        ("llm_calls", "model calls", "{:,}"),
        ("dashboard_ms", "dashboard (ms)", "{:.1f}"),
        ("runs_list_p95_ms", "runs list p95 (ms)", "{:.1f}"),
        ("runs_filtered_p95_ms", "runs list by status p95 (ms)", "{:.1f}"),
        ("timeline_ms", "timeline (ms)", "{:.1f}"),
        ("pages_slowest_ms", "slowest operator page (ms)", "{:.1f}"),
    ],
    # The operator's pages at each ledger size (bench.scale_ledger.page_reads), a row a page.
    "ledger_pages": [
        ("page", "page", "{}"),
        ("llm_calls", "model calls", "{:,}"),
        ("median_ms", "median (ms)", "{:.1f}"),
        ("p95_ms", "p95 (ms)", "{:.1f}"),
        ("statements", "statements", "{}"),
    ],
}
GENERIC = "{:,.4g}"


def cell(value, fmt: str) -> str:
    return "–" if value is None else fmt.format(value)


def markdown_table(rows: list[dict], columns: list[tuple[str, str, str]] | None = None) -> str:
    """`rows` as a markdown table; without `columns`, every key in the order first seen."""
    if columns is None:
        keys = list(dict.fromkeys(key for row in rows for key in row))
        columns = [(key, key.replace("_", " "), GENERIC) for key in keys]
    lines = [
        "| " + " | ".join(heading for _, heading, _ in columns) + " |",
        "| " + " | ".join("---" for _ in columns) + " |",
    ]
    for row in rows:
        lines.append("| " + " | ".join(_any_cell(row.get(key), fmt) for key, _, fmt in columns) + " |")
    return "\n".join(lines)


def _any_cell(value, fmt: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float, type(None))):
        return str(value)
    # A column given no format of its own: whole numbers and anything from 1,000 up with
    # separators (never an exponent), others to 4 figures.
    if fmt == GENERIC and isinstance(value, int):
        return f"{value:,}"
    if fmt == GENERIC and isinstance(value, float) and abs(value) >= 1000:
        return f"{value:,.0f}"
    return cell(value, fmt)
