"""Seed 000's eval suite on the shipped fake model, through the real queue: the demo as seeded
passes every case, and the draft whose weather tool is described vaguely is caught regressing."""

import json

import pytest
from django.core.management import call_command

from agents.models import Agent, AgentTool, AgentVersion
from agents.services import agent_version_current
from demo.suite import DEMO_CASES, DEMO_SUITE
from evals.models import EvalResult, EvalRun, EvalSuite
from tools.models import ToolDefinition

pytestmark = pytest.mark.django_db
WEATHER = "mojitianqi-DayWeather"
ROUTE_TOOLS = {"gaodedetu-plan_driving", "gaodedetu-plan_bicycle"}


def _seed(fake_llm, *flags):
    call_command("agentry_seed_demo", *flags, llm_base_url=fake_llm.api_base, no_stream=True)
    return Agent.objects.get(slug="customer-service")


def _latest_eval_run(version: AgentVersion) -> EvalRun:
    return EvalRun.objects.filter(suite__name=DEMO_SUITE, agent_version=version).latest("started_at")


def test_the_shipped_suite_is_the_seed_questions_and_the_guarded_cases():
    cases = [json.loads(line) for line in DEMO_CASES.read_text(encoding="utf-8").splitlines()]
    questions = [case["turns"][-1]["content"] for case in cases]
    assert questions[0] == "你是谁？" and questions[1] == "我在成都，明天天气如何？"
    assert "下雨" in questions[2] and "成都南站" in questions[2] and "重庆北站" in questions[3]
    # The rainy forecast expects the driving route, the dry one the cycling route, never the other.
    rainy, dry = cases[2], cases[3]
    assert "雨" in json.loads(rainy["tool_results"][WEATHER])["data"][0]["condition"]
    assert [c["name"] for c in rainy["expected_tool_calls"]] == [WEATHER, "gaodedetu-plan_driving"]
    assert rainy["forbidden_tools"] == ["gaodedetu-plan_bicycle"]
    assert "雨" not in json.loads(dry["tool_results"][WEATHER])["data"][0]["condition"]
    assert [c["name"] for c in dry["expected_tool_calls"]] == [WEATHER, "gaodedetu-plan_bicycle"]
    # A weather question that must not plan a route, and two that must call no tool at all.
    assert any(
        set(c.get("forbidden_tools", [])) == ROUTE_TOOLS and c["turns"][-1]["content"] != questions[1] for c in cases
    )
    assert sum(bool(c.get("expect_no_tool")) for c in cases) == 2
    # No case reaches a live tool: every call the model may make has its given result.
    assert not any(c["live_reads"] for c in cases)


def test_seeding_loads_the_suite_once_and_leaves_the_draft_alone(fake_llm):
    agent = _seed(fake_llm)
    version = agent_version_current(agent=agent)
    agent = _seed(fake_llm)
    suite = EvalSuite.objects.get(name=DEMO_SUITE)
    assert suite.cases.count() == len(DEMO_CASES.read_text(encoding="utf-8").splitlines()) == 6
    assert agent_version_current(agent=agent) == version
    assert agent.published_version_id is None


def test_seeding_again_keeps_an_operators_edits_and_reset_undoes_them(fake_llm):
    agent = _seed(fake_llm)
    agent.system_prompt = "你是一名只回答天气问题的客服。"
    agent.save(update_fields=["system_prompt"])
    case = EvalSuite.objects.get(name=DEMO_SUITE).cases.get(name="who-are-you")
    case.answer_contains = "天气客服"
    case.save(update_fields=["answer_contains"])
    EvalSuite.objects.get(name=DEMO_SUITE).cases.filter(name="small-talk-calls-no-tool").delete()

    agent = _seed(fake_llm)
    assert agent.system_prompt == "你是一名只回答天气问题的客服。"
    suite = EvalSuite.objects.get(name=DEMO_SUITE)
    assert suite.cases.get(name="who-are-you").answer_contains == "天气客服"
    # What was missing is seeded again.
    assert suite.cases.filter(name="small-talk-calls-no-tool").exists()

    agent = _seed(fake_llm, "--reset")
    assert agent.system_prompt.endswith("你是一名强子开发的智能客服。\n\n")
    assert suite.cases.get(name="who-are-you").answer_contains == "强子开发的智能客服"


def test_baseline_passes_and_the_degraded_draft_is_caught(worker, fake_llm, capsys):
    agent = _seed(fake_llm, "--degraded-version")
    published = agent.published_version
    assert published.number == 1
    draft = agent_version_current(agent=agent)
    assert draft != published
    weather = next(tool for tool in draft.snapshot["tools"] if tool["name"] == WEATHER)
    assert weather["description"] == "Returns data."
    # Degraded for this agent's draft only: the shared tool and the published version keep theirs.
    assert ToolDefinition.objects.get(name=WEATHER, workspace_id=agent.workspace_id).description.startswith(
        "获取国内指定日期的天气"
    )
    assert next(t for t in published.snapshot["tools"] if t["name"] == WEATHER)["description"].startswith("获取")

    call_command("agentry_eval", agent.slug, suite=DEMO_SUITE, version="published", against="published")
    assert "no regression" in capsys.readouterr().out
    baseline = _latest_eval_run(published)
    assert baseline.metrics["task_completion_rate"] == 1.0 and baseline.metrics["tool_hit_rate"] == 1.0
    assert baseline.metrics["wrong_call_rate"] == 0.0
    assert all(r.passed for r in EvalResult.objects.filter(eval_run=baseline))

    with pytest.raises(SystemExit) as exited:
        call_command("agentry_eval", agent.slug, suite=DEMO_SUITE, version="draft", against="published")
    assert exited.value.code == 1
    out = capsys.readouterr().out
    regressions = {line.split()[0] for line in out.splitlines() if line.endswith("REGRESSION") and " " in line}
    assert {"task_completion_rate", "tool_hit_rate"} <= regressions
    candidate = _latest_eval_run(draft)
    # The weather and route cases fail (the model did not call the vaguely described tool);
    # the cases that need no tool still pass.
    passed = {r.case.name: r.passed for r in EvalResult.objects.filter(eval_run=candidate).select_related("case")}
    assert passed == {
        "who-are-you": True,
        "weather-chengdu": False,
        "route-chengdu-rain-drives": False,
        "route-chongqing-dry-cycles": False,
        "weather-question-plans-no-route": False,
        "small-talk-calls-no-tool": True,
    }
    assert candidate.metrics["tool_hit_rate"] == 0.0

    # Seeding again (every start of scripts/dev.sh) keeps the degraded draft; --reset restores
    # the good description: the draft is the published configuration again.
    agent = _seed(fake_llm)
    assert agent_version_current(agent=agent) == draft
    agent = _seed(fake_llm, "--reset")
    assert agent_version_current(agent=agent).config_hash == published.config_hash
    assert not AgentTool.objects.filter(agent=agent).exclude(description_override="").exists()
