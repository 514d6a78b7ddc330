"""The release gate (agents.releases asks it before a version goes live).

With a gate on the agent, publishing the draft or promoting a canary's candidate needs a finished
eval run of the gate's suite on that version; once the agent has a published version, that run is
compared with one of the published version (same suite and repetitions) and any regression beyond
the gate's thresholds refuses the release, naming what regressed. The eval runs are read, never
started here: a release is an operator's click, an evaluation takes minutes (`agentry_eval` or the
admin's *Start an eval run* makes them)."""

from django.utils.translation import gettext as _

from agents.models import Agent, AgentVersion
from agents.releases import ReleaseRefused
from evals.compare import Thresholds, case_rows, metric_rows
from evals.models import EvalRun, ReleaseGate
from evals.selectors import eval_results_data, eval_run_reusable


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
    baseline = _eval_run_of(gate, AgentVersion.objects.get(pk=agent.published_version_id), role=_("published"))
    thresholds = Thresholds(max_rate_drop=gate.max_rate_drop, max_cost_increase=gate.max_cost_increase)
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
