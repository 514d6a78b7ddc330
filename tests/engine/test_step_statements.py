"""What a step costs the database, and the ledger promises its few statements keep.

Each commit of a step is one ledger batch (conversations.batch): on PostgreSQL one statement,
fenced by the run's lease. A model step is its read, the attempt's row and the attempt's
completion (with the rows of the tool calls the answer asks for, the first marked running when it
runs at once); a tool step each further call marked running and each outcome (the last one with
the step's tool messages); one read, after the claim, gives what the first step starts from, and
every other step starts from what the previous commit returned. These tests count the
statements, and check from another connection that what must be committed before the network is, and that a worker that
lost the lease writes nothing.
"""

import json
import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.models import AgentUsageDay
from agents.providers.openai_compatible import OpenAICompatibleProvider
from conversations.batch import ASYNCHRONOUS_COMMIT, Batch, messages_add, run_guard
from conversations.batch import _statement as batch_statement
from conversations.models import LLMCall, Message, Run, RunEvent, ToolInvocation
from engine import loop as loop_module
from engine.context import step_read
from engine.leases import run_claim
from engine.loop import run_advance
from notifications.models import Webhook, WebhookDelivery
from tests.support.llm import echo_script
from tests.support.runs import advance, endings_asked, start_run
from tools import executors
from tools.models import ToolDefinition

TWO_TOOL_STEPS = echo_script("one", "two", answer="done: {last_tool_result}")
ONE_TOOL_STEP = echo_script("one")


def _elsewhere(read):
    """read() on another thread, so on another database connection: it sees only what is committed."""
    seen = {}

    def target():
        try:
            seen["value"] = read()
        finally:
            connection.close()

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(30)
    return seen["value"]


def _events(run: Run) -> list[str]:
    return list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True))


def test_a_run_of_three_model_calls_takes_few_statements_and_one_transaction(scripted_agent):
    if connection.vendor != "postgresql":
        pytest.skip("a commit is one statement on PostgreSQL; SQLite takes the same statements one by one")
    run = start_run(scripted_agent(TWO_TOOL_STEPS, tools=["test-echo"]))

    with CaptureQueriesContext(connection) as queries:
        run_advance(run_id=run.pk)

    run.refresh_from_db()
    assert run.status == "completed"
    steps = 5  # three model calls, two tool steps
    statements = [query["sql"] for query in queries]
    # A step is a few statements (it was some twenty), none in a transaction: with no webhook
    # listening, even the ending is one statement, with the check for a waiting run folded in.
    assert len(statements) <= 5 * steps, statements
    assert "BEGIN" not in statements and "COMMIT" not in statements
    # The run and its messages are read once, after the claim: every later step starts from what
    # the previous step's commit returned and appended.
    assert 'UPDATE "conversations_run"' in statements[0]
    reads = [sql for sql in statements if 'JOIN "conversations_message" m' in sql]
    assert reads == [statements[1]] and reads[0].startswith("SELECT")
    assert not [
        sql for sql in statements if "conversations_toolinvocation" not in sql and "tools_tooldefinition" in sql
    ]
    # No read for earlier attempts: the attempt's own row statement closes what a dead worker left.
    assert not [sql for sql in statements if sql.startswith("SELECT") and "conversations_llmcall" in sql]
    # The tool calls' rows are written with the answer that asks for them, not on their own.
    assert not [sql for sql in statements if sql.startswith('INSERT INTO "conversations_toolinvocation"')]
    assert ToolInvocation.objects.filter(run=run, status="succeeded").count() == 2
    # The final answer's own statement ends the run, its guard checking that no webhook hears it.
    hooks = [sql for sql in statements if '"conversations_webhook" w' in sql]
    assert hooks == [statements[-1]] and hooks[0].startswith("WITH") and "conversations_llmcall" in hooks[0], hooks
    ending = hooks[0].split(" WHERE ")[0]
    assert '"status" = ' in ending and '"lease_expires_at" = NULL' in ending, ending
    assert "run.completed" in _events(run)[-1:]
    # The claim, its read, the version's snapshot, two per model call (the last answer's ends the
    # run) and one per tool step, its outcome with its tool message: the answer asking for the
    # call marked it started.
    assert len(statements) == 2 + 1 + 2 * 3 + 2, statements
    # Each call's mark is made by the statement of the answer that asks for it, whose guard checks
    # that no cancel came and that the call is new; the tool step makes none of its own.
    marks = [sql for sql in statements if 'INSERT INTO "conversations_toolinvocation"' in sql]
    assert len(marks) == 2 and all('NOT "cancel_requested"' in sql for sql in marks)
    assert all("tools_tooldefinition" in sql for sql in marks)
    # Each tool step's outcome is one statement, with the step's tool message, before the next
    # call's attempt.
    attempts = [sql for sql in statements if 'INSERT INTO "conversations_llmcall"' in sql]
    assert len(attempts) == 3
    outcomes = [sql for sql in statements if 'UPDATE "conversations_toolinvocation"' in sql and "llmcall" not in sql]
    assert len(outcomes) == 2 and all('INSERT INTO "conversations_message"' in sql for sql in outcomes)
    assert [statements.index(sql) + 1 for sql in outcomes] == [statements.index(sql) for sql in attempts[1:]]
    # What nothing outside the database waits on commits asynchronously: the claim, each answer
    # (a read tool's mark too: the call may run again) and each tool step's outcome. Each attempt
    # (before its request) and the final answer, which ends the run, wait for their flush, and
    # with it for every commit before.
    asynchronous = [index for index, sql in enumerate(statements) if ASYNCHRONOUS_COMMIT in sql]
    assert asynchronous == [0, 4, 5, 7, 8], statements
    assert not [sql for sql in [*attempts, statements[-1]] if ASYNCHRONOUS_COMMIT in sql]


