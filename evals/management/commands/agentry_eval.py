import time
import unicodedata

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from agents.models import Agent
from agents.releases import DRAFT
from conversations.models import RunStatus
from engine.worker_watch import NoWorker, NoWorkerWatch
from evals.compare import (
    DEFAULT_MAX_COST_INCREASE,
    DEFAULT_MAX_RATE_DROP,
    Thresholds,
    case_rows,
    has_regression,
    metric_rows,
)
from evals.models import EvalResult, EvalRun, EvalRunStatus, EvalSuite
from evals.selectors import eval_results_data, eval_run_reusable
from evals.services import (
    EvalNotAllowed,
    VersionNotFound,
    eval_agent_check,
    eval_run_collect,
    eval_run_start,
    eval_version_resolve,
)


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


class Command(BaseCommand):
    help = (
        "Run an eval suite on two versions of an agent through the real queue (or reuse finished eval runs), "
        "print the comparison, regressions first, and exit 1 on a regression beyond the thresholds."
    )

    def create_parser(self, prog_name, subcommand, **kwargs):
        # --version names the agent version to evaluate here, in place of Django's own option.
        return super().create_parser(prog_name, subcommand, conflict_handler="resolve", **kwargs)

    def add_arguments(self, parser):
        parser.add_argument("agent", help="agent slug")
        parser.add_argument("--suite", required=True, help="eval suite name")
        parser.add_argument(
            "--version", default=DRAFT, help='the candidate: "draft" (default), "published" or a version number'
        )
        parser.add_argument("--against", required=True, help='the baseline: "published", "draft" or a version number')
        parser.add_argument("--repetitions", type=int, default=1)
        parser.add_argument(
            "--max-rate-drop",
            type=float,
            default=DEFAULT_MAX_RATE_DROP,
            help="a rate (completion, tool hit, pass@k…) or a case's pass rate falling by more than this is a "
            "regression, as is the wrong-call rate rising by more (absolute, default %(default)s)",
        )
        parser.add_argument(
            "--max-cost-increase",
            type=float,
            default=DEFAULT_MAX_COST_INCREASE,
            help="turns, tokens, cost or latency rising by more than this fraction is a regression "
            "(default %(default)s)",
        )
        parser.add_argument(
            "--user",
            help="username to start the eval runs as: they are recorded as theirs, and the agent must be one "
            "that user may use (without it, the eval runs are the platform's own)",
        )
        parser.add_argument("--fresh", action="store_true", help="always start new eval runs")
        parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for each eval run")

    def handle(self, *args, agent, suite, version, against, repetitions, fresh, timeout, user, **options):
        if not 1 <= repetitions <= 20:
            raise CommandError("--repetitions must be from 1 to 20.")
        if options["max_rate_drop"] < 0 or options["max_cost_increase"] < 0:
            raise CommandError("The thresholds cannot be negative.")
        found = Agent.objects.filter(slug=agent).first()
        if found is None:
            raise CommandError(f"No agent with slug {agent!r}.")
        self.user = None
        if user is not None:
            self.user = get_user_model().objects.filter(username=user, is_active=True).first()
            if self.user is None:
                raise CommandError(f"No active user named {user!r}.")
            try:
                eval_agent_check(user=self.user, agent=found)
            except EvalNotAllowed as exc:
                raise CommandError(str(exc)) from exc
        eval_suite = EvalSuite.objects.filter(name=suite).first()
        if eval_suite is None:
            raise CommandError(f"No eval suite named {suite!r}.")
        if not eval_suite.cases.exists():
            raise CommandError(f"Eval suite {suite!r} has no cases.")
        try:
            candidate_version = eval_version_resolve(agent=found, version=version)
            baseline_version = eval_version_resolve(agent=found, version=against)
        except VersionNotFound as exc:
            raise CommandError(str(exc)) from exc
        baseline = self._eval_run(eval_suite, baseline_version, repetitions, fresh, timeout)
        candidate = self._eval_run(eval_suite, candidate_version, repetitions, fresh, timeout)
        thresholds = Thresholds(max_rate_drop=options["max_rate_drop"], max_cost_increase=options["max_cost_increase"])
        metrics = metric_rows(baseline.metrics, candidate.metrics, thresholds)
        cases = case_rows(eval_results_data(eval_run=baseline), eval_results_data(eval_run=candidate), thresholds)
        self.stdout.write(
            f"baseline: eval run {baseline.pk} (version {baseline_version.number}); "
            f"candidate: eval run {candidate.pk} (version {candidate_version.number})"
        )
        self._table("metric", metrics)
        self._table("case pass rate", cases)
        if has_regression(metrics, cases):
            self.stdout.write(self.style.ERROR("REGRESSION"))
            raise SystemExit(1)
        self.stdout.write(self.style.SUCCESS("no regression"))

    def _eval_run(self, suite, version, repetitions, fresh, timeout) -> EvalRun:
        eval_run = None if fresh else eval_run_reusable(suite=suite, agent_version=version, repetitions=repetitions)
        if eval_run is not None:
            self.stdout.write(f"reusing eval run {eval_run.pk} for version {version.number}")
            return eval_run
        eval_run = eval_run_start(suite=suite, agent_version=version, repetitions=repetitions, user=self.user)
        self.stdout.write(f"started eval run {eval_run.pk} for version {version.number}")
        deadline = time.monotonic() + timeout
        watch = NoWorkerWatch()
        queued = EvalResult.objects.filter(eval_run=eval_run, run__status=RunStatus.QUEUED)
        # The collection task follows the runs too; collecting here as well keeps the command
        # going when no worker serves the maintenance queue.
        while (eval_run := eval_run_collect(eval_run_id=eval_run.pk)).status == EvalRunStatus.RUNNING:
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

    def _table(self, title: str, rows) -> None:
        # As wide as the longest name, counted in terminal columns, so that the numbers line up
        # under long and Chinese case names alike.
        width = max([28, display_width(title), *(display_width(row.name) for row in rows)])
        self.stdout.write(f"\n{pad(title, width)} {'baseline':>12} {'candidate':>12} {'delta':>12}")
        for row in rows:
            numbers = f"{_number(row.baseline):>12} {_number(row.candidate):>12} {_number(row.delta):>12}"
            line = f"{pad(row.name, width)} {numbers}"
            self.stdout.write(self.style.ERROR(f"{line}  REGRESSION") if row.regression else line)
