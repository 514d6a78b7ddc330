"""The pages that tell a run's story, in real Chromium, in English and in Chinese, on real runs
(real worker, real queue, the fake model streaming over HTTP): the try page shows the tool step
as a card while the answer streams, the run's timeline opens with the exchange and its outcome
and draws the steps on a time axis, and the eval comparison leads from a regressed case to the
run that failed it. Screenshots are kept in test-artifacts/ (timeline-en.png, …-zh-hans.png)."""

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from agents.services import agent_version_current
from conversations.models import Run
from evals.metrics import eval_metrics
from evals.models import EvalCase, EvalResult, EvalRun, EvalRunStatus, EvalSuite
from evals.selectors import eval_results_data
from tests.support.ledger import ledger_run
from tests.support.llm import agent_on
from tests.support.workers import ARTIFACTS

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

PASSWORD = "correct horse battery"
WEATHER = {
    "scenarios": [
        {
            "match": ".",
            "steps": [
                {"tool_calls": [{"name": "test-echo", "arguments": {"text": "Chengdu: light rain, 18 °C"}}]},
                {"content": "Weather for you — {last_tool_result}. Take an umbrella."},
            ],
        }
    ]
}
LANGUAGES = {"en": "en-US", "zh-hans": "zh-CN"}


def _log_in(page, operator, next_url: str) -> None:
    page.goto(f"/admin/login/?next={next_url}")
    page.fill("#id_username", operator.username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"**{next_url}*")


def _ask(page, agent, question: str) -> str:
    """Sends the question from the try page and waits for the streamed answer; the run's id."""
    page.goto(f"/monitor/try/?agent={agent.pk}")
    page.fill("#id_content", question)
    page.click("#try-send")
    page.wait_for_selector('section.try-run[data-status="completed"]')
    return page.locator("section.try-run").first.get_attribute("data-run")


def _comparison(agent, passed_run: Run, failed_run: Run) -> tuple[EvalRun, EvalRun]:
    """Two eval runs of the agent's suite: `weather-chengdu` passed in the baseline (played by
    `passed_run`) and failed in the candidate (by `failed_run`); the rest pass on both sides."""
    suite = EvalSuite.objects.create(name="weather")
    for position, name in enumerate(["weather-chengdu", "weather-beijing", "greeting"]):
        EvalCase.objects.create(suite=suite, name=name, position=position, turns=[{"role": "user", "content": name}])
    version = agent_version_current(agent=agent)
    eval_runs = []
    for failing in (False, True):
        eval_run = EvalRun.objects.create(suite=suite, agent_version=version, repetitions=1)
        for case in suite.cases.all():
            failed = failing and case.name == "weather-chengdu"
            checks = [{"kind": "finished", "passed": True, "reason": "answered"}]
            if failed:
                checks.append({"kind": "answer_contains", "passed": False, "reason": "lacks '晴'"})
            EvalResult.objects.create(
                eval_run=eval_run,
                case=case,
                repetition=1,
                run=(failed_run if failing else passed_run) if case.name == "weather-chengdu" else ledger_run(agent),
                scored=True,
                passed=not failed,
                checks=checks,
            )
        eval_run.metrics = eval_metrics(eval_results_data(eval_run=eval_run), repetitions=1)
        eval_run.status, eval_run.finished_at = EvalRunStatus.COMPLETED, timezone.now()
        eval_run.save()
        eval_runs.append(eval_run)
    return eval_runs[0], eval_runs[1]