def _touch(run: Run) -> Batch:
    batch = Batch()
    sql = 'UPDATE "conversations_run" SET "iterations" = "iterations" WHERE "id" = %s'
    batch.add("touched", sql, [run.pk], ("id",))
    return batch


def _synchronous_commit() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('synchronous_commit')")
        return cursor.fetchone()[0]


def test_an_asynchronous_commit_is_its_own_statement_s_and_never_a_caller_s(scripted_agent):
    """The setting is local to the statement's transaction: the pooled connection keeps
    synchronous commits for whatever it runs next; and a batch inside a caller's transaction
    never makes that transaction asynchronous."""
    if connection.vendor != "postgresql":
        pytest.skip("asynchronous commit is PostgreSQL's")
    run = start_run(scripted_agent(ONE_TOOL_STEP, tools=["test-echo"]))

    with CaptureQueriesContext(connection) as queries:
        assert _touch(run).execute(asynchronous_commit=True) == {"touched": {"id": run.pk}}
    assert ASYNCHRONOUS_COMMIT in queries[0]["sql"]
    assert _synchronous_commit() == "on"

    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        _touch(run).execute(asynchronous_commit=True)
        assert _synchronous_commit() == "on"
    assert not [query for query in queries if ASYNCHRONOUS_COMMIT in query["sql"]]

    # What the statement does to its transaction, seen from inside one.
    batch = _touch(run)
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(batch_statement(batch._shape(), True), batch._params())
            assert cursor.fetchone()[0] == run.pk
        assert _synchronous_commit() == "off"
    assert _synchronous_commit() == "on"


def test_with_asynchronous_commits_off_every_step_waits_for_its_flush(scripted_agent, settings):
    if connection.vendor != "postgresql":
        pytest.skip("asynchronous commit is PostgreSQL's")
    settings.AGENTRY_DB_ASYNC_COMMIT = False
    run = start_run(scripted_agent(TWO_TOOL_STEPS, tools=["test-echo"]))

    with CaptureQueriesContext(connection) as queries:
        run_advance(run_id=run.pk)

    assert Run.objects.get(pk=run.pk).status == "completed"
    assert not [query for query in queries if ASYNCHRONOUS_COMMIT in query["sql"]]


