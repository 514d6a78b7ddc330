"""What happens to a call of a sandboxed run (a fork's, an evaluation's): engine.invocations.call_decision
with Run.sandbox set, on unsaved rows and no database."""

from agents.snapshot import DELEGATE_KIND
from conversations.models import Approval, ToolInvocation
from engine.invocations import REAL_WRITE_REASON, AskApproval, Delegate, Execute, Settled, Wait, call_decision
from tools.arguments import arguments_hash

Status = ToolInvocation.Status


def _spec(*, kind="python", side_effect="write", policy="never", limit=20) -> dict:
    return {
        "name": "book",
        "kind": kind,
        "parameters": {"type": "object", "properties": {"seats": {"type": "integer"}}},
        "side_effect": side_effect,
        "idempotent": False,
        "max_result_chars": limit,
        "approval": {"policy": policy, "rule": "", "timeout_seconds": None, "on_expiry": "reject"},
    }


def _call(arguments=None) -> ToolInvocation:
    return ToolInvocation(
        tool_call_id="c1", tool_name="book", arguments=arguments or {"seats": 2}, validation_errors=[]
    )


def _fork(**fields) -> dict:
    return {"fork": "r1", "recorded": [], "results": {}, "live_reads": True, "delegate": True, **fields}


def _recorded(result="booked #1", *, arguments=None, error=False, name="book") -> dict:
    return {"name": name, "arguments": arguments or {"seats": 2}, "result": result, "error": error}


def _approval(status) -> Approval:
    return Approval(
        tool_call_id="c1", status=status, arguments={"seats": 2}, arguments_hash=arguments_hash({"seats": 2})
    )


def _decide(sandbox, *, spec=None, call=None, approval=None):
    return call_decision(
        invocation=call or _call(), spec=spec or _spec(), approval=approval, blocked=None, sandbox=sandbox
    )


def test_the_same_call_as_recorded_gets_its_recorded_result_without_approval():
    sandbox = _fork(recorded=[_recorded()], real_writes="approval")
    assert _decide(sandbox, spec=_spec(policy="always")) == Settled(Status.SUCCEEDED, "booked #1", simulated=True)


def test_the_same_call_is_matched_by_tool_and_arguments():
    sandbox = _fork(recorded=[_recorded("other seats", arguments={"seats": 3}), _recorded("other tool", name="x")])
    assert _decide(sandbox).error == "not run in a fork"
    assert _decide(sandbox, call=_call({"seats": 3})).result == "other seats"


def test_a_recorded_error_is_given_back_as_an_error():
    assert _decide(_fork(recorded=[_recorded("no seats", error=True)])) == Settled(
        Status.ERROR, "no seats", simulated=True
    )


def test_the_first_recorded_call_wins():
    sandbox = _fork(recorded=[_recorded("edited"), _recorded("original")])
    assert _decide(sandbox).result == "edited"


def test_a_given_result_is_cut_like_the_tools_own():
    decision = _decide(_fork(recorded=[_recorded("x" * 50)]))
    assert decision.truncated and decision.simulated and decision.result.startswith("x" * 20 + "\n")


def test_a_new_write_takes_the_operators_result():
    assert _decide(_fork(results={"book": "ok 42"})) == Settled(Status.SUCCEEDED, "ok 42", simulated=True)


def test_a_new_write_without_a_result_fails_without_running():
    decision = _decide(_fork())
    assert decision.status == Status.ERROR and decision.error == "not run in a fork" and not decision.simulated


def test_a_new_write_of_a_fork_allowing_real_writes_asks_then_follows_the_approval():
    sandbox = _fork(real_writes="approval")
    assert _decide(sandbox) == AskApproval(REAL_WRITE_REASON)
    assert _decide(sandbox, approval=_approval(Approval.Status.PENDING)) == Wait()
    assert _decide(sandbox, approval=_approval(Approval.Status.APPROVED)) == Execute({"seats": 2})
    rejected = _decide(sandbox, approval=_approval(Approval.Status.REJECTED))
    assert rejected.status == Status.REJECTED


def test_an_operators_result_comes_before_asking_for_a_real_write():
    assert _decide(_fork(results={"book": "ok"}, real_writes="approval")).simulated


def test_a_read_runs_live_when_allowed_and_unless_it_needs_an_approval():
    read = _spec(side_effect="read")
    assert _decide(_fork(), spec=read) == Execute({"seats": 2})
    assert _decide(_fork(live_reads=False), spec=read).error == "not run in a fork"
    asked = _spec(side_effect="read", policy="always")
    assert _decide(_fork(), spec=asked).error == "not run in a fork"


def test_a_forks_delegate_call_starts_a_sandboxed_child():
    assert _decide(_fork(recorded=[_recorded()]), spec=_spec(kind=DELEGATE_KIND)) == Delegate()


def test_an_evaluations_delegate_call_is_not_run_and_no_real_write_is_offered():
    evaluation = {"recorded": [], "results": {}}
    assert _decide(evaluation, spec=_spec(kind=DELEGATE_KIND)).error == "not run in an evaluation"
    assert _decide(evaluation).error == "not run in an evaluation"
    assert _decide({"results": {"book": "ok"}}).result == "ok"


def test_a_real_write_approval_is_never_asked_for_a_delegate():
    sandbox = {"recorded": [], "results": {}, "real_writes": "approval"}
    assert _decide(sandbox, spec=_spec(kind=DELEGATE_KIND)).error == "not run in an evaluation"
