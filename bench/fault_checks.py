"""Invariants of runs whose model fails a seeded share of requests, checked attempt by attempt.

The fake server draws its faults from one seeded generator per script, one draw per request in
arrival order, and logs every request body in that order: replaying the draws over the log
says which fault each request really got. Each attempt (an LLMCall row, whose request is the
exact body sent) is matched to its request, so the check knows, for every attempt, whether
the model failed it — and from that, how every run had to end: with its final answer when a
retry got through, with provider_error when every attempt of a step was a fault.

Shared by the fault script (bench/faults.py) and its small version in the test suite.
"""

import hashlib
import json
from collections import Counter, defaultdict

from bench.fault_setup import MODEL_STEPS
from conversations.models import TERMINAL_STATUSES, LLMCall, Run, RunEvent
from fakellm.script import Script


def _digest(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def served_faults(*, script: dict, requests: list[dict]) -> dict[str, list[str]]:
    """Per request body, the fault each of its deliveries got ("" = answered), in order."""
    replay = Script(script)
    faults = defaultdict(list)
    for body in requests:
        fault = replay.draw_chaos() or {}
        faults[_digest(body)].append(str(fault.get("status") or fault.get("kind") or ""))
    return faults


def _as_served(kind: str, call: dict) -> bool:
    """Did the client record what the server did? HTTP errors keep their status, a timeout
    says so, a broken body fails without an error status; an answer succeeds."""
    if not kind:
        return call["status"] == LLMCall.Status.SUCCEEDED
    if call["status"] != LLMCall.Status.FAILED or not call["error"]:
        return False
    if kind.isdigit():
        return call["http_status"] == int(kind)
    timed_out = "timed out" in call["error"]
    return timed_out if kind == "timeout" else not timed_out and call["http_status"] in (None, 200)


def _expected_end(steps: list[list[str]], attempts_per_step: int) -> str:
    """final_answer when every step got an answer within its attempts, provider_error when the
    last step's attempts were all faults; anything else cannot happen to a correct engine."""
    for index, kinds in enumerate(steps):
        if "" in kinds:
            continue
        last = index == len(steps) - 1
        return "provider_error" if last and len(kinds) == attempts_per_step else "impossible"
    return "final_answer" if len(steps) == MODEL_STEPS else "impossible"


def fault_report(*, run_ids: list, script: dict, requests: list[dict]) -> dict:
    served = served_faults(script=script, requests=requests)
    runs = {run.pk: run for run in Run.objects.filter(pk__in=run_ids).select_related("agent_version")}
    calls = list(
        LLMCall.objects.filter(run__in=run_ids)
        .order_by("run", "iteration", "attempt")
        .values("pk", "run_id", "iteration", "attempt", "status", "http_status", "error", "request", "total_tokens")
    )
    per_body = defaultdict(list)
    for call in calls:
        per_body[_digest(call["request"])].append(call)
    unmatched = misread = 0
    kind_of = {}
    for digest, rows in per_body.items():
        kinds = served.get(digest, [])
        unmatched += abs(len(kinds) - len(rows))
        for call, kind in zip(rows, kinds):
            kind_of[call["pk"]] = kind
            misread += not _as_served(kind, call)

    steps = defaultdict(lambda: defaultdict(list))
    for call in calls:
        steps[call["run_id"]][call["iteration"]].append(kind_of.get(call["pk"], "?"))
    wrong_end = extra_attempts = 0
    endings = Counter()
    for run_id, run in runs.items():
        attempts_per_step = run.agent_version.snapshot["model"]["max_retries"] + 1
        by_step = [steps[run_id][i] for i in sorted(steps[run_id])]
        extra_attempts += sum(max(0, len(kinds) - attempts_per_step) + kinds[:-1].count("") for kinds in by_step)
        expected = _expected_end(by_step, attempts_per_step)
        status = {"final_answer": "completed", "provider_error": "failed"}.get(expected)
        wrong_end += (run.stop_reason, run.status) != (expected, status)
        endings[(run.agent_version.snapshot["model"]["stream"], run.status, run.stop_reason)] += 1

    events = Counter(
        RunEvent.objects.filter(run__in=run_ids, type__startswith="llm_call.").values_list("type", flat=True)
    )
    rows = Counter(call["status"] for call in calls)
    tokens = Counter()
    for call in calls:
        tokens[call["run_id"]] += call["total_tokens"]
    return {
        "runs": len(run_ids),
        "endings": {
            f"{'streamed' if stream else 'plain'} {status}/{reason}": n
            for (stream, status, reason), n in sorted(endings.items())
        },
        "attempts": len(calls),
        "requests_served": len(requests),
        "faults_served": dict(Counter(kind for kind in kind_of.values() if kind)),
        "retry_attempts": sum(1 for call in calls if call["attempt"] > 1),
        "runs_recovered_by_retry": sum(
            1
            for run_id, run in runs.items()
            if run.status == "completed" and any(len(kinds) > 1 for kinds in steps[run_id].values())
        ),
        "non_terminal": sum(1 for run in runs.values() if run.status not in TERMINAL_STATUSES),
        "wrong_stop_reason": wrong_end,
        "unmatched_attempts": unmatched,
        "misread_attempts": misread,
        "extra_attempts": extra_attempts,
        "open_attempts": rows[LLMCall.Status.STARTED],
        "missing_events": abs(events["llm_call.failed"] - rows[LLMCall.Status.FAILED])
        + abs(events["llm_call.completed"] - rows[LLMCall.Status.SUCCEEDED])
        + abs(events["llm_call.started"] - len(calls)),
        "totals_mismatch": sum(1 for run_id, run in runs.items() if run.total_tokens != tokens[run_id]),
    }


PROBLEMS = (
    "non_terminal",
    "wrong_stop_reason",
    "unmatched_attempts",
    "misread_attempts",
    "extra_attempts",
    "open_attempts",
    "missing_events",
    "totals_mismatch",
)


def report_ok(report: dict) -> bool:
    return all(report[key] == 0 for key in PROBLEMS)
