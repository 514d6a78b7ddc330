"""Every memory extraction ends, and what it costs and reads is what an operator means: a call
its worker left started is closed by the sweeper and the extraction made again (a bounded number
of times); a model config that can keep to a schema is asked for one; the daily budget stops
extraction; the platform's own stop message is never fed as the model's turn."""

import json
import logging
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from conversations.models import LLMCall, Message, Run
from conversations.services import conversation_create
from engine.memory import EXTRACTION_SCHEMA, memory_extract
from engine.model_call import INTERRUPTED
from engine.sweeper import runs_sweep
from engine.tasks import memory_extract_task
from memory.models import Memory
from tests.engine.test_memory_extraction import _completed, _script, _statements
from tests.engine.test_memory_recall import extractions  # noqa: F401 (a fixture)
from tests.support.factories import make_user
from tests.support.llm import assert_totals_match_calls
from tests.support.runs import advance, start_run

ADD_CITY = {"changes": [{"action": "add", "kind": "fact", "statement": "住在成都"}]}


def _abandoned(run, *, purpose: str = "memory", attempt: int = 1, iteration=None, age_seconds=None) -> LLMCall:
    """A call as a worker SIGKILLed mid-request leaves it: started, `age_seconds` ago (by
    default: long past what a call made outside a lease may take)."""
    if age_seconds is None:
        age_seconds = 2 * settings.AGENTRY_MODEL_CALL_MAX_SECONDS + 1
    model = run.agent.model_config
    call = LLMCall.objects.create(
        run=run,
        iteration=run.iterations if iteration is None else iteration,
        attempt=attempt,
        purpose=purpose,
        model_config=model,
        provider=model.provider,
        model_name=model.model,
        request={"messages": []},
    )
    LLMCall.objects.filter(pk=call.pk).update(started_at=timezone.now() - timedelta(seconds=age_seconds))
    return call


def test_an_extraction_cut_off_by_its_worker_is_closed_and_made_again(
    scripted_agent, fake_llm, extractions, django_capture_on_commit_callbacks
):
    agent, run, _ = _completed(scripted_agent, _script(ADD_CITY), "我在成都")
    cut_off = _abandoned(run)
    # A delivery of the task meanwhile sees an extraction under way and makes no second call.
    assert memory_extract(run_id=run.pk) is None
    assert LLMCall.objects.filter(run=run, purpose="memory").count() == 1

    with django_capture_on_commit_callbacks(execute=True):
        summary = runs_sweep()

    assert summary["calls_interrupted"] == 1
    cut_off.refresh_from_db()
    assert (cut_off.status, cut_off.error) == ("failed", INTERRUPTED)
    assert cut_off.finished_at is not None
    # Sent again, and made this time: the memory is written.
    assert extractions == [str(run.pk), str(run.pk)]
    memory_extract_task(str(run.pk))
    assert _statements() == ["住在成都"]
    calls = list(LLMCall.objects.filter(run=run, purpose="memory").order_by("attempt"))
    assert [(c.attempt, c.status) for c in calls] == [(1, "failed"), (2, "succeeded")]
    assert memory_extract(run_id=run.pk) is None  # made already
    assert LLMCall.objects.filter(run=run, purpose="memory").count() == 2
    assert_totals_match_calls(run)


def test_an_extraction_cut_off_three_times_is_given_up_with_a_reason(
    scripted_agent, fake_llm, extractions, django_capture_on_commit_callbacks
):
    agent, run, _ = _completed(scripted_agent, _script(ADD_CITY), "我在成都")
    for attempt in (1, 2):
        LLMCall.objects.filter(pk=_abandoned(run, attempt=attempt).pk).update(status="failed", error=INTERRUPTED)
    last = _abandoned(run, attempt=3)

    with django_capture_on_commit_callbacks(execute=True):
        runs_sweep()

    last.refresh_from_db()
    assert last.status == "failed"
    assert last.error == f"{INTERRUPTED}; memory extraction given up (cut off 3 times)"
    assert extractions == [str(run.pk)]  # not sent again
    assert memory_extract(run_id=run.pk) is None
    assert LLMCall.objects.filter(run=run, purpose="memory").count() == 3
    assert not Memory.objects.exists()


