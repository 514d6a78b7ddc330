"""What forgetting an end user (memory.forget) reaches in evaluations: the cases made from their
runs (a replay's, or one added from feedback: EvalCase.source_run) hold their words (the turns,
the calls' arguments and results, the answer), and so do the eval runs that played those cases
(their conversations start with the same turns, their sandboxes give back the same results).
Registered with memory.forget at start-up (evals.apps), which this app sits above.

A case is blanked, not deleted: its results (PROTECT) keep the eval runs' figures. What the
operator wrote on it (its name, answer_contains, answer_pattern, answer_schema, forbidden tools)
stays; a replay's rubric goes, as it quotes the original answer."""

import uuid

from django.db.models import Q

from evals.models import EvalCase, EvalResult, OnlineScore

# A case's turns once forgotten: still a well-formed conversation (one user turn), saying nothing.
BLANK_TURNS = [{"role": "user", "content": ""}]


def case_copy_runs(*, run_ids: set) -> set:
    """The runs that played the cases made from these runs: each result's run and the runs of its
    earlier conversations."""
    found = set()
    rows = EvalResult.objects.filter(case__source_run_id__in=run_ids).values_list("run_id", "earlier_runs")
    for run_id, earlier in rows:
        if run_id is not None:
            found.add(run_id)
        found |= {uuid.UUID(str(pk)) for pk in earlier or []}
    return found


def _names_only(expected) -> list:
    """Expected calls with only the tools' names: the arguments were the end user's."""
    return [{"name": call["name"]} for call in expected or [] if isinstance(call, dict) and "name" in call]


def case_copies_erase(*, run_ids: set) -> dict[str, int]:
    """Blank the cases made from these runs and the check reasons (which quote answers and
    arguments) of every result of those cases or played by these runs."""
    cases = list(EvalCase.objects.filter(source_run_id__in=run_ids).only("pk", "expected_tool_calls"))
    for case in cases:
        case.turns = BLANK_TURNS
        case.expected_tool_calls = _names_only(case.expected_tool_calls)
        case.recorded_calls, case.tool_results = [], {}
        case.answer_equals = case.answer_rubric = ""
    EvalCase.objects.bulk_update(
        cases,
        ["turns", "expected_tool_calls", "recorded_calls", "tool_results", "answer_equals", "answer_rubric"],
        batch_size=500,
    )
    results = list(
        EvalResult.objects.filter(Q(case__in=[case.pk for case in cases]) | Q(run_id__in=run_ids)).only("pk", "checks")
    )
    for result in results:
        result.checks = [{**check, "reason": ""} if isinstance(check, dict) else check for check in result.checks or []]
    EvalResult.objects.bulk_update(results, ["checks"], batch_size=500)
    return {"eval_cases_anonymised": len(cases), "eval_results_anonymised": len(results)}


def no_copy_runs(*, run_ids: set) -> set:
    """Online scores start no runs: none is made from them."""
    return set()


def online_scores_erase(*, run_ids: set) -> dict[str, int]:
    """Blank the explanations of these runs' online scores (a schema's errors and a judge's
    reason may quote the answer); the scores themselves stay, the dashboards' figures with them."""
    return {"online_scores_anonymised": OnlineScore.objects.filter(run_id__in=run_ids).update(explanation="")}
