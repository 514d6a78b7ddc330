"""The release gate (agents.releases asks it before a version goes live).

With a gate on the agent, publishing the draft or promoting a canary's candidate needs a finished
eval run of the gate's suite on that version; once the agent has a published version, that run is
compared with one of the published version (same suite and repetitions) and any regression beyond
the gate's thresholds refuses the release, naming what regressed. The suite's eval runs are read,
never started here: a release is an operator's click, an evaluation takes minutes (`agentry_eval` or the
admin's *Start an eval run* makes them).

With `replay_hours` set, a release against a published version also needs the agent's production
runs of that many last hours replayed (evals.replays) on the candidate and on the published
version, compared with the same thresholds. A release refused for want of them sends the task
that starts them (not on commit: the refusal rolls the release's transaction back, and the task
reads only rows committed before it) and says so; the next attempt, once they have finished,
compares them. With no production run in the window there is nothing to replay.

With `online_min_runs` set, promoting a canary also reads the online scores (evals.online) made
since the canary started: the candidate needs that many, and no evaluator's average on it may
fall by more than `max_rate_drop` below its average on the published version over the same time
(an evaluator that scored only one of them is not compared)."""

import logging
from datetime import timedelta

from django.utils import timezone
from django.utils.translation import gettext as _

from agents.models import Agent, AgentRelease, AgentVersion, ReleaseAction
from agents.releases import ReleaseRefused
from evals.compare import Thresholds, case_rows, metric_rows
from evals.models import EvalRun, EvalRunStatus, EvalSuite, OnlineEvaluator, ReleaseGate
from evals.online_selectors import online_averages
from evals.replays import MAX_LIMIT, ReplayFilter, replay_runs_select
from evals.selectors import eval_results_data, eval_run_reusable
from platform_site.celery import app

log = logging.getLogger(__name__)

RELEASE_REPLAY_TASK = "evals.tasks.release_replay_task"


def _eval_run_of(gate: ReleaseGate, version: AgentVersion, *, role: str) -> EvalRun:
    eval_run = eval_run_reusable(suite=gate.suite, agent_version=version, repetitions=gate.repetitions)
    if eval_run is None:
        raise ReleaseRefused(
            _(
                "The release gate needs a finished run of eval suite %(suite)s with %(repetitions)s repetitions "
                "on the %(role)s version (%(number)s) first."
            )
            % {"suite": gate.suite.name, "repetitions": gate.repetitions, "role": role, "number": version.number}
        )
    return eval_run


def release_gate_check(*, agent: Agent, version: AgentVersion, action: str) -> None:
    """ReleaseRefused unless `version` passes the agent's gate (no gate, or a disabled one: passes)."""
    gate = ReleaseGate.objects.filter(agent_id=agent.pk, enabled=True).select_related("suite").first()
    if gate is None:
        return
    candidate = _eval_run_of(gate, version, role=_("candidate"))
    if agent.published_version_id is None or agent.published_version_id == version.pk:
        return  # a first release: nothing to regress against, the evaluation itself is the bar
    published = AgentVersion.objects.get(pk=agent.published_version_id)
    thresholds = Thresholds(
        max_rate_drop=gate.max_rate_drop,
        max_cost_increase=gate.max_cost_increase,
        max_latency_increase=gate.max_latency_increase,
    )
    _regressions_refuse(_eval_run_of(gate, published, role=_("published")), candidate, thresholds)
    if gate.replay_hours:
        _replay_check(gate, candidate=version, published=published, thresholds=thresholds)
    if gate.online_min_runs and action == ReleaseAction.CANARY_PROMOTE:
        _online_check(gate, candidate=version, published=published)