def test_the_story_pages_in_english_and_in_chinese(chromium, live_server, worker, fake_llm):
    operator = get_user_model().objects.create_user("oncall", password=PASSWORD, is_staff=True, is_superuser=True)
    agent = agent_on(fake_llm, WEATHER, stream=True, name="Weather desk")
    ARTIFACTS.mkdir(exist_ok=True)
    runs = {}
    for language, locale in LANGUAGES.items():
        context = chromium.new_context(
            viewport={"width": 1400, "height": 1000}, base_url=live_server.url, locale=locale
        )
        page = context.new_page()
        page.set_default_timeout(20_000)
        _log_in(page, operator, "/admin/")
        assert page.locator("html").get_attribute("lang") == language

        # The try page: the tool step as a card (name, arguments, result), the raw events folded.
        runs[language] = _ask(page, agent, "成都今天天气怎么样?")
        section = page.locator("section.try-run").first
        card = section.locator("article.tool-card")
        assert card.get_attribute("data-tool") == "test-echo" and card.get_attribute("data-status") == "succeeded"
        assert "Chengdu: light rain, 18 °C" in card.locator("pre.arguments").inner_text()
        assert card.locator("pre.result").inner_text() == "Chengdu: light rain, 18 °C"
        assert not section.locator("details.raw-events").evaluate("details => details.open")
        answer = page.locator(".bubble.assistant").last.inner_text()
        assert answer == "Weather for you — Chengdu: light rain, 18 °C. Take an umbrella."
        label = page.locator("label[for=id_agent]").inner_text()
        assert label == ("Agent:" if language == "en" else "智能体:")
        page.screenshot(path=str(ARTIFACTS / f"try-page-{language}.png"), full_page=True)

        # Its timeline: the exchange and the outcome first, then the waterfall, then the events.
        section.locator("h3 a").click()
        page.wait_for_selector("#run-summary")
        assert page.locator("#run-question").inner_text().endswith("成都今天天气怎么样?")
        assert page.locator("#run-answer").inner_text().endswith(answer)
        assert page.locator("#run-status").get_attribute("data-status") == "completed"
        assert page.locator("#run-status").inner_text() == ("Completed" if language == "en" else "已完成")
        kinds = page.locator("#waterfall .wf-row[data-kind]").evaluate_all("rows => rows.map(r => r.dataset.kind)")
        assert kinds == ["llm_call", "tool", "llm_call"]
        # Each bar starts no earlier than the one before it: they are laid out on one time axis.
        starts = page.locator("#waterfall rect.wf-bar").evaluate_all(
            "bars => bars.map(b => Number(b.getAttribute('x')))"
        )
        assert starts == sorted(starts) and starts[0] < starts[-1]
        types = page.locator("#events li").evaluate_all("items => items.map(i => i.dataset.type)")
        assert types[0] == "run.queued" and types[-1] == "run.completed" and types.count("message.delta") == 1
        tool_line = page.locator('#events li[data-type="tool.started"] .text').inner_text()
        expected = "Tool test-echo called with" if language == "en" else "调用工具 test-echo，参数"
        assert tool_line.startswith(expected)
        page.locator('#events li[data-type="tool.started"] details.raw summary').click()
        assert (
            '"tool_invocation_id"' in page.locator('#events li[data-type="tool.started"] details.raw pre').inner_text()
        )
        page.screenshot(path=str(ARTIFACTS / f"timeline-{language}.png"), full_page=True)
        context.close()

    # The eval comparison: from the regressed case to the run that failed it.
    baseline, candidate = _comparison(agent, Run.objects.get(pk=runs["zh-hans"]), Run.objects.get(pk=runs["en"]))
    for language, locale in LANGUAGES.items():
        context = chromium.new_context(viewport={"width": 1400, "height": 900}, base_url=live_server.url, locale=locale)
        page = context.new_page()
        page.set_default_timeout(20_000)
        _log_in(page, operator, "/admin/")
        page.goto(f"/evals/compare/?baseline={baseline.pk}&candidate={candidate.pk}")
        row = page.locator('#compare-cases tr[data-case="weather-chengdu"]')
        assert row.get_attribute("class") == "regression"
        assert page.locator("#compare-cases tbody tr").first.get_attribute("data-case") == "weather-chengdu"
        completion = page.locator('#compare-metrics tr[data-metric="task_completion_rate"] td').first.inner_text()
        assert completion.startswith("Task completion rate" if language == "en" else "任务完成率")
        page.screenshot(path=str(ARTIFACTS / f"eval-compare-{language}.png"), full_page=True)
        if language == "en":
            row.locator("a.failed-run").click()
            page.wait_for_selector("#run-summary")
            assert page.url.endswith(f"/monitor/runs/{runs['en']}/")
        context.close()
