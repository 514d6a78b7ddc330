"""Suites and cases in the admin (validation, JSONL), starting eval runs, and the comparison
page: bad inputs are 4xx or form errors, and every page asks for its permission."""

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import Permission, User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone

from agents.services import agent_version_current
from conversations.models import Run
from evals.jsonl import CASE_FIELDS
from evals.metrics import eval_metrics
from evals.models import EvalCase, EvalResult, EvalRun, EvalRunStatus, EvalSuite
from evals.selectors import eval_results_data
from tests.evals.helpers import four_case_suite
from tests.support.factories import ModelConfigFactory, make_agent

pytestmark = pytest.mark.django_db


def _staff(*codenames: str) -> User:
    user = User.objects.create_user(
        username=f"staff-{len(codenames)}-{'-'.join(codenames)}"[:150], password="pw", is_staff=True
    )
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="evals", codename__in=codenames))
    return user


def _fields(case: EvalCase) -> dict:
    return {name: getattr(case, name) for name in CASE_FIELDS}


def test_jsonl_round_trip_through_the_command(tmp_path):
    suite = four_case_suite()
    path = tmp_path / "cases.jsonl"
    call_command("agentry_eval_cases", "export", "basics", str(path))
    call_command("agentry_eval_cases", "import", "copy", str(path))
    copy = EvalSuite.objects.get(name="copy")
    assert [_fields(c) for c in copy.cases.all()] == [_fields(c) for c in suite.cases.all()]
    # Importing again replaces the cases of the same name rather than adding new ones.
    call_command("agentry_eval_cases", "import", "copy", str(path))
    assert copy.cases.count() == 4


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("not json", "line 2: not JSON"),
        ('{"turns": []}', 'line 2: a case is an object with a "name"'),
        ('{"name": "x", "turns": [{"role": "user", "content": "a"}], "colour": 1}', "unknown fields colour"),
        (
            '{"name": "x", "turns": [{"role": "user", "content": "a"}], "answer_pattern": "("}',
            "invalid regular expression",
        ),
        (
            '{"name": "x", "turns": [{"role": "user", "content": "a"}], "answer_schema": {"type": 5}}',
            "invalid JSON Schema",
        ),
        ('{"name": "x", "turns": [{"role": "assistant", "content": "a"}]}', "the last turn must be the user's"),
    ],
)
def test_a_bad_line_is_refused_and_nothing_is_imported(tmp_path, line, said):
    path = tmp_path / "cases.jsonl"
    path.write_text('{"name": "ok", "turns": [{"role": "user", "content": "hi"}]}\n' + line + "\n")
    with pytest.raises(CommandError, match=said):
        call_command("agentry_eval_cases", "import", "bad", str(path))
    assert not EvalCase.objects.filter(suite__name="bad").exists()


def _suite_form(case: dict) -> dict:
    form = {
        "name": "new-suite",
        "description": "",
        "cases-TOTAL_FORMS": "1",
        "cases-INITIAL_FORMS": "0",
        "cases-MIN_NUM_FORMS": "0",
        "cases-MAX_NUM_FORMS": "1000",
    }
    defaults = {
        "name": "c1",
        "position": "0",
        "turns": '[{"role": "user", "content": "hi"}]',
        "expected_tool_calls": "[]",
        "forbidden_tools": "[]",
        "answer_contains": "",
        "answer_pattern": "",
        "answer_schema": "",
        "tool_results": "{}",
        "live_reads": "on",
    }
    form.update({f"cases-0-{key}": value for key, value in {**defaults, **case}.items()})
    return form


@pytest.mark.parametrize(
    "case",
    [
        {"answer_pattern": "(unclosed"},
        {"answer_schema": '{"type": "nonsense"}'},
        {"expected_tool_calls": '[{"name": "t", "arguments_schema": {"minimum": "x"}}]'},
        {"expected_tool_calls": '[{"name": "t", "arguments_pattern": "[a-"}]'},
        {"turns": "[]"},
        {"tool_results": '{"t": 3}'},
        {"expected_tool_calls": '[{"name": "t"}]', "expect_no_tool": "on"},
        {"answer_rubric": "Greets the user."},  # the suite has no judge model
    ],
)
def test_a_bad_expectation_is_a_form_error(client, case):
    client.force_login(_staff("add_evalsuite", "view_evalsuite", "add_evalcase", "view_evalcase"))
    response = client.post(reverse("admin:evals_evalsuite_add"), _suite_form(case))
    assert response.status_code == 200 and "errorlist" in response.content.decode()
    assert not EvalSuite.objects.exists()


