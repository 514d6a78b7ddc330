"""Replaying production runs on a version (evals.replays): the demo's live traffic replayed on
the degraded draft reports the regressions seed-000's suite reports; a replayed write is given its
recorded result and never reaches the counting service again; the filter narrows; bad input and
missing permissions are refused."""

import json
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse
from django.utils import timezone

from agents.models import Agent
from agents.releases import ReleaseRefused, version_publish
from agents.services import agent_version_current
from bench import counting_service
from bench.chaos_setup import WRITE_TOOL, chaos_agent, chaos_script
from conversations.models import TERMINAL_STATUSES, Approval, Run, RunFeedback, ToolInvocation
from conversations.services import conversation_create
from demo.suite import DEMO_SUITE
from engine.admission import message_post
from engine.approvals import approval_decide
from engine.forks import ForkRequest, run_fork
from evals.jsonl import case_from_line, case_to_line
from evals.models import EvalCase, EvalResult, EvalRun, EvalSuite, ReleaseGate
from evals.replays import ReplayFilter, ReplayInvalid, ReplayNotAllowed, replay_runs_select, replay_start
from evals.scoring import Observation, score_run
from evals.services import EvalNotAllowed, eval_cases_import, eval_run_collect, eval_run_start
from fakellm.testing import serve_app_in_thread
from tests.evals.helpers import SCRIPT, eval_run_finished
from tests.support.factories import ModelConfigFactory, make_agent
from tests.support.llm import agent_on
from tests.support.runs import advance, ask, start_run
from tests.support.waits import wait_for

pytestmark = pytest.mark.django_db


def _regressions(out: str) -> set[str]:
    return {line.split()[0] for line in out.splitlines() if line.endswith("REGRESSION") and " " in line}


def _live_traffic(agent: Agent) -> list[str]:
    """Seed-000's conversations posted to the agent as its end users would (the published
    version answers), each user turn once the run before it has ended; their run ids."""
    runs = []
    for case in EvalSuite.objects.get(name=DEMO_SUITE).cases.all():
        conversation = conversation_create(agent=agent)
        for turn in case.turns:
            if turn["role"] != "user":
                continue
            run = message_post(conversation=conversation, content=turn["content"])
            wait_for(
                lambda run=run: Run.objects.filter(pk=run.pk, status__in=TERMINAL_STATUSES).exists(),
                timeout=60,
                message=f"run {run.pk}",
            )
            runs.append(run.pk)
    return runs


def test_replaying_the_demo_traffic_on_the_degraded_draft_reports_the_suites_regressions(worker, fake_llm, capsys):
    call_command("agentry_seed_demo", "--degraded-version", llm_base_url=fake_llm.api_base, no_stream=True)
    agent = Agent.objects.get(slug="customer-service")
    published, draft = agent.published_version, agent_version_current(agent=agent)
    runs = _live_traffic(agent)
    assert Run.objects.filter(pk__in=runs, stop_reason="final_answer").count() == len(runs) == 7

    # The suite's own verdict on the draft, for reference.
    with pytest.raises(SystemExit):
        call_command("agentry_eval", agent.slug, suite=DEMO_SUITE, version="draft", against="published")
    suite_regressions = _regressions(capsys.readouterr().out)
    assert {"task_completion_rate", "tool_hit_rate"} <= suite_regressions

    # Two eval runs of one version on a busy test machine differ in latency by more than the
    # defaults (tens of milliseconds of the fake model's, which a loaded machine can multiply):
    # the costs and the latency get room, the rates none.
    call_command(
        "agentry_replay",
        agent.slug,
        version="published",
        against="published",
        max_cost_increase=100,
        max_latency_increase=100,
    )
    out = capsys.readouterr().out
    assert "no regression" in out and not _regressions(out)
    replayed = EvalRun.objects.filter(suite__replay__isnull=False).latest("started_at")
    assert replayed.metrics["task_completion_rate"] == 1.0 and replayed.metrics["tool_hit_rate"] == 1.0
    # Every call the replays made was given its recorded result: none reached a tool.
    replay_runs = EvalResult.objects.filter(eval_run__suite=replayed.suite).values("run")
    calls = ToolInvocation.objects.filter(run__in=replay_runs)
    assert calls.exists() and not calls.filter(simulated=False).exists()

    with pytest.raises(SystemExit) as exited:
        call_command(
            "agentry_replay",
            agent.slug,
            version="draft",
            against="published",
            max_cost_increase=100,
            max_latency_increase=100,
        )
    assert exited.value.code == 1
    out = capsys.readouterr().out
    regressions = _regressions(out)
    assert {"task_completion_rate", "tool_hit_rate"} <= regressions
    # The same rates regress as in the suite's comparison, no more and no fewer.
    rates = {name for name in regressions if name.endswith("_rate")}
    assert rates == {name for name in suite_regressions if name.endswith("_rate")}
    candidate = EvalRun.objects.filter(suite__replay__isnull=False, agent_version=draft).latest("started_at")
    assert candidate.metrics["tool_hit_rate"] == 0.0
    # The replay's verdict per conversation matches the suite's: the questions that need the
    # weather tool fail, those that need no tool pass.
    asked = {str(r.run_id): r.passed for r in EvalResult.objects.filter(eval_run=candidate)}
    by_question = {}
    for result in EvalResult.objects.filter(eval_run=candidate).select_related("case"):
        by_question.setdefault(result.case.turns[-1]["content"], set()).add(result.passed)
    assert by_question["你是谁？"] == {True}
    assert by_question["今天心情不错，陪我聊聊吧。"] == {True}
    assert by_question["我在成都，明天天气如何？"] == {False}
    assert by_question["我在北京，明天天气如何？"] == {False}
    assert len(asked) == 7 and published.number == 1


