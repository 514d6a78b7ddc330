"""Approvals inside the tool loop, run in-process: parking, decisions, resuming, binding."""

import threading

import pytest
from django.contrib.auth.models import User
from django.db import connection

from conversations.models import Approval, ApprovalGrant, Message, Run, RunEvent, ToolInvocation
from engine.approvals import ApprovalConflict, ApprovalInvalid, ApprovalNotAllowed, approval_decide
from engine.loop import run_advance
from engine.runs import run_park_for_approval
from tests.approvals.conftest import counter_steps
from tools.arguments import arguments_hash


def _events(run) -> list[str]:
    return list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True))


def _parked(scenario_run) -> Run:
    run_advance(run_id=scenario_run.pk)
    scenario_run.refresh_from_db()
    assert scenario_run.status == "awaiting_approval", scenario_run.error
    return scenario_run


def _resume(run, enqueued) -> Run:
    assert enqueued[-1] == str(run.pk)
    run_advance(run_id=run.pk)
    run.refresh_from_db()
    return run


# Commits: a decision hands the run back to the broker in an on_commit callback, which the test follows.
@pytest.mark.django_db(transaction=True)
def test_write_call_parks_while_read_call_runs(scenario, enqueued, executions, approver):
    s = scenario(
        steps=[
            {
                "tool_calls": [
                    {"name": "test-echo", "arguments": {"text": "hi"}},
                    {"name": "test-counter", "arguments": {"label": "park"}},
                ]
            },
            {"content": "Done: {last_tool_result}"},
        ]
    )
    run = _parked(s.post())

    echo, counter = ToolInvocation.objects.filter(run=run).order_by("position")
    assert echo.status == "succeeded" and echo.result == "hi"
    assert counter.status == "awaiting_approval"
    approval = Approval.objects.get(run=run)
    assert approval.status == "pending" and approval.invocation == counter
    assert approval.tool_call_id == counter.tool_call_id
    assert approval.arguments == {"label": "park"} and approval.arguments_hash == arguments_hash({"label": "park"})
    assert approval.request_reason == "policy: always"  # test-counter is a write tool: approval by default
    assert approval.expires_at is not None
    assert executions("park") == 0
    assert run.lease_owner == "" and _events(run)[-1] == "run.awaiting_approval"
    assert "approval.requested" in _events(run)

    enqueued.clear()
    approval_decide(approval_id=approval.pk, user=approver, decision="approve", channel="api")
    run.refresh_from_db()
    assert run.status == "queued" and enqueued == [str(run.pk)]

    run = _resume(run, enqueued)
    assert run.status == "completed" and run.stop_reason == "final_answer"
    assert executions("park") == 1
    counter.refresh_from_db()
    assert counter.status == "succeeded" and counter.idempotency_key == f"{run.pk}:{counter.tool_call_id}"
    approval.refresh_from_db()
    assert (approval.status, approval.decided_by, approval.channel) == ("approved", approver, "api")
    decided = RunEvent.objects.get(run=run, type="approval.decided")
    assert decided.payload["decided_by"] == "approver" and decided.payload["channel"] == "api"
    assert decided.payload["tool_call_id"] == counter.tool_call_id


# Commits: a decision hands the run back to the broker in an on_commit callback, which the test follows.
@pytest.mark.django_db(transaction=True)
def test_run_resumes_only_when_every_pending_call_of_the_step_is_decided(scenario, enqueued, executions, approver):
    s = scenario(steps=counter_steps("one", "two"))
    run = _parked(s.post())
    first, second = Approval.objects.filter(run=run).order_by("invocation__position")

    enqueued.clear()
    approval_decide(approval_id=first.pk, user=approver, decision="approve", channel="api")
    run.refresh_from_db()
    assert run.status == "awaiting_approval" and enqueued == []

    approval_decide(approval_id=second.pk, user=approver, decision="reject", channel="api", reason="not today")
    run = _resume(run, enqueued)
    assert run.status == "completed"
    assert (executions("one"), executions("two")) == (1, 0)
    results = dict(Message.objects.filter(run=run, role="tool").values_list("tool_call_id", "content"))
    assert "not today" in results[second.tool_call_id]


