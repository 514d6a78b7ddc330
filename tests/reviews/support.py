"""Rows for review queue tests: ended production runs and what makes a queue pick them."""

from datetime import timedelta

from django.utils import timezone

from conversations.models import GuardrailTrigger, RunFeedback, ToolInvocation
from evals.models import OnlineEvaluator, OnlineScore
from tests.support.ledger import ledger_call, ledger_run


def ended_run(agent, *, minutes_ago: float = 1, **fields):
    return ledger_run(agent, finished_at=timezone.now() - timedelta(minutes=minutes_ago), **fields)


def rated_bad(run, comment: str = "wrong"):
    return RunFeedback.objects.create(run=run, rating=-1, comment=comment)


def scored(run, score: float, evaluator: OnlineEvaluator | None = None):
    evaluator = (
        evaluator
        or OnlineEvaluator.objects.get_or_create(
            agent=run.agent, name="judge", defaults={"kind": OnlineEvaluator.Kind.REGEX, "config": {"pattern": "x"}}
        )[0]
    )
    return OnlineScore.objects.create(
        evaluator=evaluator, run=run, agent_version=run.agent_version, reason="sample", score=score, passed=score >= 0.5
    )


def guardrail_hit(run):
    return GuardrailTrigger.objects.create(run=run, side="output", rule_id=1, kind="terms", action="flag", matched="x")


def tool_failed(run, *, status: str = ToolInvocation.Status.ERROR):
    call = ledger_call(run, started_at=run.finished_at - timedelta(seconds=5))
    return ToolInvocation.objects.create(
        run=run,
        llm_call=call,
        tool_name="test-echo",
        tool_call_id=f"call-{ToolInvocation.objects.count()}",
        status=status,
        idempotency_key="k",
    )
