"""Replaying production traffic against a version: the agent's production runs picked by a
filter become the cases of a new suite, each played again from its first step on a candidate
version as an ordinary eval run (evals.services.eval_run_start), so it is compared like any.

A replayed case is sandboxed: every call the original run's tree made is recorded on the case
(EvalCase.recorded_calls), and the same call made again (same tool, same arguments) is given its
recorded result without running; any other call fails without running (no given results, no
live reads). A replay therefore never reaches a tool, read or write, that the original did not
call, and never calls one twice.

What a replayed case expects is what the original did: its tool calls (or none), and, when it
ended on a final answer, that answer: the same text exactly (EvalCase.answer_equals), or, when a
rubric and a judge model are given, the rubric judged with the original answer as the reference
(the judge forgives wording a real model changes from one run to the next)."""

from dataclasses import dataclass, field
from datetime import datetime

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.translation import gettext as _

from agents.models import Agent, AgentVersion, ModelConfig
from conversations.models import TERMINAL_STATUSES, Run, StopReason
from conversations.permissions import FORK_PERMISSION
from engine.forks import recorded_calls
from evals.models import EvalCase, EvalRun, EvalSuite
from evals.scoring import FINAL_ANSWER
from evals.selectors import run_case_material, run_observation
from evals.services import eval_agent_check, eval_run_start

DEFAULT_LIMIT = 50
MAX_LIMIT = 500


class ReplayInvalid(ValueError):
    """What is wrong with a replay's request (a 400 in the admin, a CommandError in the command)."""


class ReplayNotAllowed(PermissionDenied):
    """The user may not replay runs (conversations.fork_run)."""


@dataclass(frozen=True)
class ReplayFilter:
    """Which production runs of the agent are replayed: those of its version `version` (a number;
    None: any), created from `since` (inclusive) until `until` (exclusive), that ended on one of
    `stop_reasons` (empty: any), rated not helpful by their end user if `negative_feedback_only`;
    the newest `limit` of them."""

    agent: Agent
    version: int | None = None
    since: datetime | None = None
    until: datetime | None = None
    stop_reasons: tuple[str, ...] = field(default_factory=tuple)
    negative_feedback_only: bool = False
    limit: int = DEFAULT_LIMIT

    def __post_init__(self):
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) or not 1 <= self.limit <= MAX_LIMIT:
            raise ReplayInvalid(_("The limit is a whole number from 1 to %(max)s.") % {"max": MAX_LIMIT})
        unknown = sorted(set(self.stop_reasons) - set(StopReason.values))
        if unknown:
            raise ReplayInvalid(_("Unknown stop reasons: %(names)s.") % {"names": ", ".join(unknown)})
        if self.since is not None and self.until is not None and self.since >= self.until:
            raise ReplayInvalid(_("The window's start must come before its end."))

    def described(self) -> dict:
        """The filter as plain data (EvalSuite.replay)."""
        return {
            "agent": self.agent.slug,
            "version": self.version,
            "since": self.since.isoformat() if self.since else None,
            "until": self.until.isoformat() if self.until else None,
            "stop_reasons": list(self.stop_reasons),
            "negative_feedback_only": self.negative_feedback_only,
            "limit": self.limit,
        }


def replay_runs_select(filter: ReplayFilter) -> QuerySet:
    """The production runs the filter picks, newest first: ended, top-level (a delegated child
    is replayed with its parent), neither an evaluation's nor a fork's (both are sandboxed)."""
    runs = Run.objects.filter(
        agent=filter.agent,
        status__in=TERMINAL_STATUSES,
        parent_run__isnull=True,
        sandbox__isnull=True,
        forked_from__isnull=True,
        fork_step__isnull=True,
    )
    if filter.version is not None:
        runs = runs.filter(agent_version__number=filter.version)
    if filter.since is not None:
        runs = runs.filter(created_at__gte=filter.since)
    if filter.until is not None:
        runs = runs.filter(created_at__lt=filter.until)
    if filter.stop_reasons:
        runs = runs.filter(stop_reason__in=filter.stop_reasons)
    if filter.negative_feedback_only:
        runs = runs.filter(feedback__rating=-1)
    return runs.order_by("-created_at", "-pk")[: filter.limit]


def replay_check(*, user, agent: Agent) -> None:
    """ReplayNotAllowed unless `user` may fork runs, EvalNotAllowed unless they may use the agent;
    `user` None is the platform itself (a command run without --user)."""
    if user is not None and not user.has_perm(FORK_PERMISSION):
        raise ReplayNotAllowed(_("Replaying runs needs the permission to fork runs."))
    eval_agent_check(user=user, agent=agent)