def test_a_good_suite_is_saved_from_the_admin(client):
    client.force_login(_staff("add_evalsuite", "view_evalsuite", "add_evalcase", "view_evalcase"))
    case = {"answer_pattern": "^Hi", "expected_tool_calls": '[{"name": "t", "arguments": {"a": 1}}]'}
    response = client.post(reverse("admin:evals_evalsuite_add"), _suite_form(case))
    assert response.status_code == 302
    assert EvalSuite.objects.get(name="new-suite").cases.get().expected_tool_calls == [
        {"name": "t", "arguments": {"a": 1}}
    ]


def test_a_suite_with_a_judge_model_saves_a_rubric_case_from_the_admin(client):
    client.force_login(_staff("add_evalsuite", "view_evalsuite", "add_evalcase", "view_evalcase"))
    judge = ModelConfigFactory()
    form = {**_suite_form({"answer_rubric": "Greets the user."}), "judge_model_config": str(judge.pk)}
    response = client.post(reverse("admin:evals_evalsuite_add"), form)
    assert response.status_code == 302
    suite = EvalSuite.objects.get(name="new-suite")
    assert (suite.judge_model_config, suite.cases.get().answer_rubric) == (judge, "Greets the user.")


def test_the_admin_exports_one_suite_as_jsonl(client):
    suite = four_case_suite()
    client.force_login(_staff("view_evalsuite"))
    response = client.post(
        reverse("admin:evals_evalsuite_changelist"),
        {"action": "export_jsonl", ACTION_CHECKBOX_NAME: [suite.pk], "index": 0},
    )
    assert response.status_code == 200 and response["Content-Type"].startswith("application/jsonl")
    assert len(response.content.decode().splitlines()) == 4


def test_evals_admin_pages_need_their_permissions(client):
    four_case_suite()
    client.force_login(_staff())
    assert client.get(reverse("admin:evals_evalsuite_changelist")).status_code == 403
    assert client.get(reverse("admin:evals_evalrun_changelist")).status_code == 403
    client.force_login(_staff("view_evalrun"))
    assert client.get(reverse("admin:evals_evalrun_changelist")).status_code == 200
    assert client.get(reverse("admin:evals_evalrun_add")).status_code == 403


def test_starting_an_eval_run_from_the_admin(client, no_enqueue):
    agent = make_agent(tools=["test-echo"])
    suite = four_case_suite()
    client.force_login(_staff("add_evalrun", "view_evalrun"))
    url = reverse("admin:evals_evalrun_add")
    form = {"suite": suite.pk, "agent": agent.pk, "version": "current", "repetitions": "2"}

    for bad in ({"version": "99"}, {"version": "x"}, {"repetitions": "0"}, {"repetitions": "500"}):
        response = client.post(url, {**form, **bad})
        assert response.status_code == 200 and "errorlist" in response.content.decode(), bad
    assert not EvalRun.objects.exists()

    response = client.post(url, form)
    assert response.status_code == 302
    eval_run = EvalRun.objects.get()
    assert eval_run.agent_version == agent_version_current(agent=agent) and eval_run.repetitions == 2
    runs = Run.objects.filter(eval_result__eval_run=eval_run)
    assert runs.count() == 8 and all(run.sandbox is not None for run in runs)
    apples = runs.get(eval_result__case__name="apples", eval_result__repetition=1)
    assert apples.sandbox == {"results": {"test-counter": '{"recorded": "eval-apples"}'}, "live_reads": True}
    # The eval run's page links each result to its run's timeline.
    page = client.get(reverse("admin:evals_evalrun_change", args=[eval_run.pk])).content.decode()
    assert reverse("monitoring:run", args=[apples.pk]) in page


def _finished_eval_run(suite, version, passes: dict) -> EvalRun:
    eval_run = EvalRun.objects.create(suite=suite, agent_version=version, repetitions=1)
    for case in suite.cases.all():
        EvalResult.objects.create(
            eval_run=eval_run,
            case=case,
            repetition=1,
            scored=True,
            passed=passes[case.name],
            checks=[{"kind": "finished", "passed": passes[case.name], "reason": ""}],
        )
    eval_run.metrics = eval_metrics(eval_results_data(eval_run=eval_run), repetitions=1)
    eval_run.status, eval_run.finished_at = EvalRunStatus.COMPLETED, timezone.now()
    eval_run.save()
    return eval_run


