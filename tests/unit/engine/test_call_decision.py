"""What happens to one tool call (engine.invocations.call_decision): a pure function of the
call's row, its tool's spec, its approval, the loop hint and the run's evaluation results."""

import pytest

from agents.snapshot import DELEGATE_KIND
from conversations.models import Approval, ToolInvocation
from engine.invocations import AskApproval, Delegate, Execute, Settled, Wait, call_decision, runs_at_once
from tools.arguments import arguments_hash

Status = ToolInvocation.Status


def _spec(policy="never", *, kind="python", side_effect="write", rule="") -> dict:
    return {
        "name": "book",
        "kind": kind,
        "parameters": {"type": "object", "properties": {"seats": {"type": "integer"}}},
        "side_effect": side_effect,
        "idempotent": False,
        "max_result_chars": 20,
        "approval": {"policy": policy, "rule": rule, "timeout_seconds": None, "on_expiry": "reject"},
    }


def _call(arguments=None, errors=()) -> ToolInvocation:
    return ToolInvocation(
        tool_call_id="c1", tool_name="book", arguments=arguments or {"seats": 2}, validation_errors=list(errors)
    )


def _approval(status, *, arguments=None, kind=Approval.Kind.TOOL_CALL, reason="") -> Approval:
    arguments = arguments or {"seats": 2}
    return Approval(
        tool_call_id="c1",
        status=status,
        kind=kind,
        arguments=arguments,
        arguments_hash=arguments_hash(arguments),
        reason=reason,
    )


def _decide(call=None, spec=None, approval=None, blocked=None, sandbox=None):
    return call_decision(
        invocation=call or _call(),
        spec=_spec() if spec is None else spec,
        approval=approval,
        blocked=blocked,
        sandbox=sandbox,
    )


def test_the_loop_hint_comes_first_even_for_a_malformed_call():
    decision = _decide(call=_call(errors=["seats must be an integer"]), blocked="stop repeating")
    assert decision == Settled(Status.BLOCKED, "stop repeating", error="same-tool streak")


def test_invalid_arguments_are_what_the_model_reads():
    decision = _decide(call=_call(errors=["seats must be", "an integer"]))
    assert decision == Settled(Status.ERROR, "seats must be an integer", error="invalid arguments")


def test_a_call_without_an_approval_runs_or_asks_by_its_policy():
    assert _decide() == Execute({"seats": 2})
    asked = _decide(spec=_spec("always"))
    assert isinstance(asked, AskApproval) and asked.why


def test_an_agent_as_a_tool_is_a_child_run_whatever_its_policy():
    assert _decide(spec=_spec("always", kind=DELEGATE_KIND)) == Delegate()


@pytest.mark.parametrize(
    "approval,expected",
    [
        (_approval(Approval.Status.PENDING), Wait()),
        (_approval(Approval.Status.APPROVED, arguments={"seats": 1}), Execute({"seats": 1})),
    ],
)
def test_an_approval_waits_or_runs_the_call_with_the_arguments_approved(approval, expected):
    assert _decide(spec=_spec("always"), approval=approval) == expected


@pytest.mark.parametrize("status", [Approval.Status.REJECTED, Approval.Status.EXPIRED])
def test_a_refused_approval_settles_the_call_without_running_it(status):
    decision = _decide(spec=_spec("always"), approval=_approval(status, reason="too many"))
    assert isinstance(decision, Settled) and decision.status == Status.REJECTED and decision.error == status


def test_an_approval_whose_arguments_were_changed_after_approving_refuses_the_call():
    approval = _approval(Approval.Status.APPROVED)
    approval.arguments = {"seats": 9}  # the hash still says 2 seats were approved
    decision = _decide(spec=_spec("always"), approval=approval)
    assert decision.status == Status.REJECTED and "does not match" in decision.result


def test_a_settled_hand_off_gives_the_person_s_answer_or_the_kept_result():
    answered = _approval(Approval.Status.APPROVED, kind=Approval.Kind.HANDOFF, reason="Open 9 to 5")
    decision = _decide(approval=answered)
    assert decision.status == Status.SUCCEEDED and decision.result.endswith("Open 9 to 5")
    call = _call()
    call.result = "nobody knows yet"
    expired = _approval(Approval.Status.EXPIRED, kind=Approval.Kind.HANDOFF)
    assert _decide(call=call, approval=expired) == Settled(Status.SUCCEEDED, "nobody knows yet")


def test_an_evaluation_takes_the_case_s_result_cut_like_the_tool_s_own():
    decision = _decide(spec=_spec("always", kind=DELEGATE_KIND), sandbox={"results": {"book": "x" * 50}})
    assert decision.simulated and decision.truncated and decision.status == Status.SUCCEEDED


def test_an_evaluation_runs_only_reads_that_need_no_person_and_only_if_the_case_allows():
    reads = {"live_reads": True}
    assert _decide(spec=_spec(side_effect="read"), sandbox=reads) == Execute({"seats": 2})
    for spec, sandbox in [
        (_spec(side_effect="read"), {}),
        (_spec(side_effect="write"), reads),
        (_spec("always", side_effect="read"), reads),
    ]:
        decision = _decide(spec=spec, sandbox=sandbox)
        assert decision.status == Status.ERROR and decision.error == "not run in an evaluation"


def test_a_call_runs_at_once_exactly_when_the_decision_would_run_it():
    class Run:
        sandbox = None

    assert runs_at_once(run=Run(), invocation=_call(), spec=_spec(), held_back=False)
    assert not runs_at_once(run=Run(), invocation=_call(), spec=_spec(), held_back=True)
    assert not runs_at_once(run=Run(), invocation=_call(), spec=_spec("always"), held_back=False)
    assert not runs_at_once(run=Run(), invocation=_call(), spec=_spec(kind=DELEGATE_KIND), held_back=False)