# Commits: a decision hands the run back to the broker in an on_commit callback, which the test follows.
@pytest.mark.django_db(transaction=True)
def test_edited_arguments_are_validated_kept_apart_and_used(scenario, enqueued, executions, approver):
    s = scenario(steps=counter_steps("as-asked"))
    run = _parked(s.post())
    approval = Approval.objects.get(run=run)

    with pytest.raises(ApprovalInvalid) as invalid:
        approval_decide(
            approval_id=approval.pk,
            user=approver,
            decision="approve",
            channel="api",
            arguments={"label": 5, "extra": True},
        )
    assert any("extra" in e for e in invalid.value.errors) and any("'label'" in e for e in invalid.value.errors)
    approval.refresh_from_db()
    assert approval.status == "pending"

    approval_decide(
        approval_id=approval.pk, user=approver, decision="approve", channel="page", arguments={"label": "as-edited"}
    )
    run = _resume(run, enqueued)
    assert run.status == "completed"
    assert (executions("as-asked"), executions("as-edited")) == (0, 1)
    invocation = ToolInvocation.objects.get(run=run)
    approval.refresh_from_db()
    assert invocation.arguments == {"label": "as-asked"}  # the model's original stays on the invocation
    assert approval.arguments == {"label": "as-edited"}
    assert approval.arguments_hash == arguments_hash({"label": "as-edited"})
    assert RunEvent.objects.get(run=run, type="approval.decided").payload["edited"] is True
    assert RunEvent.objects.get(run=run, type="tool.started").payload["arguments"] == {"label": "as-edited"}
    # The model is told what really ran.
    tool_message = s.requests()[-1]["messages"][-1]
    assert tool_message["role"] == "tool" and "as-edited" in tool_message["content"]
    assert "changed the arguments" in tool_message["content"]


# Commits: a decision hands the run back to the broker in an on_commit callback, which the test follows.
@pytest.mark.django_db(transaction=True)
def test_rejection_reason_reaches_the_model(scenario, enqueued, executions, approver):
    s = scenario(steps=counter_steps("refund-9000", reply="Answer: {last_tool_result}"))
    run = _parked(s.post())
    approval = Approval.objects.get(run=run)

    approval_decide(
        approval_id=approval.pk,
        user=approver,
        decision="reject",
        channel="api",
        reason="Refunds above 5000 need a manager.",
    )
    run = _resume(run, enqueued)
    assert run.status == "completed" and executions("refund-9000") == 0
    invocation = ToolInvocation.objects.get(run=run)
    assert invocation.status == "rejected"
    tool_message = s.requests()[-1]["messages"][-1]
    assert tool_message["role"] == "tool"
    assert "rejected" in tool_message["content"] and "Refunds above 5000 need a manager." in tool_message["content"]
    assert "Refunds above 5000 need a manager." in Message.objects.filter(run=run, role="assistant").last().content


# Commits: a decision hands the run back to the broker in an on_commit callback, which the test follows.
@pytest.mark.django_db(transaction=True)
def test_approving_for_the_rest_of_the_run_covers_later_calls(scenario, enqueued, executions, approver):
    s = scenario(
        steps=[
            {
                "tool_calls": [
                    {"name": "test-counter", "arguments": {"label": "a"}},
                    {"name": "test-counter", "arguments": {"label": "b"}},
                ]
            },
            {"tool_calls": [{"name": "test-counter", "arguments": {"label": "c"}}]},
            {"content": "all recorded"},
        ]
    )
    run = _parked(s.post())
    first, second = Approval.objects.filter(run=run).order_by("invocation__position")

    approval_decide(approval_id=first.pk, user=approver, decision="approve", channel="page", for_rest_of_run=True)
    second.refresh_from_db()
    assert second.status == "approved" and second.channel == "run_grant" and second.decided_by == approver
    run = _resume(run, enqueued)

    assert run.status == "completed"
    assert [executions(label) for label in "abc"] == [1, 1, 1]
    later = Approval.objects.get(run=run, invocation__arguments={"label": "c"})
    assert later.status == "approved" and later.channel == "run_grant"
    assert later.arguments_hash == arguments_hash({"label": "c"})
    assert f"#{first.pk}" in later.reason
    assert ApprovalGrant.objects.get(run=run).tool_name == "test-counter"
    # A new run of the same conversation asks again.
    next_run = _parked(s.post("again"))
    assert Approval.objects.filter(run=next_run, status="pending").count() == 2


# Commits: a decision hands the run back to the broker in an on_commit callback, which the test follows.
@pytest.mark.django_db(transaction=True)
def test_no_execution_when_the_approved_arguments_do_not_match_their_hash(scenario, enqueued, executions, approver):
    s = scenario(steps=counter_steps("bound"))
    run = _parked(s.post())
    approval = Approval.objects.get(run=run)
    approval_decide(approval_id=approval.pk, user=approver, decision="approve", channel="api")
    # Someone changes the approved arguments behind the service's back.
    Approval.objects.filter(pk=approval.pk).update(arguments={"label": "smuggled"})

    run = _resume(run, enqueued)
    assert run.status == "completed"
    assert executions("bound") == 0 and executions("smuggled") == 0
    invocation = ToolInvocation.objects.get(run=run)
    assert invocation.status == "rejected" and "does not match" in invocation.result


