from datetime import datetime, timedelta
from decimal import Decimal

from alerts.models import AlertRule
from conversations.models import Approval, ToolInvocation
from tests.support.ledger import ledger_call, ledger_run


def make_rule(**fields) -> AlertRule:
    fields.setdefault("name", f"{fields['kind']} rule")
    fields["threshold"] = Decimal(str(fields["threshold"]))
    rule = AlertRule(**fields)
    rule.full_clean()
    rule.save()
    return rule


def pending_approval(agent, *, created_at: datetime) -> Approval:
    run = ledger_run(agent, status="awaiting_approval", stop_reason="")
    call = ledger_call(run, started_at=created_at - timedelta(seconds=1))
    invocation = ToolInvocation.objects.create(
        run=run, llm_call=call, tool_name="test-counter", tool_call_id="call-1", idempotency_key=f"{run.pk}:call-1"
    )
    approval = Approval.objects.create(
        invocation=invocation, run=run, tool_call_id="call-1", arguments={}, arguments_hash="0" * 64
    )
    Approval.objects.filter(pk=approval.pk).update(created_at=created_at)
    return approval