def test_the_comparison_page(client):
    suite = four_case_suite()
    version = agent_version_current(agent=make_agent())
    baseline = _finished_eval_run(suite, version, {"apples": True, "pears": True, "greeting": True, "say-hi": False})
    candidate = _finished_eval_run(suite, version, {"apples": True, "pears": False, "greeting": True, "say-hi": False})
    running = EvalRun.objects.create(suite=suite, agent_version=version)
    url = reverse("evals:compare")
    good = {"baseline": baseline.pk, "candidate": candidate.pk}

    assert client.get(url, good).status_code == 302  # to the login page
    client.force_login(_staff())
    assert client.get(url, good).status_code == 403
    client.force_login(_staff("view_evalrun"))
    for bad in (
        {},
        {"baseline": "x", "candidate": 1},
        {"baseline": -1, "candidate": 1},
        {**good, "candidate": running.pk},
        {**good, "max_rate_drop": "lots"},
        {**good, "max_cost_increase": "-1"},
    ):
        assert client.get(url, bad).status_code == 400, bad
    assert client.get(url, {**good, "candidate": 999999}).status_code == 404

    page = client.get(url, good)
    assert page.status_code == 200
    body = page.content.decode()
    # Regressions first: the completion rate (75% → 50%) and the case that stopped passing.
    assert body.index("task_completion_rate") < body.index("tool_hit_rate")
    assert body.count('class="regression"') >= 2 and body.index("pears") < body.index("apples")


def test_the_admin_links_two_eval_runs_to_the_comparison(client):
    suite = four_case_suite()
    version = agent_version_current(agent=make_agent())
    runs = [
        _finished_eval_run(suite, version, dict.fromkeys(["apples", "pears", "greeting", "say-hi"], True))
        for _ in range(2)
    ]
    client.force_login(_staff("view_evalrun"))
    response = client.post(
        reverse("admin:evals_evalrun_changelist"),
        {"action": "compare", ACTION_CHECKBOX_NAME: [r.pk for r in runs], "index": 0},
    )
    assert response.status_code == 302
    assert response["Location"] == f"{reverse('evals:compare')}?baseline={runs[0].pk}&candidate={runs[1].pk}"


def test_an_eval_runs_page_shows_its_results_and_metrics(client):
    suite = four_case_suite()
    eval_run = _finished_eval_run(
        suite, agent_version_current(agent=make_agent()), dict.fromkeys(["apples", "pears", "greeting", "say-hi"], True)
    )
    client.force_login(_staff("view_evalrun", "view_evalsuite"))
    page = client.get(reverse("admin:evals_evalrun_change", args=[eval_run.pk])).content.decode()
    assert "task_completion_rate" in page and "apples" in page
    assert client.get(reverse("admin:evals_evalsuite_change", args=[suite.pk])).status_code == 200


def test_importing_cases_from_the_admin(client, tmp_path):
    four_case_suite()
    path = tmp_path / "cases.jsonl"
    call_command("agentry_eval_cases", "export", "basics", str(path))
    url = reverse("admin:evals_evalsuite_import")

    client.force_login(_staff("view_evalsuite", "add_evalsuite"))
    assert client.get(url).status_code == 403
    assert "Import cases" not in client.get(reverse("admin:evals_evalsuite_changelist")).content.decode()

    client.force_login(_staff("view_evalsuite", "add_evalsuite", "add_evalcase", "change_evalcase"))
    assert "Import cases" in client.get(reverse("admin:evals_evalsuite_changelist")).content.decode()
    bad_files = [b'{"name": "x"}\n{"name": "y", "answer_pattern": "("}\n', b"\xff\xfe not utf-8", b"[1]\n"]
    for content in bad_files:
        upload = SimpleUploadedFile("cases.jsonl", content)
        response = client.post(url, {"suite": "uploaded", "file": upload})
        assert response.status_code == 400 and "errorlist" in response.content.decode(), content
    assert not EvalSuite.objects.filter(name="uploaded").exists()
    assert client.post(url, {"suite": "", "file": SimpleUploadedFile("c.jsonl", b"")}).status_code == 400

    with path.open("rb") as upload:
        response = client.post(url, {"suite": "uploaded", "file": upload})
    assert response.status_code == 302
    assert EvalSuite.objects.get(name="uploaded").cases.count() == 4
