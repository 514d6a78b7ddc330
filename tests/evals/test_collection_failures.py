"""An eval run never stays running for good: a JSON Schema that would recurse without end is
refused wherever a case is saved, scoring what slipped through cannot crash, anything else that
breaks the collection fails the eval run with the reason, and the sweeper collects or fails eval
runs left running."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone

from conversations.models import Run
from conversations.services import messages_append
from evals import services, tasks
from evals.management.commands import agentry_eval
from evals.matching import ExpectationInvalid, schema_check
from evals.models import EvalCase, EvalResult, EvalRun, EvalRunStatus, EvalSuite
from evals.services import eval_run_collect, eval_runs_sweep
from tests.evals.helpers import four_case_suite
from tests.support.api import client_for
from tests.support.factories import make_agent, make_user
from tests.support.ledger import ledger_run

pytestmark = pytest.mark.django_db

TURNS = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "#"},
        {"properties": {"a": {"$ref": "#"}}},
        {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
        {"$defs": {"node": {"properties": {"children": {"items": {"$ref": "#/$defs/node"}}}}}},
        {"$ref": "https://example.com/schema.json"},  # would be fetched, or fail, while scoring
        {"$ref": "#/$defs/missing"},
        {"$dynamicRef": "#meta"},
        {"properties": {"a": {"$id": "https://example.com/a", "$ref": "#"}}},
    ],
)
def test_a_recursive_or_unfollowable_reference_is_refused(schema):
    with pytest.raises(ExpectationInvalid):
        schema_check(schema)


def test_references_that_end_are_accepted():
    schema_check(
        {
            "$defs": {"name": {"type": "string"}, "named": {"properties": {"name": {"$ref": "#/$defs/name"}}}},
            "properties": {"a": {"$ref": "#/$defs/named"}, "b": {"$ref": "#/$defs/named"}},
        }
    )


def _suite_form(case: dict) -> dict:
    fields = {
        "name": "c1",
        "position": "0",
        "turns": '[{"role": "user", "content": "hi"}]',
        "expected_tool_calls": "[]",
        "forbidden_tools": "[]",
        "answer_schema": "",
        "tool_results": "{}",
        **case,
    }
    return {
        "name": "recursive",
        "cases-TOTAL_FORMS": "1",
        "cases-INITIAL_FORMS": "0",
        "cases-MIN_NUM_FORMS": "0",
        "cases-MAX_NUM_FORMS": "1000",
        **{f"cases-0-{key}": value for key, value in fields.items()},
    }


@pytest.mark.parametrize(
    "case",
    [
        {"answer_schema": '{"$ref": "#"}'},
        {"expected_tool_calls": '[{"name": "t", "arguments_schema": {"items": {"$ref": "#/items"}}}]'},
    ],
)
def test_the_admin_refuses_a_recursive_schema(client, case):
    user = User.objects.create_user(username="op", password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="evals"))
    client.force_login(user)
    response = client.post(reverse("admin:evals_evalsuite_add"), _suite_form(case))
    assert response.status_code == 200 and "makes the schema recursive" in response.content.decode()
    assert not EvalSuite.objects.exists()


def test_the_api_and_the_import_refuse_a_recursive_schema(tmp_path):
    suite = EvalSuite.objects.create(name="api")
    user = make_user()
    user.user_permissions.add(Permission.objects.get(codename="add_evalcase"))
    case = {"name": "c", "turns": TURNS, "answer_schema": {"$ref": "#"}}
    response = client_for(user).post(f"/api/v1/eval-suites/{suite.pk}/cases/", case, format="json")
    assert response.status_code == 400 and "answer_schema" in response.json()["extra"]["fields"]

    path = tmp_path / "cases.jsonl"
    path.write_text('{"name": "c", "turns": [{"role": "user", "content": "hi"}], "answer_schema": {"$ref": "#"}}\n')
    with pytest.raises(CommandError, match="line 1: .*recursive"):
        call_command("agentry_eval_cases", "import", "imported", str(path))
    assert not EvalCase.objects.exists()


def _eval_run_with_answer(answer: str, **case_fields) -> tuple[EvalRun, EvalResult]:
    agent = make_agent()
    suite = EvalSuite.objects.create(name="s")
    case = EvalCase.objects.create(suite=suite, name="c", turns=TURNS, **case_fields)
    now = timezone.now()
    run = ledger_run(agent, created_at=now - timedelta(seconds=3), finished_at=now)
    messages_append(
        conversation_id=run.conversation_id, run_id=run.pk, messages=[{"role": "assistant", "content": answer}]
    )
    eval_run = EvalRun.objects.create(suite=suite, agent_version=run.agent_version)
    result = EvalResult.objects.create(eval_run=eval_run, case=case, repetition=1, run=run)
    return eval_run, result


def test_a_recursive_schema_saved_before_the_check_fails_its_case_not_the_collection():
    # Written as an older version let it through: no validation on this path.
    eval_run, result = _eval_run_with_answer("{}", answer_schema={"$ref": "#"})

    assert eval_run_collect(eval_run_id=eval_run.pk).status == EvalRunStatus.COMPLETED
    result.refresh_from_db()
    assert result.scored and not result.passed
    [schema] = [check for check in result.checks if check["kind"] == "answer_schema"]
    assert "nested too deeply" in schema["reason"]


def test_an_answer_nested_deeper_than_python_recurses_is_not_json():
    eval_run, result = _eval_run_with_answer("[" * 5000 + "]" * 5000, answer_schema={"type": "array"})

    assert eval_run_collect(eval_run_id=eval_run.pk).status == EvalRunStatus.COMPLETED
    result.refresh_from_db()
    [schema] = [check for check in result.checks if check["kind"] == "answer_schema"]
    assert not schema["passed"] and "the answer is not JSON" in schema["reason"]


def test_any_failure_while_collecting_fails_the_eval_run_with_its_reason(monkeypatch):
    eval_run, result = _eval_run_with_answer("{}")

    def broken(expectations, observed):
        raise RuntimeError("scoring exploded")

    monkeypatch.setattr(services, "score_run", broken)
    followed = []
    monkeypatch.setattr(tasks, "eval_run_collect_later", lambda **kwargs: followed.append(kwargs))

    tasks.eval_run_collect_task(eval_run.pk)
    eval_run.refresh_from_db()
    assert eval_run.status == EvalRunStatus.FAILED and eval_run.finished_at is not None
    assert "case c #1" in eval_run.error and "RuntimeError: scoring exploded" in eval_run.error
    assert followed == []  # the task stops following a failed eval run
    result.refresh_from_db()
    assert not result.scored

    # Collecting again leaves the failure as it was.
    monkeypatch.undo()
    assert eval_run_collect(eval_run_id=eval_run.pk).status == EvalRunStatus.FAILED
    # The API says so, with the reason.
    reader = make_user()
    reader.user_permissions.add(Permission.objects.get(codename="view_evalrun"))
    body = client_for(reader).get(f"/api/v1/eval-runs/{eval_run.pk}/").json()
    assert body["status"] == "failed" and "RuntimeError: scoring exploded" in body["error"]


def test_the_sweeper_collects_lost_eval_runs_and_fails_those_past_the_deadline(settings):
    settings.AGENTRY_EVAL_RUN_DEADLINE_HOURS = 24
    agent = make_agent()
    suite = EvalSuite.objects.create(name="s")
    case = EvalCase.objects.create(suite=suite, name="c", turns=TURNS)

    def eval_run_on(run, *, hours_ago: float) -> EvalRun:
        eval_run = EvalRun.objects.create(suite=suite, agent_version=run.agent_version)
        EvalResult.objects.create(eval_run=eval_run, case=case, repetition=1, run=run)
        EvalRun.objects.filter(pk=eval_run.pk).update(started_at=timezone.now() - timedelta(hours=hours_ago))
        return eval_run

    stale = eval_run_on(ledger_run(agent, status="running", stop_reason=""), hours_ago=25)
    recent = eval_run_on(ledger_run(agent, status="running", stop_reason=""), hours_ago=1)
    now = timezone.now()
    lost = eval_run_on(ledger_run(agent, created_at=now - timedelta(hours=2), finished_at=now), hours_ago=2)

    assert eval_runs_sweep() == {"collected": 3, "failed": 1}
    statuses = dict(EvalRun.objects.values_list("pk", "status"))
    assert statuses == {
        stale.pk: EvalRunStatus.FAILED,
        recent.pk: EvalRunStatus.RUNNING,
        lost.pk: EvalRunStatus.COMPLETED,
    }
    assert EvalRun.objects.get(pk=stale.pk).error == "its runs did not all end within 24 hours"


def test_the_command_reports_a_failed_eval_run_instead_of_waiting(monkeypatch, no_enqueue):
    agent = make_agent(tools=["test-echo"])
    four_case_suite()

    def collect_failing(*, eval_run_id):
        services.eval_run_fail(eval_run_id=eval_run_id, reason="collecting the results failed: boom")
        return EvalRun.objects.get(pk=eval_run_id)

    monkeypatch.setattr(agentry_eval, "eval_run_collect", collect_failing)
    with pytest.raises(CommandError, match="failed: collecting the results failed: boom"):
        call_command("agentry_eval", agent.slug, "--suite", "basics", "--against", "draft", "--timeout", "5")


def test_a_run_finished_by_a_clock_behind_its_start_is_scored():
    eval_run, result = _eval_run_with_answer("{}")
    # Started and finished by two workers whose clocks differ.
    Run.objects.filter(pk=result.run_id).update(started_at=timezone.now() + timedelta(seconds=2))

    assert eval_run_collect(eval_run_id=eval_run.pk).status == EvalRunStatus.COMPLETED
    result.refresh_from_db()
    assert result.scored and result.latency_ms == 0
