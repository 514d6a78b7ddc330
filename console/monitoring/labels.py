"""The words the timeline pages use for the ledger's stored values: statuses, stop reasons,
purposes. The models' choices already name them (and the catalogue translates those names);
the export keeps the stored values, so they are looked up here when a page is drawn."""

from django.utils.translation import gettext as _

from conversations.models import (
    Approval,
    ForkChange,
    GuardrailTrigger,
    LLMCall,
    RunStatus,
    StopReason,
    ToolInvocation,
)

_STATUS_CHOICES = {
    "llm_call": LLMCall.Status,
    "tool_invocation": ToolInvocation.Status,
    "run": RunStatus,
}


def _label(choices, value: str) -> str:
    """The choice's label; a value the code no longer knows is shown as stored."""
    try:
        return str(choices(value).label)
    except ValueError:
        return value or "–"


def step_status_text(step: dict) -> str:
    return _label(_STATUS_CHOICES[step["kind"]], step["status"])


def tool_status_text(status: str) -> str:
    return _label(ToolInvocation.Status, status)


def run_status_text(status: str) -> str:
    return _label(RunStatus, status)


def stop_reason_text(stop_reason: str) -> str:
    return _label(StopReason, stop_reason) if stop_reason else ""


def approval_status_text(status: str) -> str:
    return _label(Approval.Status, status)


def approval_channel_text(channel: str) -> str:
    return _label(Approval.Channel, channel) if channel else ""


def guardrail_side_text(side: str) -> str:
    return _label(GuardrailTrigger.Side, side)


def fork_change_text(kind: str) -> str:
    return _label(ForkChange, kind)


def purpose_text(purpose: str) -> str:
    return _label(LLMCall.Purpose, purpose)


def llm_call_title(step: dict) -> str:
    """Model call 2 (and which attempt, when it was tried again); a call made for another purpose
    than a step of the loop says which."""
    if step["purpose"] == LLMCall.Purpose.STEP:
        title = _("Model call %(number)s") % {"number": step["iteration"]}
    else:
        title = _("Model call %(number)s (%(purpose)s)") % {
            "number": step["iteration"],
            "purpose": purpose_text(step["purpose"]).lower(),
        }
    if step["attempt"] > 1:
        title += " · " + _("attempt %(attempt)s") % {"attempt": step["attempt"]}
    return title
