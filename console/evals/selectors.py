"""Reads behind the eval comparison page: each case's results in an eval run, with the run each
repetition played and the checks that failed, so a regression links to the runs that explain it."""

from console.evals.labels import check_label
from conversations.models import Run
from evals.models import EvalResult, EvalRun


def eval_case_results(*, eval_run: EvalRun) -> dict[str, dict]:
    """By case name: the case's id and its scored repetitions in order, each with its run's id
    (None once retention deleted the run: the scores outlive it) and the failed checks in words.
    Two queries."""
    cases: dict[str, dict] = {}
    results = list(
        EvalResult.objects.filter(eval_run=eval_run, scored=True)
        .order_by("case__position", "case_id", "repetition")
        .values("case_id", "case__name", "repetition", "passed", "run_id", "checks")
    )
    kept = set(Run.objects.filter(pk__in=[r["run_id"] for r in results if r["run_id"]]).values_list("pk", flat=True))
    for result in results:
        case = cases.setdefault(result["case__name"], {"id": result["case_id"], "results": []})
        case["results"].append(
            {
                "repetition": result["repetition"],
                "passed": bool(result["passed"]),
                "run_id": result["run_id"] if result["run_id"] in kept else None,
                "failed_checks": [
                    {"kind": check_label(check["kind"]), "reason": check.get("reason", "")}
                    for check in result["checks"]
                    if not check.get("passed")
                ],
            }
        )
    return cases