# --- writes never repeat -------------------------------------------------------------------------


@pytest.fixture
def booked(fake_llm, no_enqueue):
    """A chaos agent's production run that booked order 7 on the counting service (approved)."""
    tally = counting_service.Tally()
    url, stop = serve_app_in_thread(counting_service.create_app(tally))
    boss = get_user_model().objects.create_superuser("boss", password="x")
    agent = chaos_agent(
        llm_api_base=fake_llm.api_base, model=fake_llm.script("replay", chaos_script(0)), counting_url=url
    )
    run = advance(start_run(agent, "order 7"))
    approval_decide(approval_id=Approval.objects.get(run=run).pk, user=boss, decision="approve", channel="api")
    run = advance(run)
    assert run.status == "completed" and tally.summary()["keys"] == 1
    yield {"run": run, "agent": agent, "tally": tally, "boss": boss}
    stop()


def test_replays_never_book_again_the_write_gets_its_recorded_result(booked):
    run, tally = booked["run"], booked["tally"]
    before = tally.summary()
    recorded = ToolInvocation.objects.get(run=run, tool_name=WRITE_TOOL).result
    for _ in range(3):
        eval_run = replay_start(
            filter=ReplayFilter(agent=booked["agent"]), candidate=run.agent_version, user=booked["boss"]
        )
        result = EvalResult.objects.get(eval_run=eval_run)
        replay = advance(result.run)
        assert replay.status == "completed", replay.error
        write = ToolInvocation.objects.get(run=replay, tool_name=WRITE_TOOL)
        assert (write.simulated, write.status, write.result) == (True, "succeeded", recorded)
        assert not Approval.objects.filter(run=replay).exists()
        eval_run = eval_run_collect(eval_run_id=eval_run.pk)
        result.refresh_from_db()
        assert result.passed is True, result.checks
        assert {c["kind"] for c in result.checks} >= {"tool_call", "answer_equals"}
    assert tally.summary() == before  # zero repeated side effects over three replays
    case = EvalCase.objects.filter(suite__replay__isnull=False).first()
    assert [c["name"] for c in case.recorded_calls] == [WRITE_TOOL, "mojitianqi-DayWeather"]
    assert case.answer_equals == "order 7 recorded" and case.live_reads is False and case.tool_results == {}