def _online_check(gate: ReleaseGate, *, candidate: AgentVersion, published: AgentVersion) -> None:
    """ReleaseRefused unless the canary's online scores are enough and none dropped."""
    started = (
        AgentRelease.objects.filter(agent_id=gate.agent_id, action=ReleaseAction.CANARY_START, version=candidate)
        .order_by("-at")
        .values_list("at", flat=True)
        .first()
    )
    averages = online_averages(
        agent=gate.agent, version_ids=[candidate.pk, published.pk], since=started or timezone.now()
    )
    scored = sum(n for (_evaluator, version_id), (n, _average) in averages.items() if version_id == candidate.pk)
    if scored < gate.online_min_runs:
        raise ReleaseRefused(
            _(
                "The release gate needs %(needed)s online scores of the candidate's live traffic since the canary "
                "started; it has %(scored)s so far."
            )
            % {"needed": gate.online_min_runs, "scored": scored}
        )
    names = dict(OnlineEvaluator.objects.filter(agent_id=gate.agent_id).values_list("pk", "name"))
    dropped = []
    for (evaluator_id, version_id), (_n, average) in sorted(averages.items()):
        baseline = averages.get((evaluator_id, published.pk))
        if version_id != candidate.pk or baseline is None:
            continue
        if baseline[1] - average > gate.max_rate_drop:
            dropped.append(f"{names.get(evaluator_id, evaluator_id)} ({baseline[1]:.2f} → {average:.2f})")
    if dropped:
        raise ReleaseRefused(
            _("The release gate found online scores of the canary dropping against the published version: %(names)s.")
            % {"names": ", ".join(dropped)}
        )


def _regressions_refuse(baseline: EvalRun, candidate: EvalRun, thresholds: Thresholds) -> None:
    rows = metric_rows(baseline.metrics or {}, candidate.metrics or {}, thresholds) + case_rows(
        eval_results_data(eval_run=baseline), eval_results_data(eval_run=candidate), thresholds
    )
    regressed = [row.name for row in rows if row.regression]
    if regressed:
        message = _(
            "The release gate found regressions against the published version "  # noqa: ISC003
            "(eval runs %(baseline)s and %(candidate)s): %(names)s."
        )
        raise ReleaseRefused(
            message % {"baseline": baseline.pk, "candidate": candidate.pk, "names": ", ".join(regressed)}
        )


def release_replay_filter(*, agent: Agent, hours: int) -> ReplayFilter:
    """The production traffic a gate replays: the agent's runs of the last `hours` hours."""
    return ReplayFilter(agent=agent, since=timezone.now() - timedelta(hours=hours), limit=MAX_LIMIT)


def _replay_check(
    gate: ReleaseGate, *, candidate: AgentVersion, published: AgentVersion, thresholds: Thresholds
) -> None:
    """ReleaseRefused unless the newest replay of the window, on both versions, has no regression."""
    if not replay_runs_select(release_replay_filter(agent=gate.agent, hours=gate.replay_hours)).exists():
        return  # no production traffic in the window: nothing to replay
    fresh = EvalSuite.objects.filter(
        replay__agent=gate.agent_id, created_at__gte=timezone.now() - timedelta(hours=gate.replay_hours)
    ).order_by("-created_at")
    running = False
    for suite in fresh:
        runs = {
            version.pk: EvalRun.objects.filter(suite=suite, agent_version=version).order_by("-started_at").first()
            for version in (candidate, published)
        }
        if all(run is not None and run.status == EvalRunStatus.COMPLETED for run in runs.values()):
            _regressions_refuse(runs[published.pk], runs[candidate.pk], thresholds)
            return
        running = running or any(run is not None and run.status == EvalRunStatus.RUNNING for run in runs.values())
    if not running:
        try:
            app.tasks[RELEASE_REPLAY_TASK].apply_async(
                args=[gate.agent_id, candidate.pk, published.pk, gate.replay_hours]
            )
        except Exception:
            # The release is refused either way; the next attempt sends the task again.
            log.exception("agent %s: the release gate's replay task not sent", gate.agent_id)
    raise ReleaseRefused(
        _(
            "The release gate replays the production runs of the last %(hours)s hours on the candidate and the "
            "published version first: the replays are under way; try again once they have finished."
        )
        % {"hours": gate.replay_hours}
    )
