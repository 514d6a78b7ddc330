"""The words the timeline pages use for the ledger's stored values: statuses, stop reasons,
purposes. The models' choices already name them (and the catalogue translates those names);
the export keeps the stored values, so they are looked up here when a page is drawn."""

from django.utils.translation import gettext as _

from agents.models import RoutingRule
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


def _saw_text(saw) -> str:
    if isinstance(saw, list):
        return ", ".join(map(str, saw)) or _("none")
    return "–" if saw is None or saw == "" else str(saw)


def routing_text(routing: dict | None) -> str:
    """How the agent's routing rules chose the call's model (engine.routing), in words; empty
    for a call of an agent without rules."""
    if not routing:
        return ""
    if "model_config" not in routing and routing.get("rule") is not None:
        # The classifier's own call: which rule it labels the message for.
        return _("classifier of routing rule %(number)s %(name)s") % {
            "number": routing["rule"],
            "name": routing.get("name") or "",
        }
    if routing.get("rule") is None:
        text = _("routing: no rule matched, the agent's model")
    else:
        text = _("routed by rule %(number)s %(name)s (%(condition)s: %(saw)s) to %(model)s") % {
            "number": routing["rule"],
            "name": routing.get("name") or "",
            "condition": _label(RoutingRule.Condition, routing.get("condition", "")).lower(),
            "saw": _saw_text(routing.get("saw")),
            "model": routing["model_config"]["name"],
        }
    for tried in routing.get("unmatched") or ():
        if tried.get("error"):
            text += " · " + _("rule %(number)s did not match: %(error)s (%(saw)s)") % {
                "number": tried["rule"],
                "error": tried["error"],
                "saw": _saw_text(tried.get("saw")),
            }
    if routing.get("fallback"):
        text += " · " + _("the fallback model, after the routed one failed")
    return text
