"""The eval comparison page leads somewhere: the eval runs, their suite and each case link to
their pages, every repetition links to the run it played, a regressed case lists the runs that
failed with the checks they failed, and metrics are named in words."""

import pytest
from django.contrib.auth.models import Permission, User
from django.urls import reverse
from django.utils import timezone

from agents.services import agent_version_current
from conversations.models import Run
from evals.metrics import eval_metrics
from evals.models import EvalResult, EvalRun, EvalRunStatus
from evals.selectors import eval_results_data
from tests.evals.helpers import four_case_suite
from tests.support.factories import make_agent
from tests.support.ledger import ledger_run

pytestmark = pytest.mark.django_db


def _eval_run(suite, version, failing: dict) -> EvalRun:
    """Every case played once by a run of its own; `failing` names the cases that failed, with
    the check they failed."""
    eval_run = EvalRun.objects.create(suite=suite, agent_version=version, repetitions=1)
    for case in suite.cases.all():
        failed = failing.get(case.name)
        EvalResult.objects.create(
            eval_run=eval_run,
            case=case,
            repetition=1,
            run=ledger_run(version.agent),
            scored=True,
            passed=failed is None,
            checks=[{"kind": "finished", "passed": True, "reason": "answered"}]
            + ([{"kind": failed[0], "passed": False, "reason": failed[1]}] if failed else []),
        )
    eval_run.metrics = eval_metrics(eval_results_data(eval_run=eval_run), repetitions=1)
    eval_run.status, eval_run.finished_at = EvalRunStatus.COMPLETED, timezone.now()
    eval_run.save()
    return eval_run


@pytest.fixture
def compared(client):
    user = User.objects.create_user("evaluator", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(content_type__app_label="evals", codename="view_evalrun"))
    client.force_login(user)
    suite = four_case_suite()
    version = agent_version_current(agent=make_agent())
    baseline = _eval_run(suite, version, {"say-hi": ("answer_contains", "lacks 'Hi'")})
    candidate = _eval_run(
        suite,
        version,
        {"say-hi": ("answer_contains", "lacks 'Hi'"), "pears": ("tool_call", "test-counter: never called")},
    )
    page = client.get(reverse("evals:compare"), {"baseline": baseline.pk, "candidate": candidate.pk})
    assert page.status_code == 200
    return suite, baseline, candidate, page.content.decode()


def _row(page: str, attribute: str) -> str:
    return page.split(attribute)[1].split("</tr>")[0]


def test_the_eval_runs_their_suite_and_the_cases_link_to_their_pages(compared):
    suite, baseline, candidate, page = compared
    runs = page.split('id="compared-runs"')[1].split("</dl>")[0]
    assert reverse("admin:evals_evalrun_change", args=[baseline.pk]) in runs
    assert reverse("admin:evals_evalrun_change", args=[candidate.pk]) in runs
    assert reverse("admin:evals_evalsuite_change", args=[suite.pk]) in runs
    agent = baseline.agent_version.agent
    assert f'<a href="{reverse("monitoring:agent", args=[agent.slug])}" class="agent-hub-link">{agent.name}</a>' in runs
    for case in suite.cases.all():
        assert reverse("admin:evals_evalcase_change", args=[case.pk]) in _row(page, f'data-case="{case.name}"')


def test_a_regressed_case_links_the_runs_that_failed_and_says_which_check_failed(compared):
    suite, baseline, candidate, page = compared
    pears = _row(page, 'data-case="pears"')
    failed_run = EvalResult.objects.get(eval_run=candidate, case__name="pears").run_id
    passed_run = EvalResult.objects.get(eval_run=baseline, case__name="pears").run_id
    assert 'class="regression"' in page.split('data-case="pears"')[0].rsplit("<tr", 1)[1]
    why = pears.split('class="why"')[1]
    assert f'href="{reverse("monitoring:run", args=[failed_run])}" class="failed-run"' in why
    assert "expected tool call — test-counter: never called" in why
    # Both sides' runs are there to compare: the baseline's passing one too.
    assert reverse("monitoring:run", args=[passed_run]) in pears
    # A case that failed on both sides did not regress: its runs are linked, without a "why" list.
    say_hi = _row(page, 'data-case="say-hi"')
    assert 'class="why"' not in say_hi and 'class="run failed"' in say_hi


def test_metrics_are_named_in_words_regressions_first(compared):
    _, _, _, page = compared
    metrics = page.split('id="compare-metrics"')[1].split("</table>")[0]
    completion = _row(metrics, 'data-metric="task_completion_rate"')
    assert "Task completion rate" in completion and "<strong>regression</strong>" in completion
    assert "Cases passed every time (pass^k)" in _row(metrics, 'data-metric="pass_all_k"')
    assert "Tool hit rate (expected calls made)" in _row(metrics, 'data-metric="tool_hit_rate"')
    assert "Argument parse rate (valid arguments)" in _row(metrics, 'data-metric="argument_validity_rate"')
    assert metrics.index('data-metric="task_completion_rate"') < metrics.index('data-metric="pass_rate_max"')


def test_a_repetition_whose_run_was_deleted_is_shown_without_a_link(client, compared):
    suite, baseline, candidate, _ = compared
    result = EvalResult.objects.get(eval_run=candidate, case__name="pears")
    gone = result.run_id
    # Retention deletes runs and keeps the scores (EvalResult.run has no database constraint).
    Run.objects.filter(pk=gone).delete()
    assert EvalResult.objects.get(pk=result.pk).run_id == gone
    page = client.get(reverse("evals:compare"), {"baseline": baseline.pk, "candidate": candidate.pk}).content.decode()
    pears = _row(page, 'data-case="pears"')
    assert reverse("monitoring:run", args=[gone]) not in pears and "candidate run #1" in pears


def test_a_failed_eval_run_is_a_clear_400_naming_why(client, compared):
    suite, baseline, candidate, _ = compared
    candidate.status, candidate.error = EvalRunStatus.FAILED, "case pears #1: RecursionError: too deep"
    candidate.save()
    page = client.get(reverse("evals:compare"), {"baseline": baseline.pk, "candidate": candidate.pk})
    assert page.status_code == 400
    assert "failed" in page.content.decode() and "RecursionError: too deep" in page.content.decode()
