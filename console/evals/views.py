"""Two eval runs side by side, metric by metric and case by case, regressions first: the same
comparison as `manage.py agentry_eval` prints (evals.compare)."""

from django.http import HttpResponseBadRequest
from django.shortcuts import get_object_or_404
from django.utils.translation import gettext as _

from console.evals.labels import metric_label
from console.evals.selectors import eval_case_results
from console.monitoring.views import _page, operator_required
from evals.compare import (
    DEFAULT_MAX_COST_INCREASE,
    DEFAULT_MAX_LATENCY_INCREASE,
    DEFAULT_MAX_RATE_DROP,
    Thresholds,
    case_rows,
    metric_rows,
)
from evals.models import EvalRun, EvalRunStatus
from evals.selectors import eval_results_data
from platform_site.http_methods import require_GET
from workspaces.access import in_workspace

VIEW_PERMISSION = "evals.view_evalrun"


class BadParameter(ValueError):
    pass


def _id(request, name: str) -> int:
    try:
        value = int(request.GET[name])
    except (KeyError, ValueError):
        raise BadParameter(_("Give %(name)s as an eval run id.") % {"name": name}) from None
    if value < 1:
        raise BadParameter(_("Give %(name)s as an eval run id.") % {"name": name})
    return value


def _threshold(request, name: str, default: float) -> float:
    raw = request.GET.get(name)
    if raw in (None, ""):
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 10:
        raise BadParameter(_("%(name)s must be a number from 0 to 10.") % {"name": name})
    return value


def _finished(request, eval_run_id: int) -> EvalRun:
    # Another workspace's eval run is not found (404), as one that does not exist.
    eval_runs = in_workspace(EvalRun.objects.select_related("suite", "agent_version__agent"), request.user)
    eval_run = get_object_or_404(eval_runs, pk=eval_run_id)
    if eval_run.status == EvalRunStatus.FAILED:
        raise BadParameter(
            _("Eval run %(id)s failed and has no results to compare: %(error)s")
            % {"id": eval_run_id, "error": eval_run.error}
        )
    if eval_run.status != EvalRunStatus.COMPLETED:
        raise BadParameter(_("Eval run %(id)s has not finished yet.") % {"id": eval_run_id})
    return eval_run


@require_GET
@operator_required(VIEW_PERMISSION)
def compare(request):
    try:
        thresholds = Thresholds(
            max_rate_drop=_threshold(request, "max_rate_drop", DEFAULT_MAX_RATE_DROP),
            max_cost_increase=_threshold(request, "max_cost_increase", DEFAULT_MAX_COST_INCREASE),
            max_latency_increase=_threshold(request, "max_latency_increase", DEFAULT_MAX_LATENCY_INCREASE),
        )
        baseline = _finished(request, _id(request, "baseline"))
        candidate = _finished(request, _id(request, "candidate"))
    except BadParameter as exc:
        return HttpResponseBadRequest(str(exc))
    base_cases, cand_cases = eval_case_results(eval_run=baseline), eval_case_results(eval_run=candidate)
    return _page(
        request,
        "evals/compare.html",
        title=_("Compare eval runs"),
        baseline=baseline,
        candidate=candidate,
        thresholds=thresholds,
        metrics=[
            {"row": row, "label": metric_label(row.name)}
            for row in metric_rows(baseline.metrics, candidate.metrics, thresholds)
        ],
        sides=[(_("Baseline"), baseline), (_("Candidate"), candidate)],
        cases=[
            _case(row, base_cases.get(row.name), cand_cases.get(row.name))
            for row in case_rows(
                eval_results_data(eval_run=baseline), eval_results_data(eval_run=candidate), thresholds
            )
        ],
    )


def _case(row, base: dict | None, cand: dict | None) -> dict:
    """A case's row with its repetitions' runs on both sides (a case may be in one run only)."""
    base_results, cand_results = (base or {}).get("results", []), (cand or {}).get("results", [])
    return {
        "row": row,
        "case_id": (cand or base)["id"],
        "candidate": cand_results,
        "sides": [
            ({"key": "baseline", "label": _("baseline")}, base_results),
            ({"key": "candidate", "label": _("candidate")}, cand_results),
        ],
    }
