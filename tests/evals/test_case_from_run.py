"""A run made into an eval case from its timeline: the conversation up to its message, its tool
calls as expectations and their results as the case's given results, so playing the case again
stubs the tools the run called (a write tool does not run twice)."""

import json

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from conversations.models import Run, ToolInvocation
from conversations.services import messages_append
from evals.models import EvalCase, EvalResult, EvalSuite
from evals.services import eval_case_from_run, eval_run_collect, eval_run_start
from tests.evals.helpers import SCRIPT
from tests.support.factories import make_agent
from tests.support.ledger import ledger_run
from tests.support.llm import agent_on
from tests.support.runs import advance, ask

pytestmark = pytest.mark.django_db


def _staff(*perms: str) -> User:
    user = User.objects.create_user(username=f"staff-{'-'.join(perms)}"[:150], password="pw", is_staff=True)
    for perm in perms:
        app, codename = perm.split(".")
        user.user_permissions.add(Permission.objects.get(content_type__app_label=app, codename=codename))
    return user


OPERATOR = ("conversations.view_run", "evals.add_evalcase", "evals.view_evalcase", "evals.change_evalcase")


@pytest.fixture
def apples_run(fake_llm, executions):
    """A two-message conversation whose second run called the write tool test-counter for real."""
    agent = agent_on(fake_llm, SCRIPT, tools=["test-counter", "test-echo"], approval={"test-counter": "never"})
    first = ask(agent, "hello")
    run = ask(agent, "count apples please", first.conversation)
    assert run.status == "completed" and executions("eval-apples") == 1
    return run


def test_a_run_becomes_a_case_from_its_timeline_and_replays_without_running_its_tools(
    client, apples_run, executions, no_enqueue
):
    suite = EvalSuite.objects.create(name="regressions")
    EvalCase.objects.create(suite=suite, name="older", position=4, turns=[{"role": "user", "content": "x"}])
    client.force_login(_staff(*OPERATOR))
    timeline = client.get(reverse("monitoring:run", args=[apples_run.pk])).content.decode()
    assert 'id="eval-case-form"' in timeline and reverse("monitoring:run-eval-case", args=[apples_run.pk]) in timeline

    response = client.post(
        reverse("monitoring:run-eval-case", args=[apples_run.pk]), {"suite": suite.pk, "name": "apples"}
    )
    case = EvalCase.objects.get(suite=suite, name="apples")
    assert response.status_code == 302 and response["Location"] == reverse(
        "admin:evals_evalcase_change", args=[case.pk]
    )
    result = ToolInvocation.objects.get(run=apples_run).result
    assert case.turns == [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "Hi there"},
        {"role": "user", "content": "count apples please"},
    ]
    assert case.expected_tool_calls == [{"name": "test-counter", "arguments": {"label": "eval-apples"}}]
    assert case.tool_results == {"test-counter": result} and result
    assert (case.answer_contains, case.answer_pattern, case.answer_schema, case.position) == ("", "", None, 5)
    # The operator finishes it on its admin page.
    assert client.get(response["Location"]).status_code == 200

    # Played again, the write tool is given its recorded result instead of running.
    eval_run = eval_run_start(suite=suite, agent_version=apples_run.agent_version, repetitions=1)
    replay = EvalResult.objects.get(eval_run=eval_run, case=case).run
    advance(replay)
    eval_run_collect(eval_run_id=eval_run.pk)
    scored = EvalResult.objects.get(eval_run=eval_run, case=case)
    assert scored.passed is True, scored.checks
    assert [(i.simulated, i.result) for i in ToolInvocation.objects.filter(run=replay)] == [(True, result)]
    assert executions("eval-apples") == 1


def test_the_form_is_shown_only_to_those_who_may_add_cases(client):
    EvalSuite.objects.create(name="s")
    run = ledger_run(make_agent())
    client.force_login(_staff("conversations.view_run"))
    page = client.get(reverse("monitoring:run", args=[run.pk])).content.decode()
    assert "eval-case-form" not in page
    response = client.post(reverse("monitoring:run-eval-case", args=[run.pk]), {"suite": 1, "name": "x"})
    assert response.status_code == 403
    client.force_login(_staff("evals.add_evalcase"))  # without seeing runs
    assert client.post(reverse("monitoring:run-eval-case", args=[run.pk]), {"suite": 1, "name": "x"}).status_code == 403
    assert not EvalCase.objects.exists()