def test_a_call_the_original_did_not_make_fails_without_running(booked, fake_llm):
    """The replay's user message is the original's; a candidate that books another order makes a
    call nobody recorded: it fails, unrun, and the tally stays."""
    before = booked["tally"].summary()
    eval_run = replay_start(
        filter=ReplayFilter(agent=booked["agent"]), candidate=booked["run"].agent_version, user=None
    )
    case = EvalCase.objects.get(suite=eval_run.suite)
    case.recorded_calls = [{**case.recorded_calls[0], "arguments": {"order": "8"}}, *case.recorded_calls[1:]]
    case.save(update_fields=["recorded_calls"])
    again = eval_run_start(suite=case.suite, agent_version=booked["run"].agent_version, repetitions=1)
    replay = advance(EvalResult.objects.get(eval_run=again).run)
    write = ToolInvocation.objects.get(run=replay, tool_name=WRITE_TOOL)
    assert (write.simulated, write.status) == (False, "error") and "was not run" in write.result
    assert booked["tally"].summary() == before


def test_the_answer_must_be_the_same_text():
    expectations = {"answer_equals": "order 7 recorded"}
    same = score_run(expectations, Observation(stop_reason="final_answer", answer=" order 7 recorded\n"))
    other = score_run(expectations, Observation(stop_reason="final_answer", answer="order 7 booked"))
    stopped = score_run(expectations, Observation(stop_reason="max_iterations", answer="order 7 recorded"))
    assert [c["passed"] for c in same if c["kind"] == "answer_equals"] == [True]
    assert [c["passed"] for c in other if c["kind"] == "answer_equals"] == [False]
    assert [c["passed"] for c in stopped if c["kind"] == "answer_equals"] == [False]


# --- the filter ------------------------------------------------------------------------------------


@pytest.fixture
def traffic(fake_llm, no_enqueue):
    """Four production runs of one agent an hour apart (newest last), and runs never replayed:
    an evaluation's, a fork's, a delegated child's and one still queued."""
    agent = agent_on(fake_llm, SCRIPT, tools=["test-counter", "test-echo"], approval={"test-counter": "never"})
    now = timezone.now()
    runs = [ask(agent, text) for text in ("hello", "count apples please", "hello", "say hi")]
    for age, run in zip((4, 3, 2, 1), runs, strict=True):
        Run.objects.filter(pk=run.pk).update(created_at=now - timedelta(hours=age))
    Run.objects.filter(pk=runs[1].pk).update(stop_reason="max_iterations")
    RunFeedback.objects.create(run=runs[2], rating=-1)
    RunFeedback.objects.create(run=runs[3], rating=1)
    fork = advance(run_fork(source=runs[0], request=ForkRequest(step=1), user=None))
    child = ask(agent, "hello")
    Run.objects.filter(pk=child.pk).update(parent_run=runs[0])
    suite = EvalSuite.objects.create(name="plain")
    EvalCase.objects.create(suite=suite, name="c", turns=[{"role": "user", "content": "hello"}])
    evaluated = advance(
        EvalResult.objects.get(
            eval_run=eval_run_start(suite=suite, agent_version=runs[0].agent_version, repetitions=1)
        ).run
    )
    queued = start_run(agent, "hello")
    assert {fork.status, evaluated.status} == {"completed"} and queued.status == "queued"
    return {"agent": agent, "runs": runs, "now": now}


def _picked(**fields) -> list:
    return [run.pk for run in replay_runs_select(ReplayFilter(**fields))]


def test_each_filter_narrows_the_runs_picked(traffic):
    agent, runs, now = traffic["agent"], traffic["runs"], traffic["now"]
    newest_first = [run.pk for run in reversed(runs)]
    assert _picked(agent=agent) == newest_first
    assert _picked(agent=agent, limit=2) == newest_first[:2]
    assert _picked(agent=agent, version=runs[0].agent_version.number) == newest_first
    assert _picked(agent=agent, version=99) == []
    assert _picked(agent=agent, since=now - timedelta(hours=2, minutes=30)) == newest_first[:2]
    assert _picked(agent=agent, until=now - timedelta(hours=2, minutes=30)) == newest_first[2:]
    window = {"since": now - timedelta(hours=3, minutes=30), "until": now - timedelta(hours=1, minutes=30)}
    assert _picked(agent=agent, **window) == [runs[2].pk, runs[1].pk]
    assert _picked(agent=agent, stop_reasons=("max_iterations",)) == [runs[1].pk]
    assert _picked(agent=agent, stop_reasons=("max_iterations", "final_answer")) == newest_first
    assert _picked(agent=agent, negative_feedback_only=True) == [runs[2].pk]
    assert _picked(agent=make_agent()) == []