def test_a_listening_webhook_gets_its_delivery_in_the_ending_s_transaction(scripted_agent):
    if connection.vendor != "postgresql":
        pytest.skip("a commit is one statement on PostgreSQL; SQLite takes the same statements one by one")
    agent = scripted_agent(TWO_TOOL_STEPS, tools=["test-echo"])
    Webhook.objects.create(agent=agent, url="https://hooks.example.com/agentry", secret="s" * 32)
    run = start_run(agent)

    with CaptureQueriesContext(connection) as queries:
        run_advance(run_id=run.pk)

    statements = [query["sql"] for query in queries]
    assert statements.count("COMMIT") == 1
    ending = statements[statements.index("BEGIN") :]
    assert any("conversations_webhookdelivery" in sql for sql in ending)
    # Read with the final answer, not again at the ending.
    assert not [sql for sql in statements if sql.startswith("SELECT") and '"conversations_webhook" w' in sql]
    delivery = WebhookDelivery.objects.get(run_event__run=run)
    assert delivery.event_type == "run.completed"


def test_what_the_answer_read_of_the_webhooks_only_decides_whether_the_ending_looks(scripted_agent, monkeypatch):
    """The final answer's commit reads whether a webhook listens; the ending then writes its
    deliveries in its transaction, to the webhooks active then: one switched off in between gets
    nothing. (One saved in between misses this ending, as one saved while it is written does.)"""
    agent = scripted_agent(ONE_TOOL_STEP, tools=["test-echo"])
    kept = Webhook.objects.create(agent=agent, url="https://hooks.example.com/kept", secret="s" * 32)
    dropped = Webhook.objects.create(agent=agent, url="https://hooks.example.com/dropped", secret="s" * 32)
    run = start_run(agent)
    finish = loop_module.run_finish

    def in_between(**ending):
        assert ending["listening"] is True
        Webhook.objects.filter(pk=dropped.pk).update(is_active=False)
        return finish(**ending)

    monkeypatch.setattr(loop_module, "run_finish", in_between)
    advance(run)

    delivered = WebhookDelivery.objects.filter(run_event__run=run, event_type="run.completed")
    assert list(delivered.values_list("webhook_id", flat=True)) == [kept.pk]


def test_a_run_with_no_webhook_ends_in_its_final_answer_s_statement(scripted_agent, monkeypatch):
    agent = scripted_agent(ONE_TOOL_STEP, tools=["test-echo"])
    run = start_run(agent)
    seen = endings_asked(monkeypatch)

    advance(run)

    assert Run.objects.get(pk=run.pk).status == "completed" and seen == []
    assert not WebhookDelivery.objects.filter(run_event__run=run).exists()


def test_a_tool_switched_off_after_the_snapshot_is_refused_by_the_statement_that_marks_it(scripted_agent):
    agent = scripted_agent(TWO_TOOL_STEPS, tools=["test-echo"])
    run = start_run(agent)
    ToolDefinition.objects.filter(name="test-echo").update(is_active=False)

    advance(run)

    invocations = ToolInvocation.objects.filter(run=run).order_by("id")
    assert [inv.status for inv in invocations] == ["error", "error"]
    assert all("switched off by an operator" in inv.result for inv in invocations)


def test_the_events_are_those_of_before_numbered_without_gaps(scripted_agent):
    run = advance(start_run(scripted_agent(TWO_TOOL_STEPS, tools=["test-echo"])))

    model_step = ["llm_call.started", "llm_call.completed"]
    tool_step = ["tool.started", "tool.completed"]
    assert _events(run) == [
        "run.queued",
        "run.running",
        *model_step,
        *tool_step,
        *model_step,
        *tool_step,
        *model_step,
        "run.completed",
    ]
    seqs = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1)) and run.event_seq == len(seqs)
    started = RunEvent.objects.filter(run=run, type="llm_call.started").order_by("seq")
    calls = LLMCall.objects.filter(run=run).order_by("iteration")
    assert [(e.payload["llm_call_id"], e.payload["attempt"]) for e in started] == [(c.pk, 1) for c in calls]
    orders = Message.objects.filter(conversation=run.conversation).order_by("order").values_list("order", flat=True)
    assert list(orders) == list(range(1, 7))


