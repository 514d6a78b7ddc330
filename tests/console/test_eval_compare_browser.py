"""The eval comparison page in real Chromium, on two eval runs of two versions of an agent played
through the real queue (real worker, the fake model over HTTP): an operator selects both in the
admin, compares them, and reads the regressions first, marked."""

import copy

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission

from agents.services import agent_version_current
from evals.services import eval_run_start
from tests.evals.helpers import SCRIPT, eval_run_finished, four_case_suite
from tests.support.factories import ModelConfigFactory
from tests.support.llm import agent_on
from tests.support.workers import ARTIFACTS

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

PASSWORD = "correct horse battery"


def _rude(script: dict) -> dict:
    """The same model, except that it no longer greets with "Hi": only the greeting case regresses."""
    rude = copy.deepcopy(script)
    for scenario in rude["scenarios"]:
        if scenario["match"] == "hello":
            scenario["steps"] = [{"content": "Bye"}]
    return rude


def _rows(page, table: str, key: str) -> list[tuple[str, bool]]:
    rows = page.locator(f"#{table} tbody tr")
    return [
        (rows.nth(i).get_attribute(key), rows.nth(i).get_attribute("class") == "regression")
        for i in range(rows.count())
    ]


def test_compare_two_versions_regressions_first(live_server, page, worker, fake_llm):
    agent = agent_on(fake_llm, SCRIPT, tools=["test-counter", "test-echo"])
    suite = four_case_suite()
    baseline = eval_run_start(suite=suite, agent_version=agent_version_current(agent=agent), repetitions=1)
    eval_run_finished(baseline)
    agent.model_config = ModelConfigFactory(
        base_url=fake_llm.api_base, model=fake_llm.script("eval-rude", _rude(SCRIPT))
    )
    agent.save()
    candidate_version = agent_version_current(agent=agent)
    assert candidate_version.pk != baseline.agent_version_id
    candidate = eval_run_start(suite=suite, agent_version=candidate_version, repetitions=1)
    eval_run_finished(candidate)

    operator = get_user_model().objects.create_user("evaluator", password=PASSWORD, is_staff=True)
    operator.user_permissions.add(Permission.objects.get(content_type__app_label="evals", codename="view_evalrun"))
    page.goto("/admin/login/?next=/admin/evals/evalrun/")
    page.fill("#id_username", operator.username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/evals/evalrun/")
    for eval_run in (baseline, candidate):
        page.check(f"input[name=_selected_action][value='{eval_run.pk}']")
    page.select_option("select[name=action]", "compare")
    page.click("button[name=index]")
    page.wait_for_url("**/evals/compare/?*")
    assert f"baseline={baseline.pk}" in page.url and f"candidate={candidate.pk}" in page.url

    metrics, cases = _rows(page, "compare-metrics", "data-metric"), _rows(page, "compare-cases", "data-case")
    # Only the greeting case stopped passing: it heads the cases, ahead of the alphabet, marked.
    assert cases == [("greeting", True), ("apples", False), ("pears", False), ("say-hi", False)]
    # The completion rate fell from 2/4 to 1/4: a marked regression, and the regressions come first.
    marks = [regression for _, regression in metrics]
    assert ("task_completion_rate", True) in metrics and marks == sorted(marks, reverse=True)
    assert not all(marks)
    assert page.locator("table.compare tr.regression strong").first.is_visible()
    # Named in words, and the regressed case leads to the run that failed it.
    completion = page.locator('#compare-metrics tr[data-metric="task_completion_rate"] td').first
    assert completion.inner_text().startswith("Task completion rate")
    failed = page.locator('#compare-cases tr[data-case="greeting"] a.failed-run')
    assert failed.count() == 1
    page.screenshot(path=str(ARTIFACTS / "eval-compare.png"), full_page=True)
