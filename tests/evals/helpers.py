"""A suite whose four cases the fake model answers in known ways, so an eval run's metrics can
be counted by hand (see test_eval_runs)."""

from evals.models import EvalCase, EvalRun, EvalRunStatus, EvalSuite
from tests.support.waits import wait_for

SCRIPT = {
    "scenarios": [
        {
            "match": "count apples",
            "steps": [
                {"tool_calls": [{"name": "test-counter", "arguments": {"label": "eval-apples"}}]},
                {"content": "I counted the apples."},
            ],
        },
        {
            "match": "count pears",
            "steps": [
                {"tool_calls": [{"name": "test-counter", "arguments": {"label": "eval-pears"}}]},
                {"content": "ok"},
            ],
        },
        {"match": "hello", "steps": [{"content": "Hi there"}]},
        {
            "match": "say hi",
            # Arguments without the required "text": a call that fails validation.
            "steps": [{"tool_calls": [{"name": "test-echo", "arguments": {"times": 2}}]}, {"content": "hi"}],
        },
    ],
    "fallback": {"content": "I cannot help with that."},
}

# A model that answers everything with the fallback: no tools, no case's answer.
BROKEN_SCRIPT = {"scenarios": [], "fallback": {"content": "I cannot help with that."}}


def four_case_suite(name: str = "basics") -> EvalSuite:
    suite = EvalSuite.objects.create(name=name)
    cases = [
        EvalCase(
            suite=suite,
            name="apples",
            position=1,
            turns=[
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "Hello!"},
                {"role": "user", "content": "count apples please"},
            ],
            expected_tool_calls=[{"name": "test-counter", "arguments": {"label": "eval-apples"}}],
            tool_results={"test-counter": '{"recorded": "eval-apples"}'},
            answer_contains="counted",
            max_model_turns=3,
        ),
        EvalCase(
            suite=suite,
            name="pears",
            position=2,
            turns=[{"role": "user", "content": "count pears"}],
            expected_tool_calls=[{"name": "test-counter", "arguments_pattern": "plums"}],
        ),
        EvalCase(
            suite=suite,
            name="greeting",
            position=3,
            turns=[{"role": "user", "content": "hello"}],
            expect_no_tool=True,
            forbidden_tools=["test-counter"],
            answer_pattern="^Hi",
        ),
        EvalCase(
            suite=suite,
            name="say-hi",
            position=4,
            turns=[{"role": "user", "content": "say hi"}],
            expect_no_tool=True,
        ),
    ]
    for case in cases:
        case.full_clean()
        case.save()
    return suite


def eval_run_finished(eval_run: EvalRun) -> EvalRun:
    """The eval run once the worker's collection task has completed it (tests only read)."""
    return wait_for(
        lambda: EvalRun.objects.filter(pk=eval_run.pk, status=EvalRunStatus.COMPLETED).first(),
        timeout=60,
        interval=0.3,
        message="the collection task to finish the eval run",
    )
