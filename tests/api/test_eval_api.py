"""Evaluations through the API: suites, their cases (checked as the admin checks them), starting
eval runs and reading their metrics and results; each action needs its model permission."""

import pytest
from django.contrib.auth.models import Group, Permission
from django.core.cache import cache
from django.utils import timezone
from rest_framework.test import APIClient

from agents.services import agent_version_current
from conversations.models import Run
from evals.metrics import eval_metrics
from evals.models import EvalCase, EvalResult, EvalRun, EvalRunStatus, EvalSuite
from evals.selectors import eval_results_data
from tests.evals.helpers import four_case_suite
from tests.support.api import client_for
from tests.support.factories import make_agent, make_user

pytestmark = pytest.mark.django_db

SUITES = "/api/v1/eval-suites/"
RUNS = "/api/v1/eval-runs/"
CASE = {"name": "hello", "turns": [{"role": "user", "content": "hello"}], "answer_pattern": "^Hi"}


def _client(*codenames: str):
    user = make_user()
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="evals", codename__in=codenames))
    return client_for(user)


def _error(response, status: int) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"message", "extra"} and body["message"], body
    return body


def test_suites_are_listed_created_and_read():
    four_case_suite("basics")
    api = _client("view_evalsuite", "add_evalsuite")
    created = api.post(SUITES, {"name": "smoke", "description": "quick checks"}, format="json")
    assert created.status_code == 201, created.content
    assert {k: created.json()[k] for k in ("name", "description", "cases")} == {
        "name": "smoke",
        "description": "quick checks",
        "cases": 0,
    }
    listed = api.get(SUITES).json()["results"]
    assert [(s["name"], s["cases"]) for s in listed] == [("basics", 4), ("smoke", 0)]
    suite = EvalSuite.objects.get(name="basics")
    assert api.get(f"{SUITES}{suite.pk}/").json()["name"] == "basics"
    _error(api.get(f"{SUITES}999999/"), 404)
    _error(api.post(SUITES, {"name": "smoke"}, format="json"), 400)  # the name is taken
    _error(api.post(SUITES, {"name": ""}, format="json"), 400)
    _error(api.post(SUITES, {"name": "x" * 101}, format="json"), 400)
    _error(api.post(SUITES, {"name": "nul\x00"}, format="json"), 400)


def test_cases_are_listed_and_added():
    suite = four_case_suite("basics")
    api = _client("view_evalsuite", "add_evalcase")
    listed = api.get(f"{SUITES}{suite.pk}/cases/").json()["results"]
    assert [c["name"] for c in listed] == ["apples", "pears", "greeting", "say-hi"]
    assert listed[0]["tool_results"] == {"test-counter": '{"recorded": "eval-apples"}'}

    response = api.post(f"{SUITES}{suite.pk}/cases/", {**CASE, "position": 9}, format="json")
    assert response.status_code == 201, response.content
    case = EvalCase.objects.get(suite=suite, name="hello")
    assert (case.turns, case.answer_pattern, case.position, case.live_reads) == (CASE["turns"], "^Hi", 9, True)
    assert response.json()["id"] == case.pk
    _error(api.post(f"{SUITES}999999/cases/", CASE, format="json"), 404)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"answer_pattern": "(unclosed"}, "answer_pattern"),
        ({"answer_schema": {"type": "nonsense"}}, "answer_schema"),
        ({"expected_tool_calls": [{"name": "t", "arguments_pattern": "[a-"}]}, "expected_tool_calls"),
        ({"expected_tool_calls": [{"name": "t", "arguments_schema": {"minimum": "x"}}]}, "expected_tool_calls"),
        ({"expected_tool_calls": [{"name": "t"}], "expect_no_tool": True}, "expect_no_tool"),
        ({"turns": []}, "turns"),
        ({"turns": [{"role": "assistant", "content": "hi"}]}, "turns"),
        ({"turns": "hello"}, "turns"),
        ({"tool_results": {"t": 3}}, "tool_results"),
        ({"forbidden_tools": "t"}, "forbidden_tools"),
        ({"tool_results": {"t": "nul\x00"}}, "tool_results"),
        ({"name": "greeting"}, None),  # the suite has a case of that name
        ({"name": ""}, "name"),
        ({"max_tokens": -1}, "max_tokens"),
        ({"answer_rubric": "names Paris"}, "answer_rubric"),  # the suite has no judge model
    ],
)
def test_a_bad_case_is_a_400_in_the_error_shape(change, field):
    suite = four_case_suite("basics")
    api = _client("view_evalsuite", "add_evalcase")
    body = _error(api.post(f"{SUITES}{suite.pk}/cases/", {**CASE, **change}, format="json"), 400)
    if field is not None:
        assert field in body["extra"]["fields"], body
    else:
        assert "already exists" in body["message"], body
    assert suite.cases.count() == 4