def test_no_model_call_stays_started_once_its_worker_is_gone(scripted_agent, fake_llm, extractions):
    agent = scripted_agent({"scenarios": [{"match": ".", "steps": [{"content": "好的"}]}]})
    ended = advance(start_run(agent, "你好"))
    # A step's and a summary's attempt of a run that ended, a lease's length ago: their worker is gone.
    lease = settings.AGENTRY_RUN_LEASE_SECONDS + 1
    step = _abandoned(ended, purpose="step", iteration=ended.iterations + 1, age_seconds=lease)
    summary = _abandoned(ended, purpose="summary", age_seconds=lease)
    # A judge's call made a moment ago may still be answered; one past its time is not.
    judging = _abandoned(ended, purpose="judge", age_seconds=1)
    judged = _abandoned(ended, purpose="judge", attempt=2)
    # A step of a run a live worker holds is left to it.
    held = start_run(agent, "还在跑")
    Run.objects.filter(pk=held.pk).update(
        status="running", lease_owner="host:1:live", lease_expires_at=timezone.now() + timedelta(minutes=1)
    )
    in_flight = _abandoned(held, purpose="step", iteration=1, age_seconds=lease)

    assert runs_sweep()["calls_interrupted"] == 3

    statuses = dict(
        LLMCall.objects.filter(pk__in=[step.pk, summary.pk, judging.pk, judged.pk, in_flight.pk]).values_list(
            "pk", "status"
        )
    )
    assert statuses == {
        step.pk: "failed",
        summary.pk: "failed",
        judging.pk: "started",
        judged.pk: "failed",
        in_flight.pk: "started",
    }
    assert LLMCall.objects.get(pk=step.pk).error.startswith("interrupted")


def test_a_model_that_can_keep_to_a_schema_is_asked_for_the_extractions(scripted_agent, fake_llm, extractions):
    script = _script(ADD_CITY)
    agent, run, _ = _completed(scripted_agent, script, "我在成都", model_fields={"structured_output": True})
    memory_extract(run_id=run.pk)
    body = fake_llm.requests(agent.model_config.model)[-1]
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": EXTRACTION_SCHEMA},
    }
    assert _statements() == ["住在成都"]
    # The agent's own steps are not held to it.
    assert "response_format" not in fake_llm.requests(agent.model_config.model)[0]

    plain, plain_run, _ = _completed(scripted_agent, script, "我在成都")
    memory_extract(run_id=plain_run.pk)
    assert "response_format" not in fake_llm.requests(plain.model_config.model)[-1]


def test_extraction_stops_for_the_day_once_its_budget_is_spent(scripted_agent, fake_llm, extractions, caplog):
    agent, first, _ = _completed(scripted_agent, _script(ADD_CITY), "我在成都", memory_daily_tokens=1)
    memory_extract(run_id=first.pk)
    assert LLMCall.objects.get(run=first, purpose="memory").total_tokens > 0
    second = advance(
        start_run(agent, "我喜欢猫", conversation_create(agent=agent, owner=first.conversation.owner, end_user="u1"))
    )

    with caplog.at_level(logging.WARNING, logger="engine.memory"):
        assert memory_extract(run_id=second.pk) is None

    assert not LLMCall.objects.filter(run=second, purpose="memory").exists()
    assert "memory extraction skipped: the agent's daily memory extraction budget is spent" in caplog.text


def test_the_extraction_reads_the_models_answers_not_the_platforms_words(scripted_agent, fake_llm, extractions):
    """A run stopped by a limit ends with the platform's explanation as an assistant message: the
    model did not say it, so the extraction is not shown it as the model's turn."""
    script = {
        "scenarios": [{"match": ".", "steps": [{"tool_calls": [{"name": "test-echo", "arguments": {"text": "x"}}]}]}],
        "memory_extraction": {"content": json.dumps({"changes": []})},
    }
    agent = scripted_agent(script, tools=["test-echo"], memory_enabled=True, max_iterations=1)
    owner = make_user()
    run = advance(start_run(agent, "我在成都", conversation_create(agent=agent, owner=owner, end_user="u1")))
    assert (run.status, run.stop_reason) == ("completed", "max_iterations")
    assert Message.objects.filter(run=run, role="assistant", llm_call__isnull=True).exclude(content="").exists()

    memory_extract(run_id=run.pk)

    sent = json.loads(fake_llm.requests(agent.model_config.model)[-1]["messages"][1]["content"])
    assert sent["conversation"] == [{"role": "user", "content": "我在成都"}]
