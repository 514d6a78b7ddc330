"""The final answer of a run: one selector that the API, webhooks, chat completions, the
try-it page and the CLI all read."""

import uuid

import pytest
from django.core.exceptions import ValidationError

from api.completions import completion_outcome
from console.monitoring.selectors import run_events_after
from conversations.models import Message, Run, RunEvent, RunStatus
from conversations.selectors import run_final_answer, run_final_answer_annotation, run_with_final_answer
from conversations.services import conversation_create
from demo.cli import format_run
from notifications import deliveries
from tests.support.api import client_for
from tests.support.factories import make_user
from tests.support.runs import advance, start_run

pytestmark = pytest.mark.django_db


def _script(*steps):
    return {"scenarios": [{"match": ".", "steps": list(steps)}]}


def _echo(text):
    return {"tool_calls": [{"name": "test-echo", "arguments": {"text": text}}], "content": "Let me echo that."}


def _annotated(run: Run):
    return Run.objects.annotate(answer=run_final_answer_annotation()).get(pk=run.pk).answer


def _with_run(run: Run):
    """run_with_final_answer's answer, checked to come with the run as the ORM reads it."""
    read, answer = run_with_final_answer(run_id=run.pk)
    expected = Run.objects.get(pk=run.pk)
    for field in Run._meta.concrete_fields:
        assert getattr(read, field.attname) == getattr(expected, field.attname), field.name
    return None if answer is None else (answer.content, answer.llm_call_id)


def test_a_completed_run_answers_with_its_last_message_without_tool_calls(scripted_agent):
    agent = scripted_agent(_script(_echo("a"), {"content": "The echo said a."}), tools=["test-echo"])
    run = advance(start_run(agent))

    answer = run_final_answer(run=run)
    assert run.status == RunStatus.COMPLETED and answer.content == "The echo said a."
    # The message that called the tool had text too; it is not the answer.
    assert Message.objects.filter(run=run, role="assistant", content="Let me echo that.").exists()
    assert answer.llm_call_id is not None and _annotated(run) == "The echo said a."
    assert _with_run(run) == ("The echo said a.", answer.llm_call_id)


def test_a_limit_answers_with_its_explanation(scripted_agent):
    agent = scripted_agent(_script(_echo("a")), tools=["test-echo"], max_iterations=1, max_same_tool_streak=10)
    run = advance(start_run(agent))

    assert (run.status, run.stop_reason) == ("completed", "max_iterations")
    answer = run_final_answer(run=run)
    assert "more than 1 model step" in answer.content and answer.llm_call_id is None
    assert _annotated(run) == answer.content and _with_run(run) == (answer.content, None)


def test_a_run_that_did_not_complete_has_no_answer_even_with_a_reply_in_the_ledger(scripted_agent):
    agent = scripted_agent(_script({"content": "A reply."}))
    run = advance(start_run(agent))
    assert run_final_answer(run=run).content == "A reply."

    for status in (RunStatus.CANCELLED, RunStatus.FAILED, RunStatus.EXPIRED, RunStatus.RUNNING):
        Run.objects.filter(pk=run.pk).update(status=status)
        run.refresh_from_db()
        assert run_final_answer(run=run) is None and _annotated(run) is None, status
        assert _with_run(run) is None, status


@pytest.mark.django_db
def test_the_run_and_its_answer_read_for_a_missing_or_malformed_id():
    with pytest.raises(Run.DoesNotExist):
        run_with_final_answer(run_id=uuid.uuid4())
    with pytest.raises(ValidationError):
        run_with_final_answer(run_id="not-a-run")


def _every_surface(run: Run, owner) -> dict:
    """What each reader presents as the run's answer."""
    run.refresh_from_db()
    event = RunEvent.objects.filter(run=run).order_by("-seq").first()
    cli_line = next(line for line in format_run(run).splitlines() if line.startswith("  answer: "))
    return {
        "api": client_for(owner).get(f"/api/v1/runs/{run.pk}/").json()["output"],
        "webhook": deliveries._payload(event, run)["run"]["output"],
        "completion": completion_outcome(run_id=run.pk).text,
        "try_it": run_events_after(run=run, after=0)["answer"],
        "cli": None if cli_line == "  answer: (none)" else cli_line.removeprefix("  answer: "),
    }


def test_every_reader_presents_the_same_answer_or_none(scripted_agent):
    owner = make_user()
    agent = scripted_agent(_script(_echo("a"), {"content": "The echo said a."}), tools=["test-echo"])
    run = advance(start_run(agent, conversation=conversation_create(agent=agent, owner=owner)))
    assert set(_every_surface(run, owner).values()) == {"The echo said a."}

    # A cancel that won the race: the reply is in the ledger, but no reader presents it.
    Run.objects.filter(pk=run.pk).update(status=RunStatus.CANCELLED, stop_reason="cancelled")
    surfaces = _every_surface(run, owner)
    assert surfaces.pop("completion") is None and set(surfaces.values()) == {None}
