"""A tool call that runs at once is marked started by the statement of the answer asking for it.

The ledger's promise is unchanged (a side-effecting call is on disk as running before it starts);
the tool step just no longer makes a statement of its own for it. These tests hold what must not
change with it: a side-effecting mark waits for its flush, a cancel accepted during the model
call keeps the call from starting, a call id the run used before is not marked, and a time slice
that ends after the answer still runs the call it started.
"""

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from conversations.batch import ASYNCHRONOUS_COMMIT, Batch, event_add, run_guard
from conversations.events import EventType
from conversations.models import LLMCall, Run, RunEvent, ToolInvocation
from engine.loop import run_advance
from tests.support.runs import advance, start_run

pytestmark = pytest.mark.django_db


def script(*steps):
    return {"scenarios": [{"match": ".", "steps": list(steps)}]}


# test-counter is a write: an agent lets it run without asking a person.
UNASKED = {"tools": ["test-counter"], "approval": {"test-counter": "never"}}


def counter(label: str, call_id: str | None = None) -> dict:
    call = {"name": "test-counter", "arguments": {"label": label}}
    return {"tool_calls": [{**call, "id": call_id} if call_id else call]}


def _events(run: Run) -> list[str]:
    return list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True))


# Commits: inside a test's transaction no batch commits asynchronously, so the check would be empty.
@pytest.mark.django_db(transaction=True)
def test_a_side_effecting_call_is_marked_by_its_answer_s_synchronous_commit(scripted_agent, executions):
    if connection.vendor != "postgresql":
        pytest.skip("a commit is one statement on PostgreSQL")
    run = start_run(scripted_agent(script(counter("once"), {"content": "done"}), **UNASKED))

    with CaptureQueriesContext(connection) as queries:
        run_advance(run_id=run.pk)

    run.refresh_from_db()
    assert run.status == "completed" and executions("once") == 1
    statements = [query["sql"] for query in queries]
    [answer] = [sql for sql in statements if 'INSERT INTO "conversations_toolinvocation"' in sql]
    assert 'NOT "cancel_requested"' in answer and ASYNCHRONOUS_COMMIT not in answer
    # No statement of the tool step marks the call (sets its start).
    marks = [sql for sql in statements if 'UPDATE "conversations_toolinvocation" SET "status"' in sql]
    assert marks and not [sql for sql in marks if '"started_at" = ' in sql]
    invocation = ToolInvocation.objects.get(run=run)
    assert (invocation.status, invocation.started_at is not None) == ("succeeded", True)
    started = RunEvent.objects.get(run=run, type=EventType.TOOL_STARTED)
    named = {"tool_invocation_id": invocation.pk, "tool": "test-counter", "arguments": {"label": "once"}}
    assert started.payload == named
    assert _events(run)[2:6] == ["llm_call.started", "llm_call.completed", "tool.started", "tool.completed"]


def test_a_call_that_waits_for_a_person_is_not_marked_by_the_answer(scripted_agent, executions):
    run = advance(start_run(scripted_agent(script(counter("asked"), {"content": "done"}), tools=["test-counter"])))

    assert run.status == "awaiting_approval" and executions("asked") == 0
    invocation = ToolInvocation.objects.get(run=run)
    assert (invocation.status, invocation.started_at) == ("awaiting_approval", None)
    assert "tool.started" not in _events(run)


def test_a_call_id_the_run_used_before_is_not_marked_by_the_answer(scripted_agent, executions):
    """A model that gives every call the same id: the second answer's guard finds the id taken,
    so the answer is recorded again without the mark, and the call is what it was before."""
    agent = scripted_agent(script(counter("first", "same"), counter("second", "same"), {"content": "done"}), **UNASKED)
    run = advance(start_run(agent))

    assert run.status == "completed" and LLMCall.objects.filter(run=run, status="succeeded").count() == 3
    assert list(ToolInvocation.objects.filter(run=run).values_list("tool_call_id", "status")) == [("same", "succeeded")]
    assert (executions("first"), executions("second")) == (1, 0)
    assert _events(run).count("tool.started") == 1
    seqs = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))


def test_a_slice_that_ends_after_an_answer_runs_the_call_it_started(scripted_agent, settings, executions):
    """Requeued between the answer and its tool step, the call would be found running by the next
    slice, as after a crash: a side-effecting one would be reported interrupted, never run."""
    settings.AGENTRY_TASK_SLICE_SECONDS = 0
    run = start_run(scripted_agent(script(counter("sliced"), {"content": "done"}), **UNASKED))

    run = advance(run)

    assert run.status == "queued"
    assert ToolInvocation.objects.get(run=run).status == "succeeded" and executions("sliced") == 1
    assert _events(run)[-3:] == ["tool.started", "tool.completed", "run.requeued"]
    while run.status == "queued":
        run = advance(run)
    assert run.status == "completed" and executions("sliced") == 1


def _running(run: Run) -> Run:
    Run.objects.filter(pk=run.pk).update(status="running", lease_owner="w1", lease_expires_at=timezone.now())
    return Run.objects.get(pk=run.pk)


def _two_events(run: Run) -> Batch:
    batch = Batch()
    run_guard(batch, run_id=run.pk, lease_owner="w1")
    event_add(batch, run_id=run.pk, type=EventType.LLM_CALL_COMPLETED, payload={"n": 1})
    event_add(batch, run_id=run.pk, type=EventType.TOOL_STARTED, payload={"n": 2})
    return batch


@pytest.mark.parametrize("form", ["statement", "one by one"])
def test_a_batch_numbers_its_events_in_the_order_they_were_added(scripted_agent, form):
    run = _running(start_run(scripted_agent(script({"content": "hi"}))))
    before = run.event_seq
    batch = _two_events(run)

    if form == "statement":
        batch.execute()
    else:  # SQLite's form, on this database
        with transaction.atomic():
            batch._finish(batch._one_by_one())

    added = RunEvent.objects.filter(run=run, seq__gt=before).order_by("seq")
    assert [(event.seq, event.type, event.payload) for event in added] == [
        (before + 1, EventType.LLM_CALL_COMPLETED, {"n": 1}),
        (before + 2, EventType.TOOL_STARTED, {"n": 2}),
    ]
    assert Run.objects.get(pk=run.pk).event_seq == before + 2


def test_a_guard_that_numbers_one_event_refuses_a_second(scripted_agent):
    run = start_run(scripted_agent(script({"content": "hi"})))
    batch = Batch()
    # A guard of its own that bumps the sequence by one (as a run's transition does).
    batch.add("run", 'UPDATE "conversations_run" SET "event_seq" = "event_seq" + 1 WHERE "id" = %s', [run.pk], ("id",))
    event_add(batch, run_id=run.pk, type=EventType.RUN_REQUEUED, payload={})

    with pytest.raises(ValueError, match="numbers one event only"):
        event_add(batch, run_id=run.pk, type=EventType.RUN_REQUEUED, payload={})