def test_a_replay_case_expects_what_its_run_did(traffic):
    suite_run = replay_start(
        filter=ReplayFilter(agent=traffic["agent"]), candidate=traffic["runs"][0].agent_version, user=None
    )
    cases = {case.turns[-1]["content"]: case for case in suite_run.suite.cases.all()}
    apples = EvalCase.objects.get(suite=suite_run.suite, name=f"run {traffic['runs'][1].pk}")
    # It ended on a limit: no answer to expect, its calls are.
    assert apples.expected_tool_calls == [{"name": "test-counter", "arguments": {"label": "eval-apples"}}]
    assert apples.answer_equals == "" and not apples.expect_no_tool
    assert [c["name"] for c in apples.recorded_calls] == ["test-counter"]
    hello = EvalCase.objects.get(suite=suite_run.suite, name=f"run {traffic['runs'][0].pk}")
    assert hello.expect_no_tool and hello.answer_equals == "Hi there" and hello.recorded_calls == []
    assert len(cases) == 3 and suite_run.suite.replay["runs"] == [str(r.pk) for r in reversed(traffic["runs"])]
    assert (
        "4 production runs" in suite_run.suite.description and "exactly the same answer" in suite_run.suite.description
    )


def test_a_rubric_is_judged_with_the_original_answer_as_reference(traffic):
    agent, version = traffic["agent"], traffic["runs"][0].agent_version
    with pytest.raises(ReplayInvalid, match="judge"):
        replay_start(filter=ReplayFilter(agent=agent), candidate=version, user=None, rubric="Greets the user.")
    judge = version.agent.model_config
    eval_run = replay_start(
        filter=ReplayFilter(agent=agent, limit=1), candidate=version, user=None, rubric="Greets.", judge=judge
    )
    case = eval_run.suite.cases.get()
    assert eval_run.suite.judge_model_config == judge and case.answer_equals == ""
    assert case.answer_rubric.startswith("Greets.") and case.answer_rubric.endswith("hi")


def test_bad_filters_are_refused(traffic):
    agent = traffic["agent"]
    for fields in ({"limit": 0}, {"limit": 501}, {"limit": True}, {"stop_reasons": ("tired",)}):
        with pytest.raises(ReplayInvalid):
            ReplayFilter(agent=agent, **fields)
    with pytest.raises(ReplayInvalid):
        ReplayFilter(agent=agent, since=traffic["now"], until=traffic["now"])
    version = traffic["runs"][0].agent_version
    with pytest.raises(ReplayInvalid, match="No production run"):
        replay_start(filter=ReplayFilter(agent=agent, version=99), candidate=version, user=None)
    other = make_agent()
    with pytest.raises(ReplayInvalid, match="another agent"):
        replay_start(filter=ReplayFilter(agent=other), candidate=version, user=None)
    assert not EvalSuite.objects.filter(replay__isnull=False).exists()


# --- the command -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arguments",
    [
        ["nobody", "--version", "draft"],
        ["{agent}", "--version", "7"],
        ["{agent}", "--version", "draft", "--against", "9"],
        ["{agent}", "--version", "draft", "--since", "yesterday"],
        ["{agent}", "--version", "draft", "--until", "2026-13-45T99:00"],
        ["{agent}", "--version", "draft", "--limit", "0"],
        ["{agent}", "--version", "draft", "--limit", "501"],
        ["{agent}", "--version", "draft", "--stop-reason", "tired"],
        ["{agent}", "--version", "draft", "--since", "2030-01-01T00:00", "--until", "2029-01-01T00:00"],
        ["{agent}", "--version", "draft", "--from-version", "99"],
        ["{agent}", "--version", "draft", "--rubric", "Greets."],
        ["{agent}", "--version", "draft", "--rubric", "Greets.", "--judge", "no such model"],
        ["{agent}", "--version", "draft", "--user", "ghost"],
        ["{agent}", "--version", "draft", "--max-rate-drop", "-1"],
    ],
)
def test_the_command_refuses_bad_input(traffic, arguments):
    arguments = [a.replace("{agent}", traffic["agent"].slug) for a in arguments]
    with pytest.raises(CommandError):
        call_command("agentry_replay", *arguments)
    assert not EvalRun.objects.filter(suite__replay__isnull=False).exists()