def test_second_decision_is_a_conflict(scenario, enqueued, approver):
    s = scenario(steps=counter_steps("twice"))
    run = _parked(s.post())
    approval = Approval.objects.get(run=run)
    approval_decide(approval_id=approval.pk, user=approver, decision="reject", channel="api", reason="no")
    other = User.objects.create_user("other-approver")
    other.groups.add(*approver.groups.all())

    with pytest.raises(ApprovalConflict, match="already rejected"):
        approval_decide(approval_id=approval.pk, user=other, decision="approve", channel="api")
    approval.refresh_from_db()
    assert approval.status == "rejected" and approval.decided_by == approver
    assert RunEvent.objects.filter(run=run, type="approval.decided").count() == 1


# Commits: the approvers decide on threads of their own, each with its own connection.
@pytest.mark.django_db(transaction=True)
def test_concurrent_decisions_have_one_winner(scenario, enqueued, approver):
    s = scenario(steps=counter_steps("race"))
    run = _parked(s.post())
    approval = Approval.objects.get(run=run)
    deciders = [approver] + [User.objects.create_user(f"approver-{i}") for i in range(3)]
    for user in deciders[1:]:
        user.groups.add(*approver.groups.all())
    barrier = threading.Barrier(len(deciders))
    outcomes = []

    def decide(user, decision):
        try:
            barrier.wait()
            approval_decide(approval_id=approval.pk, user=user, decision=decision, channel="api", reason=user.username)
            outcomes.append(("won", user.username))
        except ApprovalConflict:
            outcomes.append(("conflict", user.username))
        finally:
            connection.close()

    threads = [
        threading.Thread(target=decide, args=(user, "approve" if i % 2 else "reject"))
        for i, user in enumerate(deciders)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    winners = [name for result, name in outcomes if result == "won"]
    assert len(outcomes) == len(deciders) and len(winners) == 1
    approval.refresh_from_db()
    assert approval.decided_by.username == winners[0]
    assert RunEvent.objects.filter(run=run, type="approval.decided").count() == 1
    assert RunEvent.objects.filter(run=run, type="run.queued").count() == 2  # posted, then resumed once
    assert enqueued.count(str(run.pk)) == 2


def test_decision_needs_the_permission_and_the_arguments_the_approver_saw(scenario, enqueued, owner, approver):
    s = scenario(steps=counter_steps("guarded"), owner=owner)
    run = _parked(s.post())
    approval = Approval.objects.get(run=run)

    with pytest.raises(ApprovalNotAllowed):
        approval_decide(approval_id=approval.pk, user=owner, decision="approve", channel="api")
    with pytest.raises(ApprovalConflict, match="not the ones you saw"):
        approval_decide(
            approval_id=approval.pk,
            user=approver,
            decision="approve",
            channel="api",
            expected_hash=arguments_hash({"label": "something else"}),
        )
    approval_decide(
        approval_id=approval.pk, user=approver, decision="approve", channel="api", expected_hash=approval.arguments_hash
    )
    approval.refresh_from_db()
    assert approval.status == "approved"


def test_rule_policy_asks_only_when_the_rule_matches(scenario, enqueued, executions, approver):
    s = scenario(steps=counter_steps("petty-cash", "wire-transfer"), rules={"test-counter": 'label.startswith("wire")'})
    run = _parked(s.post())

    small, big = ToolInvocation.objects.filter(run=run).order_by("position")
    assert small.status == "succeeded" and not Approval.objects.filter(invocation=small).exists()
    assert big.status == "awaiting_approval"
    assert "matched" in big.approval.request_reason
    assert executions("petty-cash") == 1 and executions("wire-transfer") == 0


def test_rule_that_cannot_be_evaluated_asks_for_approval(scenario, enqueued, executions):
    s = scenario(steps=counter_steps("x"), rules={"test-counter": "label > 100"})
    run = _parked(s.post())
    approval = Approval.objects.get(run=run)
    assert "could not be evaluated" in approval.request_reason and executions("x") == 0


def test_agent_override_never_runs_a_write_tool_without_asking(scenario, enqueued, executions):
    s = scenario(steps=counter_steps("trusted"), approval={"test-counter": "never"})
    run_advance(run_id=s.post().pk)
    assert Run.objects.get(conversation=s.conversation).status == "completed"
    assert executions("trusted") == 1 and not Approval.objects.exists()


def test_decision_while_the_step_still_runs_does_not_strand_the_run(scenario, enqueued, approver):
    """The person decides between the approval's creation and the parking of the run."""
    s = scenario(steps=counter_steps("quick"))
    run = _parked(s.post())
    approval = Approval.objects.get(run=run)
    # Put the run back to the moment before parking: running, held by a worker.
    Run.objects.filter(pk=run.pk).update(status="running", lease_owner="worker-x")
    enqueued.clear()

    approval_decide(approval_id=approval.pk, user=approver, decision="approve", channel="api")
    assert Run.objects.get(pk=run.pk).status == "running" and enqueued == []  # not parked: nothing to requeue
    assert run_park_for_approval(run_id=run.pk, owner="worker-x") is False  # so the worker takes the step again
    assert Run.objects.get(pk=run.pk).status == "running"
