"""What the evaluation commands share: waiting for an eval run to end, and printing a comparison
of two, regressions first (agentry_eval, agentry_replay)."""

import time
import unicodedata

from django.core.management.base import CommandError

from conversations.models import RunStatus
from engine.worker_watch import NoWorker, NoWorkerWatch
from evals.compare import Thresholds, case_rows, has_regression, metric_rows
from evals.models import EvalResult, EvalRun, EvalRunStatus
from evals.selectors import eval_results_data
from evals.services import eval_run_collect


def _number(value) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def display_width(text: str) -> int:
    """Columns the text takes in a terminal: wide and fullwidth characters (CJK) take two."""
    return sum(2 if unicodedata.east_asian_width(char) in "WF" else 1 for char in text)


def pad(text: str, width: int) -> str:
    """The text left-aligned in `width` terminal columns (longer text is left whole)."""
    return text + " " * max(0, width - display_width(text))


def eval_run_wait(eval_run: EvalRun, *, timeout: float, collect=eval_run_collect) -> EvalRun:
    """The eval run once it has ended; CommandError if it failed, took longer than `timeout`
    seconds, or no worker takes its runs. `collect` is evals.services.eval_run_collect (a
    command passes the one it imported, which its tests replace)."""
    deadline = time.monotonic() + timeout
    watch = NoWorkerWatch()
    queued = EvalResult.objects.filter(eval_run=eval_run, run__status=RunStatus.QUEUED)
    # The collection task follows the runs too; collecting here as well keeps the command
    # going when no worker serves the maintenance queue.
    while (eval_run := collect(eval_run_id=eval_run.pk)).status == EvalRunStatus.RUNNING:
        if time.monotonic() > deadline:
            raise CommandError(f"eval run {eval_run.pk} did not finish within {timeout:g}s")
        try:
            watch.check(queued=queued.count())
        except NoWorker as exc:
            raise CommandError(f"eval run {eval_run.pk}: {exc}") from exc
        time.sleep(0.5)
    if eval_run.status == EvalRunStatus.FAILED:
        raise CommandError(f"eval run {eval_run.pk} failed: {eval_run.error}")
    return eval_run


def comparison_print(command, *, baseline: EvalRun, candidate: EvalRun, thresholds: Thresholds) -> bool:
    """Print the two eval runs' metrics and case pass rates, regressions first and marked
    REGRESSION; True if anything regressed."""
    metrics = metric_rows(baseline.metrics, candidate.metrics, thresholds)
    cases = case_rows(eval_results_data(eval_run=baseline), eval_results_data(eval_run=candidate), thresholds)
    command.stdout.write(
        f"baseline: eval run {baseline.pk} (version {baseline.agent_version.number}); "
        f"candidate: eval run {candidate.pk} (version {candidate.agent_version.number})"
    )
    table_print(command, "metric", metrics)
    table_print(command, "case pass rate", cases)
    regressed = has_regression(metrics, cases)
    if regressed:
        command.stdout.write(command.style.ERROR("REGRESSION"))
    else:
        command.stdout.write(command.style.SUCCESS("no regression"))
    return regressed


def table_print(command, title: str, rows) -> None:
    # As wide as the longest name, counted in terminal columns, so that the numbers line up
    # under long and Chinese case names alike.
    width = max([28, display_width(title), *(display_width(row.name) for row in rows)])
    command.stdout.write(f"\n{pad(title, width)} {'baseline':>12} {'candidate':>12} {'delta':>12}")
    for row in rows:
        numbers = f"{_number(row.baseline):>12} {_number(row.candidate):>12} {_number(row.delta):>12}"
        line = f"{pad(row.name, width)} {numbers}"
        command.stdout.write(command.style.ERROR(f"{line}  REGRESSION") if row.regression else line)
