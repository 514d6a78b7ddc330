"""The commit that records a run's final answer ends the run (engine.runs.AnswerEnding).

The usual ending (no cancel accepted, no approval pending) was a statement of its own after the
answer's. It is now made by the answer's statement when nothing can make it different: these
tests hold what must not change with it. A webhook that listens, a cancel accepted during the
model call or an output rule still get the ending they got before; the ending is on disk before
anything follows it; the attempts a dead worker left open are closed by it, and the answer's own
call is recorded completed.
"""

from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.models import GuardrailRule
from conversations.batch import ASYNCHRONOUS_COMMIT
from conversations.models import LLMCall, Run, RunEvent
from engine import loop as loop_module
from engine import runs as runs_module
from engine.loop import run_advance
from notifications.models import Webhook, WebhookDelivery
from tests.support.runs import advance, endings_asked, start_run

ANSWER = {"scenarios": [{"match": ".", "steps": [{"content": "done"}]}]}


def _events(run: Run) -> list[str]:
    return list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True))


def test_the_final_answer_s_synchronous_statement_ends_the_run(scripted_agent, monkeypatch):
    run = start_run(scripted_agent(ANSWER))
    finishes = endings_asked(monkeypatch)

    with CaptureQueriesContext(connection) as queries:
        run_advance(run_id=run.pk)

    run.refresh_from_db()
    assert (run.status, run.stop_reason, run.lease_owner, run.lease_expires_at) == (
        "completed",
        "final_answer",
        "",
        None,
    )
    assert run.finished_at is not None and run.iterations == 1 and finishes == []
    assert _events(run) == ["run.queued", "run.running", "llm_call.started", "llm_call.completed", "run.completed"]
    assert [m.content for m in run.messages.order_by("order")][-1] == "done"
    assert LLMCall.objects.get(run=run).status == "succeeded"
    if connection.vendor != "postgresql":
        return  # SQLite takes the same statements one by one
    statements = [query["sql"] for query in queries]
    # The claim, its read, the snapshot, the attempt, the answer with the ending: flushed, as the
    # ending was.
    assert len(statements) == 5 and '"conversations_message"' in statements[-1]
    assert ASYNCHRONOUS_COMMIT not in statements[-1]


def test_attempts_a_dead_worker_left_open_are_closed_by_the_ending_not_the_answer(scripted_agent):
    """One statement sees both the answer's call and the one a dead worker left `started`: the
    ending closes that one as interrupted, and leaves the answer's to be recorded completed."""
    agent = scripted_agent(ANSWER)
    run = start_run(agent)
    left = LLMCall.objects.create(
        run=run,
        iteration=7,
        purpose="summary",
        attempt=1,
        provider="openai",
        model_name="m",
        request={},
        model_config=agent.model_config,
    )

    advance(run)

    left.refresh_from_db()
    answer = LLMCall.objects.get(run=run, purpose="step")
    assert Run.objects.get(pk=run.pk).status == "completed"
    assert (answer.status, answer.error) == ("succeeded", "")
    assert left.status == "failed" and left.error == "interrupted: the run was completed before the call completed"


def test_a_webhook_saved_during_the_final_model_call_hears_the_ending(scripted_agent, monkeypatch):
    """The guard of the answer's commit finds the webhook: the answer is recorded again without
    the ending, and the usual ending writes the delivery in its transaction."""
    agent = scripted_agent(ANSWER)
    run = start_run(agent)
    finishes = endings_asked(monkeypatch)
    planned = runs_module.AnswerEnding.guard

    def saved_meanwhile(self, batch, **guard):
        Webhook.objects.get_or_create(agent=agent, url="https://hooks.example.com/late", secret="s" * 32)
        return planned(self, batch, **guard)

    monkeypatch.setattr(runs_module.AnswerEnding, "guard", saved_meanwhile)
    advance(run)

    assert Run.objects.get(pk=run.pk).status == "completed" and len(finishes) == 1
    assert finishes[0]["listening"] is True
    delivered = WebhookDelivery.objects.filter(run_event__run=run, event_type="run.completed")
    assert delivered.count() == 1
    assert _events(run) == ["run.queued", "run.running", "llm_call.started", "llm_call.completed", "run.completed"]


def test_a_cancel_accepted_during_the_final_model_call_still_ends_the_run_cancelled(scripted_agent, monkeypatch):
    run = start_run(scripted_agent(ANSWER))
    planned = runs_module.AnswerEnding.guard

    def cancelled_meanwhile(self, batch, **guard):
        Run.objects.filter(pk=run.pk).update(cancel_requested=True)
        return planned(self, batch, **guard)

    monkeypatch.setattr(runs_module.AnswerEnding, "guard", cancelled_meanwhile)
    advance(run)

    run.refresh_from_db()
    assert (run.status, run.stop_reason) == ("cancelled", "cancelled")
    assert LLMCall.objects.get(run=run).status == "succeeded"  # the late answer stays in the ledger
    assert _events(run)[-2:] == ["llm_call.completed", "run.cancelled"]


def test_an_answer_an_output_rule_blocks_ends_the_run_after_the_review(scripted_agent, monkeypatch):
    """The loop enforces an output rule's outcome after the answer's commit: that commit leaves
    the ending to it."""
    agent = scripted_agent({"scenarios": [{"match": ".", "steps": [{"content": "请拨打13812345678"}]}]})
    GuardrailRule.objects.create(agent=agent, side="output", kind="pii_phone", action="block")
    run = start_run(agent)
    finishes = endings_asked(monkeypatch)

    advance(run)

    run.refresh_from_db()
    assert (run.status, run.stop_reason) == ("completed", "guardrail_blocked")
    assert [ending["stop_reason"] for ending in finishes] == ["guardrail_blocked"]
    assert _events(run)[-3:] == ["llm_call.completed", "guardrail.triggered", "run.completed"]


def test_every_ending_goes_through_run_finish_once_even_one_the_answer_s_commit_made(scripted_agent, monkeypatch):
    """One door for a run's end (engine.runs.run_finish): the answer's commit made the change,
    and what follows an ending is left to run_finish, as for every other ending."""
    run = start_run(scripted_agent(ANSWER))
    calls = []
    finish = loop_module.run_finish

    def counted(**ending):
        calls.append(ending)
        return finish(**ending)

    monkeypatch.setattr(loop_module, "run_finish", counted)
    advance(run)

    assert Run.objects.get(pk=run.pk).status == "completed"
    assert [(ending["stop_reason"], ending["made"] is not None) for ending in calls] == [("final_answer", True)]
    assert _events(run)[-2:] == ["llm_call.completed", "run.completed"]