def _case_of(run: Run, *, position: int, rubric: str) -> EvalCase | None:
    """The case replaying `run`, unsaved; None when the run stored no user message."""
    material = run_case_material(run=run)
    if material is None:
        return None
    calls = material["expected_tool_calls"]
    case = EvalCase(
        name=f"run {run.pk}",
        position=position,
        turns=material["turns"],
        expected_tool_calls=calls,
        expect_no_tool=not calls,
        recorded_calls=recorded_calls(run=run),
        source_run=run,
        tool_results={},
        live_reads=False,
    )
    if run.stop_reason == FINAL_ANSWER:
        answer = run_observation(run=run).answer
        if rubric:
            reference = _("%(rubric)s\n\nThe reference answer (the replayed production run's):\n%(answer)s")
            case.answer_rubric = reference % {"rubric": rubric, "answer": answer}
        else:
            case.answer_equals = answer
    return case


def _description(filter: ReplayFilter, *, count: int, skipped: int, rubric: bool) -> str:
    picked = _(
        "Replay of %(count)s production runs of agent %(agent)s, newest first (filter: %(filter)s). "
        "Each case is a run's conversation up to its user message, played from its first step; the calls "
        "the run made are given back with their recorded results when made again (same tool, same "
        "arguments), any other call fails without running. It expects the run's tool calls (or no tool call)"
    ) % {"count": count, "agent": filter.agent.slug, "filter": filter.described()}
    answer = (
        _("and an answer the rubric passes, judged with the run's answer as the reference.")
        if rubric
        else _("and, when the run answered, exactly the same answer.")
    )
    text = f"{picked} {answer}"
    if skipped:
        text += " " + _("%(count)s runs without a stored user message were left out.") % {"count": skipped}
    return text


def replay_suite_create(
    *, filter: ReplayFilter, name: str | None = None, rubric: str = "", judge: ModelConfig | None = None
) -> EvalSuite:
    """A new suite of one case per run the filter picks. Raises ReplayInvalid (no run picked, a
    taken name, a rubric without a judge model)."""
    rubric = rubric.strip()
    if rubric and judge is None:
        raise ReplayInvalid(_("A rubric needs a judge model."))
    if judge is not None and judge.workspace_id != filter.agent.workspace_id:
        # Another workspace's config (its key, its bill) is one that does not exist: no name said.
        raise ReplayInvalid(_("There is no model config %(id)s.") % {"id": judge.pk})
    runs = list(replay_runs_select(filter))
    if not runs:
        raise ReplayInvalid(_("No production run matches the filter."))
    name = (name or "").strip() or f"replay {filter.agent.slug} {timezone.now():%Y-%m-%dT%H:%M:%S.%f}"
    if len(name) > 100:
        raise ReplayInvalid(_("The suite's name is at most 100 characters."))
    if EvalSuite.objects.filter(workspace_id=filter.agent.workspace_id, name=name).exists():
        raise ReplayInvalid(_("A suite named %(name)s exists already.") % {"name": name})
    cases = [case for position, run in enumerate(runs) if (case := _case_of(run, position=position, rubric=rubric))]
    if not cases:
        raise ReplayInvalid(_("None of the matching runs stored a user message to replay."))
    suite = EvalSuite.objects.create(
        # The agent's workspace: a replay's suite is its runs' workspace's.
        workspace_id=filter.agent.workspace_id,
        name=name,
        description=_description(filter, count=len(cases), skipped=len(runs) - len(cases), rubric=bool(rubric)),
        judge_model_config=judge if rubric else None,
        replay={
            "agent": filter.agent.pk,
            "filter": filter.described(),
            "runs": [str(run.pk) for run in runs],
            "answer": "rubric" if rubric else "equals",
        },
    )
    for case in cases:
        case.suite = suite
        case.full_clean()
    EvalCase.objects.bulk_create(cases)
    return suite


def replay_start(
    *,
    filter: ReplayFilter,
    candidate: AgentVersion,
    user,
    name: str | None = None,
    rubric: str = "",
    judge: ModelConfig | None = None,
) -> EvalRun:
    """The eval run replaying the runs the filter picks on `candidate` (one repetition), queued
    when this commits. Raises ReplayInvalid, ReplayNotAllowed or EvalNotAllowed."""
    if candidate.agent_id != filter.agent.pk:
        raise ReplayInvalid(_("The candidate is a version of another agent."))
    replay_check(user=user, agent=filter.agent)
    with transaction.atomic():
        suite = replay_suite_create(filter=filter, name=name, rubric=rubric, judge=judge)
        return eval_run_start(suite=suite, agent_version=candidate, repetitions=1, user=user)


def replay_again(*, eval_run: EvalRun, version: AgentVersion, user) -> EvalRun:
    """The same replay (its suite, the same runs) on another version of the agent, to compare with."""
    agent = eval_run.agent_version.agent
    if version.agent_id != agent.pk:
        raise ReplayInvalid(_("The version is a version of another agent."))
    replay_check(user=user, agent=agent)
    return eval_run_start(suite=eval_run.suite, agent_version=version, repetitions=1, user=user)