def _user_run() -> Run:
    run = ledger_run(make_agent())
    messages_append(conversation_id=run.conversation_id, run_id=run.pk, messages=[{"role": "user", "content": "hi"}])
    return run


def test_bad_choices_are_form_errors_and_save_nothing(client):
    suite = EvalSuite.objects.create(name="s")
    EvalCase.objects.create(suite=suite, name="taken", turns=[{"role": "user", "content": "x"}])
    run = _user_run()
    url = reverse("monitoring:run-eval-case", args=[run.pk])
    client.force_login(_staff(*OPERATOR))
    for form in (
        {"suite": suite.pk + 100, "name": "new"},
        {"suite": "x", "name": "new"},
        {"suite": suite.pk, "name": ""},
        {"suite": suite.pk, "name": "n" * 101},
        {"suite": suite.pk, "name": "taken"},
        {"name": "new"},
    ):
        response = client.post(url, form)
        assert response.status_code == 400 and "errorlist" in response.content.decode(), form
    assert list(suite.cases.values_list("name", flat=True)) == ["taken"]

    # A run without a user message (queued behind another, it has not stored one yet).
    silent = ledger_run(make_agent())
    response = client.post(reverse("monitoring:run-eval-case", args=[silent.pk]), {"suite": suite.pk, "name": "new"})
    assert response.status_code == 400 and "no user message" in response.content.decode()
    # An unknown run.
    unknown = reverse("monitoring:run-eval-case", args=["00000000-0000-0000-0000-000000000000"])
    assert client.post(unknown, {"suite": suite.pk, "name": "new"}).status_code == 404
    assert client.get(url).status_code == 405
    assert suite.cases.count() == 1


def test_the_service_refuses_a_duplicate_and_keeps_only_text_turns():
    suite = EvalSuite.objects.create(name="s")
    run = ledger_run(make_agent())
    messages_append(
        conversation_id=run.conversation_id,
        run_id=None,
        messages=[
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function"}]},
            {"role": "tool", "content": "result", "tool_call_id": "c1"},
            {"role": "assistant", "content": "done"},
        ],
    )
    messages_append(
        conversation_id=run.conversation_id,
        run_id=run.pk,
        messages=[{"role": "user", "content": "second"}, {"role": "assistant", "content": "later"}],
    )
    case = eval_case_from_run(run=run, suite=suite, name="c")
    assert case.turns == [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "second"},
    ]
    assert (case.expected_tool_calls, case.tool_results) == ([], {})
    with pytest.raises(Exception, match="already exists"):
        eval_case_from_run(run=run, suite=suite, name="c")
    assert suite.cases.count() == 1


def _case_form(case: EvalCase, **changes) -> dict:
    form = {
        "suite": case.suite_id,
        "name": case.name,
        "position": case.position,
        "turns": json.dumps(case.turns),
        "expected_tool_calls": json.dumps(case.expected_tool_calls),
        "forbidden_tools": "[]",
        "answer_contains": "",
        "answer_pattern": "",
        "answer_schema": "",
        "tool_results": json.dumps(case.tool_results),
        "live_reads": "on",
    }
    return {**form, **changes}


def test_the_case_is_finished_on_its_admin_page_checked_as_on_its_suite():
    suite = EvalSuite.objects.create(name="s")
    case = eval_case_from_run(run=_user_run(), suite=suite, name="c")
    url = reverse("admin:evals_evalcase_change", args=[case.pk])
    client = Client()
    client.force_login(_staff("evals.view_evalcase"))
    assert client.get(url).status_code == 200
    assert client.post(url, _case_form(case, answer_contains="hello")).status_code == 403
    client.force_login(_staff("evals.view_evalcase", "evals.change_evalcase"))
    response = client.post(url, _case_form(case, answer_pattern="(unclosed"))
    assert response.status_code == 200 and "errorlist" in response.content.decode()
    response = client.post(url, _case_form(case, answer_pattern="^Hi"))
    assert response.status_code == 302
    case.refresh_from_db()
    assert case.answer_pattern == "^Hi"
    client.force_login(_staff("conversations.view_run"))
    assert client.get(url).status_code == 403
