from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from agents.models import Agent, ModelConfig
from evals.compare import DEFAULT_MAX_COST_INCREASE, DEFAULT_MAX_LATENCY_INCREASE, DEFAULT_MAX_RATE_DROP, Thresholds
from evals.management import reporting
from evals.replays import DEFAULT_LIMIT, ReplayFilter, ReplayInvalid, replay_again, replay_check, replay_start
from evals.services import VersionNotFound, eval_version_resolve


def _moment(value: str | None, option: str):
    if value is None:
        return None
    try:
        moment = parse_datetime(value)
    except ValueError:
        moment = None
    if moment is None:
        raise CommandError(f"{option} is not an ISO 8601 date and time: {value!r}")
    return moment if timezone.is_aware(moment) else timezone.make_aware(moment)


class Command(BaseCommand):
    help = (
        "Replay an agent's production runs (picked by a filter) on a version, each from its first step with "
        "every tool call the run made given its recorded result; with --against, replay the same runs on that "
        "version too, print the comparison, regressions first, and exit 1 on a regression beyond the thresholds."
    )

    def create_parser(self, prog_name, subcommand, **kwargs):
        # --version names the agent version to replay on, in place of Django's own option.
        return super().create_parser(prog_name, subcommand, conflict_handler="resolve", **kwargs)

    def add_arguments(self, parser):
        parser.add_argument("agent", help="agent slug")
        parser.add_argument("--version", required=True, help='the candidate: "draft", "published" or a number')
        parser.add_argument("--against", help='the baseline to compare with: "published", "draft" or a number')
        parser.add_argument("--since", help="replay runs created from this moment (ISO 8601)")
        parser.add_argument("--until", help="replay runs created before this moment (ISO 8601)")
        parser.add_argument(
            "--stop-reason", dest="stop_reasons", action="append", default=[], help="only runs that ended so"
        )
        parser.add_argument("--negative-feedback", action="store_true", help="only runs rated not helpful")
        parser.add_argument("--from-version", type=int, help="only runs of this version number")
        parser.add_argument("--limit", type=int, default=DEFAULT_LIMIT, help="the newest this many runs")
        parser.add_argument("--name", help="the replay suite's name (default: replay <agent> <time>)")
        parser.add_argument("--rubric", default="", help="judge answers by this rubric, the original as reference")
        parser.add_argument("--judge", help="name of the model config that judges the rubric")
        parser.add_argument("--max-rate-drop", type=float, default=DEFAULT_MAX_RATE_DROP)
        parser.add_argument("--max-cost-increase", type=float, default=DEFAULT_MAX_COST_INCREASE)
        parser.add_argument("--max-latency-increase", type=float, default=DEFAULT_MAX_LATENCY_INCREASE)
        parser.add_argument(
            "--user",
            help="username to replay as: they need the permission to fork runs and must be allowed the agent",
        )
        parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for each eval run")

    def handle(self, *args, agent, version, against, timeout, **options):
        if min(options["max_rate_drop"], options["max_cost_increase"], options["max_latency_increase"]) < 0:
            raise CommandError("The thresholds cannot be negative.")
        found = Agent.objects.filter(slug=agent).first()
        if found is None:
            raise CommandError(f"No agent with slug {agent!r}.")
        user = self._user(options["user"], found)
        judge = self._judge(options["judge"], found)
        try:
            candidate_version = eval_version_resolve(agent=found, version=version)
            baseline_version = None if against is None else eval_version_resolve(agent=found, version=against)
            replay_filter = ReplayFilter(
                agent=found,
                version=options["from_version"],
                since=_moment(options["since"], "--since"),
                until=_moment(options["until"], "--until"),
                stop_reasons=tuple(options["stop_reasons"]),
                negative_feedback_only=options["negative_feedback"],
                limit=options["limit"],
            )
            candidate = replay_start(
                filter=replay_filter,
                candidate=candidate_version,
                user=user,
                name=options["name"],
                rubric=options["rubric"],
                judge=judge,
            )
            self.stdout.write(
                f"replaying {candidate.suite.cases.count()} runs (suite {candidate.suite.name!r}): "
                f"eval run {candidate.pk} on version {candidate_version.number}"
            )
            baseline = None
            if baseline_version is not None:
                baseline = replay_again(eval_run=candidate, version=baseline_version, user=user)
                self.stdout.write(f"eval run {baseline.pk} on version {baseline_version.number}")
        except (VersionNotFound, ReplayInvalid) as exc:
            raise CommandError(str(exc)) from exc
        candidate = reporting.eval_run_wait(candidate, timeout=timeout)
        if baseline is None:
            self.stdout.write(f"eval run {candidate.pk}: {candidate.metrics}")
            return
        baseline = reporting.eval_run_wait(baseline, timeout=timeout)
        thresholds = Thresholds(
            max_rate_drop=options["max_rate_drop"],
            max_cost_increase=options["max_cost_increase"],
            max_latency_increase=options["max_latency_increase"],
        )
        if reporting.comparison_print(self, baseline=baseline, candidate=candidate, thresholds=thresholds):
            raise SystemExit(1)

    def _user(self, username: str | None, agent: Agent):
        if username is None:
            return None
        user = get_user_model().objects.filter(username=username, is_active=True).first()
        if user is None:
            raise CommandError(f"No active user named {username!r}.")
        try:
            replay_check(user=user, agent=agent)
        except PermissionDenied as exc:
            raise CommandError(str(exc)) from exc
        return user

    def _judge(self, name: str | None, agent: Agent) -> ModelConfig | None:
        if name is None:
            return None
        # The agent's workspace's model config: names are per workspace, and the judge bills its key.
        judge = ModelConfig.objects.filter(workspace_id=agent.workspace_id, name=name).first()
        if judge is None:
            raise CommandError(f"No model config named {name!r}.")
        return judge