def test_the_command_needs_a_user_who_may_fork_runs(traffic):
    User = get_user_model()
    User.objects.create_user(username="plain", password="pw")
    with pytest.raises(CommandError, match="fork"):
        call_command("agentry_replay", traffic["agent"].slug, "--version", "draft", "--user", "plain")
    forker = User.objects.create_user(username="forker", password="pw")
    forker.user_permissions.add(Permission.objects.get(content_type__app_label="conversations", codename="fork_run"))
    with pytest.raises(CommandError, match="did not finish"):
        call_command(
            "agentry_replay", traffic["agent"].slug, "--version", "draft", "--user", "forker", "--timeout", "0"
        )
    assert EvalRun.objects.get(suite__replay__isnull=False).created_by == forker


# --- the admin page --------------------------------------------------------------------------------


def _operator(*perms: str, groups=()):
    user = get_user_model().objects.create_user(
        username="op-" + "-".join(p.split(".")[1] for p in perms), password="pw", is_staff=True
    )
    for perm in perms:
        app, codename = perm.split(".")
        user.user_permissions.add(Permission.objects.get(content_type__app_label=app, codename=codename))
    user.groups.set(groups)
    return user


REPLAYER = ("conversations.fork_run", "evals.add_evalrun", "evals.view_evalrun")
URL = "/admin/evals/evalrun/replay/"


def test_the_admin_page_starts_a_replay_and_shows_its_eval_run(client, traffic):
    client.force_login(_operator(*REPLAYER))
    assert reverse("admin:evals_evalrun_replay") == URL
    assert URL in client.get(reverse("admin:evals_evalrun_changelist")).content.decode()
    assert client.get(URL).status_code == 200
    response = client.post(
        URL, {"agent": traffic["agent"].pk, "version": "draft", "limit": "3", "stop_reasons": ["final_answer"]}
    )
    eval_run = EvalRun.objects.get(suite__replay__isnull=False)
    assert response.status_code == 302 and response["Location"] == reverse(
        "admin:evals_evalrun_change", args=[eval_run.pk]
    )
    assert eval_run.suite.cases.count() == 3 and eval_run.created_by.username.startswith("op-")


@pytest.mark.parametrize(
    "changes",
    [
        {"limit": "0"},
        {"limit": "501"},
        {"limit": "x"},
        {"stop_reasons": ["tired"]},
        {"since": "yesterday"},
        {"since": "2030-01-01 00:00", "until": "2029-01-01 00:00"},
        {"version": "42"},
        {"version": ""},
        {"agent": "999999"},
        {"from_version": "99"},
        {"rubric": "Greets."},
        {"name": "n" * 101},
        {"judge": "999999", "rubric": "Greets."},
    ],
)
def test_the_admin_page_answers_bad_input_with_a_400(client, traffic, changes):
    client.force_login(_operator(*REPLAYER))
    form = {"agent": traffic["agent"].pk, "version": "draft", "limit": "50", **changes}
    response = client.post(URL, form)
    assert response.status_code == 400 and "errorlist" in response.content.decode(), changes
    assert not EvalRun.objects.filter(suite__replay__isnull=False).exists()


def test_the_admin_page_needs_the_permission_to_fork_runs_and_the_agent(client, traffic):
    form = {"agent": traffic["agent"].pk, "version": "draft", "limit": "50"}
    for perms in (("evals.add_evalrun", "evals.view_evalrun"), ("conversations.fork_run", "evals.view_evalrun")):
        client.force_login(_operator(*perms))
        assert client.get(URL).status_code == 403
        assert client.post(URL, form).status_code == 403
        assert URL not in client.get(reverse("admin:evals_evalrun_changelist")).content.decode()
    finance = Group.objects.create(name="finance")
    traffic["agent"].allowed_groups.add(finance)
    outsider = _operator(*REPLAYER)
    client.force_login(outsider)
    assert client.post(URL, form).status_code == 400  # not offered: not a valid choice
    with pytest.raises(EvalNotAllowed):
        replay_start(
            filter=ReplayFilter(agent=traffic["agent"]), candidate=traffic["runs"][0].agent_version, user=outsider
        )
    client.force_login(_operator(*REPLAYER, "evals.change_evalrun", groups=[finance]))
    assert client.post(URL, form).status_code == 302
    plain = _operator("evals.add_evalrun")
    with pytest.raises(ReplayNotAllowed):
        replay_start(
            filter=ReplayFilter(agent=traffic["agent"]), candidate=traffic["runs"][0].agent_version, user=plain
        )