def test_each_action_needs_its_permission():
    suite = four_case_suite("basics")
    eval_run = EvalRun.objects.create(suite=suite, agent_version=agent_version_current(agent=make_agent()))
    nobody = _client()
    staff = client_for(make_user(staff=True))
    for api in (nobody, staff):
        _error(api.get(SUITES), 403)
        _error(api.get(f"{SUITES}{suite.pk}/"), 403)
        _error(api.post(SUITES, {"name": "x"}, format="json"), 403)
        _error(api.get(f"{SUITES}{suite.pk}/cases/"), 403)
        _error(api.post(f"{SUITES}{suite.pk}/cases/", CASE, format="json"), 403)
        _error(api.get(RUNS), 403)
        _error(api.get(f"{RUNS}{eval_run.pk}/"), 403)
        _error(api.post(RUNS, {"suite": suite.pk, "agent": "x"}, format="json"), 403)
    # Seeing suites is not adding them or their cases, nor seeing or starting eval runs.
    viewer = _client("view_evalsuite")
    assert viewer.get(SUITES).status_code == 200
    _error(viewer.post(SUITES, {"name": "x"}, format="json"), 403)
    _error(viewer.post(f"{SUITES}{suite.pk}/cases/", CASE, format="json"), 403)
    _error(viewer.get(f"{RUNS}{eval_run.pk}/"), 403)
    runner = _client("add_evalrun")
    _error(runner.get(f"{RUNS}{eval_run.pk}/"), 403)
    _error(_client("add_evalcase").get(f"{SUITES}{suite.pk}/cases/"), 403)
    # Without a token at all.
    _error(APIClient().get(SUITES), 401)
    assert EvalSuite.objects.count() == 1 and not EvalCase.objects.filter(name="hello").exists()


def test_starting_an_eval_run(no_enqueue):
    agent = make_agent(tools=["test-echo", "test-counter"], slug="helper")
    suite = four_case_suite("basics")
    api = _client("add_evalrun", "view_evalrun")
    response = api.post(
        RUNS, {"suite": suite.pk, "agent": "helper", "version": "draft", "repetitions": 2}, format="json"
    )
    assert response.status_code == 201, response.content
    body = response.json()
    eval_run = EvalRun.objects.get()
    version = agent_version_current(agent=agent)
    assert (body["id"], body["agent"], body["agent_version"], body["status"]) == (
        eval_run.pk,
        "helper",
        version.number,
        "running",
    )
    assert eval_run.agent_version == version and eval_run.repetitions == 2 and eval_run.created_by is not None
    assert len(body["results"]) == 8 and Run.objects.filter(eval_result__eval_run=eval_run).count() == 8
    assert body["metrics"] is None

    # The version by number, and the default of one repetition.
    response = api.post(RUNS, {"suite": suite.pk, "agent": "helper", "version": str(version.number)}, format="json")
    assert response.status_code == 201 and response.json()["repetitions"] == 1


@pytest.mark.parametrize(
    "change",
    [
        {"agent": "nobody"},
        {"suite": 999999},
        {"suite": "x"},
        {"version": "99"},
        {"version": "latest"},
        {"version": "published"},  # never published
        {"repetitions": 0},
        {"repetitions": 21},
        {"empty_suite": True},
    ],
)
def test_a_bad_eval_run_is_a_400(change, no_enqueue):
    make_agent(tools=["test-echo"], slug="helper")
    suite = four_case_suite("basics")
    empty = EvalSuite.objects.create(name="empty")
    form = {"suite": suite.pk, "agent": "helper", "version": "draft", "repetitions": 1}
    if change.pop("empty_suite", False):
        form["suite"] = empty.pk
    _error(_client("add_evalrun").post(RUNS, {**form, **change}, format="json"), 400)
    assert not EvalRun.objects.exists() and not Run.objects.exists()


def test_an_agent_the_user_may_not_use_is_refused(no_enqueue):
    restricted = make_agent(tools=["test-echo"], slug="private")
    restricted.allowed_groups.add(Group.objects.create(name="insiders"))
    suite = four_case_suite("basics")
    body = _error(_client("add_evalrun").post(RUNS, {"suite": suite.pk, "agent": "private"}, format="json"), 400)
    assert "agent" in body["extra"]["fields"]


def test_an_eval_run_is_read_with_its_metrics_and_results():
    suite = four_case_suite("basics")
    eval_run = EvalRun.objects.create(suite=suite, agent_version=agent_version_current(agent=make_agent()))
    for case in suite.cases.all():
        EvalResult.objects.create(
            eval_run=eval_run,
            case=case,
            repetition=1,
            scored=True,
            passed=case.name != "pears",
            checks=[{"kind": "finished", "passed": case.name != "pears", "reason": "r"}],
            total_tokens=100,
        )
    eval_run.metrics = eval_metrics(eval_results_data(eval_run=eval_run), repetitions=1)
    eval_run.status, eval_run.finished_at = EvalRunStatus.COMPLETED, timezone.now()
    eval_run.save()
    api = _client("view_evalrun")
    body = api.get(f"{RUNS}{eval_run.pk}/").json()
    assert body["status"] == "completed" and body["metrics"]["task_completion_rate"] == 3 / 4
    assert [(r["case"], r["passed"], r["checks"][0]["kind"]) for r in body["results"]] == [
        ("apples", True, "finished"),
        ("pears", False, "finished"),
        ("greeting", True, "finished"),
        ("say-hi", True, "finished"),
    ]
    assert [r["id"] for r in api.get(RUNS).json()["results"]] == [eval_run.pk]
    _error(api.get(f"{RUNS}999999/"), 404)


def test_starting_eval_runs_spends_the_run_start_budget(settings, no_enqueue):
    cache.clear()
    settings.AGENTRY_API_RUN_RATE = "1/min"
    make_agent(tools=["test-echo"], slug="helper")
    suite = four_case_suite("basics")
    api = _client("add_evalrun", "view_evalrun")
    assert api.post(RUNS, {"suite": suite.pk, "agent": "helper"}, format="json").status_code == 201
    _error(api.post(RUNS, {"suite": suite.pk, "agent": "helper"}, format="json"), 429)
    assert EvalRun.objects.count() == 1
    # Reading is not throttled by it.
    assert api.get(RUNS).status_code == 200