def test_the_attempt_is_committed_before_its_request(scripted_agent, monkeypatch):
    run = start_run(scripted_agent(ONE_TOOL_STEP, tools=["test-echo"]))
    seen = []
    send = OpenAICompatibleProvider.send

    def spying(self, **kwargs):
        seen.append(
            _elsewhere(
                lambda: (
                    list(LLMCall.objects.filter(run_id=run.pk).order_by("iteration").values_list("status", flat=True)),
                    _events(run)[-1],
                )
            )
        )
        return send(self, **kwargs)

    monkeypatch.setattr(OpenAICompatibleProvider, "send", spying)
    assert advance(run).status == "completed"
    assert seen == [(["started"], "llm_call.started"), (["succeeded", "started"], "llm_call.started")]


def test_a_tool_call_is_committed_running_before_it_starts(scripted_agent, monkeypatch):
    run = start_run(scripted_agent(ONE_TOOL_STEP, tools=["test-echo"]))
    seen = []

    def spying(**kwargs):
        seen.append(_elsewhere(lambda: (ToolInvocation.objects.get(run_id=run.pk).status, _events(run)[-1])))
        return executors.execute_tool(**kwargs)

    monkeypatch.setattr("engine.tool_step.execute_tool", spying)
    assert advance(run).status == "completed"
    assert seen == [("running", "tool.started")]


def _steal_lease(run: Run) -> None:
    Run.objects.filter(pk=run.pk).update(
        lease_owner="another-worker", lease_expires_at=timezone.now() + timedelta(minutes=1)
    )


def test_a_worker_that_lost_the_lease_records_nothing_of_the_answer(scripted_agent, monkeypatch):
    agent = scripted_agent(ONE_TOOL_STEP, tools=["test-echo"])
    run = start_run(agent)
    send = OpenAICompatibleProvider.send

    def taken_meanwhile(self, **kwargs):
        response = send(self, **kwargs)
        _steal_lease(run)
        return response

    monkeypatch.setattr(OpenAICompatibleProvider, "send", taken_meanwhile)
    run = advance(run)

    # The completion (call row, totals, daily usage, message, event) is one fenced commit: none of it.
    assert list(LLMCall.objects.filter(run=run).values_list("status", flat=True)) == ["started"]
    assert (run.status, run.iterations, run.total_tokens) == ("running", 0, 0)
    assert not Message.objects.filter(run=run, role="assistant").exists()
    assert not AgentUsageDay.objects.filter(agent=agent).exists()
    assert _events(run)[-1] == "llm_call.started"


def test_a_worker_that_lost_the_lease_records_nothing_of_the_tool_call(scripted_agent, monkeypatch):
    run = start_run(scripted_agent(ONE_TOOL_STEP, tools=["test-echo"]))

    def taken_meanwhile(**kwargs):
        outcome = executors.execute_tool(**kwargs)
        _steal_lease(run)
        return outcome

    monkeypatch.setattr("engine.tool_step.execute_tool", taken_meanwhile)
    run = advance(run)

    # The call's outcome and the step's tool message commit together, fenced: neither is there.
    assert ToolInvocation.objects.get(run=run).status == "running"
    assert not Message.objects.filter(run=run, role="tool").exists()
    assert _events(run)[-1] == "tool.started"


def test_a_final_answer_closes_what_a_dead_worker_left_open(scripted_agent):
    run = start_run(scripted_agent({"scenarios": [{"match": ".", "steps": [{"content": "hi"}]}]}))
    # A summary attempt a dead worker left started, for an iteration no later step takes again.
    model = run.agent.model_config
    left = LLMCall.objects.create(
        run=run,
        iteration=7,
        attempt=1,
        purpose="summary",
        model_config=model,
        provider=model.provider,
        model_name=model.model,
        request={},
    )

    run = advance(run)

    assert (run.status, run.stop_reason) == ("completed", "final_answer")
    left.refresh_from_db()
    assert left.status == "failed" and "the run was completed" in left.error and left.finished_at