def test_recorded_calls_travel_with_the_jsonl_lines(traffic):
    eval_run = replay_start(
        filter=ReplayFilter(agent=traffic["agent"]), candidate=traffic["runs"][0].agent_version, user=None
    )
    lines = [case_to_line(case) for case in eval_run.suite.cases.all()]
    apples = next(json.loads(line) for line in lines if json.loads(line)["recorded_calls"])
    assert apples["recorded_calls"][0]["name"] == "test-counter"
    assert eval_cases_import(suite_name="copied", lines=lines) == 4
    copied = EvalSuite.objects.get(name="copied")
    assert sorted(c.recorded_calls for c in copied.cases.all()) == sorted(
        json.loads(line)["recorded_calls"] for line in lines
    )
    assert case_from_line(lines[0], number=1)["answer_equals"] == json.loads(lines[0])["answer_equals"]


# --- the release gate ------------------------------------------------------------------------------

# Answers the hello case as SCRIPT does, but counts no apples: the suite (hello only) cannot tell.
LAZY_SCRIPT = {
    "scenarios": [
        {"match": "count apples", "steps": [{"content": "Apples counted."}]},
        {"match": "hello", "steps": [{"content": "Hi there"}]},
    ],
    "fallback": {"content": "I cannot help with that."},
}


@pytest.mark.django_db(transaction=True)
def test_the_release_gate_replays_the_windows_traffic_on_both_versions(worker, fake_llm, admin_user):
    agent = agent_on(fake_llm, SCRIPT, tools=["test-counter", "test-echo"], approval={"test-counter": "never"})
    suite = EvalSuite.objects.create(name="hello only")
    EvalCase.objects.create(suite=suite, name="hello", turns=[{"role": "user", "content": "hello"}])
    # Two eval runs on a busy machine differ in latency by more than the default: only the rates
    # are under test here.
    ReleaseGate.objects.create(
        agent=agent, suite=suite, replay_hours=24, max_cost_increase=100.0, max_latency_increase=100.0
    )
    good = agent_version_current(agent=agent)
    eval_run_finished(eval_run_start(suite=suite, agent_version=good, repetitions=1))
    version_publish(agent=agent, user=admin_user, note="first")  # a first release: nothing to replay against

    for text in ("count apples please", "hello"):
        run = message_post(conversation=conversation_create(agent=agent), content=text)
        wait_for(lambda run=run: Run.objects.filter(pk=run.pk, status__in=TERMINAL_STATUSES).exists(), timeout=30)

    agent.refresh_from_db()
    agent.model_config = ModelConfigFactory(base_url=fake_llm.api_base, model=fake_llm.script("lazy", LAZY_SCRIPT))
    agent.save()
    lazy = agent_version_current(agent=agent)
    eval_run_finished(eval_run_start(suite=suite, agent_version=lazy, repetitions=1))
    with pytest.raises(ReleaseRefused, match="replays are under way"):
        version_publish(agent=agent, user=admin_user, note="lazy")
    for version in (lazy, good):
        replayed = wait_for(
            lambda version=version: EvalRun.objects.filter(
                suite__replay__agent=agent.pk, agent_version=version
            ).first(),
            timeout=30,
            message="the gate's replay",
        )
        eval_run_finished(replayed)
    assert EvalSuite.objects.filter(replay__agent=agent.pk).count() == 1
    with pytest.raises(ReleaseRefused, match="regressions against the published version") as refused:
        version_publish(agent=agent, user=admin_user, note="lazy")
    assert "task_completion_rate" in str(refused.value) and "tool_hit_rate" in str(refused.value)
    agent.refresh_from_db()
    assert agent.published_version_id == good.pk
