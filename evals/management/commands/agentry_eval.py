from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from agents.models import Agent
from agents.releases import DRAFT
from evals.compare import DEFAULT_MAX_COST_INCREASE, DEFAULT_MAX_LATENCY_INCREASE, DEFAULT_MAX_RATE_DROP, Thresholds
from evals.management import reporting
from evals.management.reporting import display_width, pad  # noqa: F401 (the table's helpers, as before)
from evals.models import EvalRun, EvalSuite
from evals.selectors import eval_run_reusable
from evals.services import (
    EvalNotAllowed,
    VersionNotFound,
    eval_agent_check,
    eval_run_collect,
    eval_run_start,
    eval_version_resolve,
)


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
            help="turns, tokens or cost rising by more than this fraction is a regression (default %(default)s)",
        )
        parser.add_argument(
            "--max-latency-increase",
            type=float,
            default=DEFAULT_MAX_LATENCY_INCREASE,
            help="latency (p50 or p95) rising by more than this fraction is a regression (default %(default)s)",
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
        if min(options["max_rate_drop"], options["max_cost_increase"], options["max_latency_increase"]) < 0:
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
        # The agent's workspace's suite: suite names are per workspace.
        eval_suite = EvalSuite.objects.filter(workspace_id=found.workspace_id, name=suite).first()
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
        thresholds = Thresholds(
            max_rate_drop=options["max_rate_drop"],
            max_cost_increase=options["max_cost_increase"],
            max_latency_increase=options["max_latency_increase"],
        )
        if reporting.comparison_print(self, baseline=baseline, candidate=candidate, thresholds=thresholds):
            raise SystemExit(1)

    def _eval_run(self, suite, version, repetitions, fresh, timeout) -> EvalRun:
        eval_run = None if fresh else eval_run_reusable(suite=suite, agent_version=version, repetitions=repetitions)
        if eval_run is not None:
            self.stdout.write(f"reusing eval run {eval_run.pk} for version {version.number}")
            return eval_run
        eval_run = eval_run_start(suite=suite, agent_version=version, repetitions=repetitions, user=self.user)
        self.stdout.write(f"started eval run {eval_run.pk} for version {version.number}")
        return reporting.eval_run_wait(eval_run, timeout=timeout, collect=eval_run_collect)

    def _table(self, title: str, rows) -> None:
        reporting.table_print(self, title, rows)