def test_a_batch_run_statement_by_statement_writes_the_same(scripted_agent):
    """The one-by-one form (SQLite's) on this database: the guard first, values carried over."""
    run = start_run(scripted_agent(ONE_TOOL_STEP, tools=["test-echo"]))
    Run.objects.filter(pk=run.pk).update(status="running", lease_owner="w1", lease_expires_at=timezone.now())

    def batch(owner: str) -> tuple[Batch, list[Message]]:
        made = Batch()
        run_guard(made, run_id=run.pk, lease_owner=owner, event=False)
        rows = messages_add(
            made,
            conversation_id=run.conversation_id,
            run_id=run.pk,
            messages=[{"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}],
        )
        return made, rows

    lost, _ = batch("w2")
    with transaction.atomic():
        assert lost._one_by_one() is None
    held, rows = batch("w1")
    with transaction.atomic():
        results = held._one_by_one()
        held._finish(results)
    assert [(row.order, row.content) for row in rows] == [(2, "a"), (3, "b")]
    stored = Message.objects.filter(run=run).order_by("order").values_list("pk", "order", "content")
    assert list(stored)[1:] == [(row.pk, row.order, row.content) for row in rows]
    assert Run.objects.get(pk=run.pk).lease_expires_at > timezone.now()


def _index_conditions(plan: dict) -> list[tuple[str, str]]:
    """(index, condition) of every index scan in an EXPLAIN (FORMAT JSON) plan."""
    found = [(plan["Index Name"], plan.get("Index Cond", ""))] if "Index Name" in plan else []
    for child in plan.get("Plans", []):
        found += _index_conditions(child)
    return found


def _explained(sql: str, params=None) -> list[tuple[str, str]]:
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        plan = cursor.fetchone()[0]
    return _index_conditions((plan if isinstance(plan, list) else json.loads(plan))[0]["Plan"])


def test_a_steps_statements_reach_their_rows_by_key_whatever_the_statistics_say(scripted_agent):
    if connection.vendor != "postgresql":
        pytest.skip("query plans are PostgreSQL's")
    agent = scripted_agent(ONE_TOOL_STEP, tools=["test-echo"])
    runs = [advance(start_run(agent)) for _ in range(3)] + [start_run(agent) for _ in range(20)]
    with connection.cursor() as cursor:
        # As in a deployment where most runs have ended: the statistics say running runs are rare.
        cursor.execute(f'ANALYZE "{Run._meta.db_table}", "{Message._meta.db_table}"')
    Run.objects.filter(pk__in=[run.pk for run in runs[3:]]).update(status="running", lease_owner="w")
    run = runs[-1]
    batch = Batch()
    run_guard(batch, run_id=run.pk, lease_owner="w")
    guard = batch._writes[0]
    with connection.cursor() as cursor:
        # A few rows are read whole; in a deployment's tables an index is taken, and which one
        # is the question.
        cursor.execute("SET enable_seqscan = off")
    try:
        # As sent for a batch of one event: the bump's `{events}` is the batch's count of them.
        scans = _explained(guard.sql.replace("{events}", "1"), guard.params)
        with CaptureQueriesContext(connection) as queries:
            step_read(run_id=run.pk)
        [read] = [query["sql"] for query in queries if "conversations_message" in query["sql"]]
        message_scans = [(index, cond) for index, cond in _explained(read) if index.startswith("message_order")]
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET enable_seqscan")
    # Whichever index the planner takes, the run's id is in its condition: a step's statement
    # must not walk every running run's entry to find its own.
    assert scans and all('"id" =' in condition or "(id =" in condition for _index, condition in scans), scans

    # The conversation's messages, not every message after the summary's order.
    assert message_scans and all("conversation_id" in cond for _index, cond in message_scans), message_scans


def test_a_claim_is_one_statement_and_a_second_worker_claims_nothing(scripted_agent):
    run = start_run(scripted_agent(ONE_TOOL_STEP, tools=["test-echo"]))
    events = RunEvent.objects.filter(run=run).count()

    with CaptureQueriesContext(connection) as queries:
        assert run_claim(run_id=run.pk, owner="w1")

    if connection.vendor == "postgresql":
        assert len(queries) == 1, [query["sql"] for query in queries]
    claimed = Run.objects.get(pk=run.pk)
    assert (claimed.status, claimed.lease_owner, claimed.claims) == ("running", "w1", 1)
    assert RunEvent.objects.filter(run=run).count() == events + 1

    # Held by another worker: nothing is claimed or written.
    assert not run_claim(run_id=run.pk, owner="w2")
    assert Run.objects.get(pk=run.pk).lease_owner == "w1"
    assert RunEvent.objects.filter(run=run).count() == events + 1
