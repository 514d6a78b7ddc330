"""A run's events as sentences: one readable line per event ("Model call 2 finished: 120 Token,
0.8 s", "Tool get_weather called with {…}"), each keeping its stored payload for the page's
raw view. Pure over the timeline's export (console.monitoring.timeline).

The streamed pieces of one answer (message.delta, one per chunk) read as one line: dozens of
rows of a few characters each would bury the steps around them.
"""

import json
from datetime import datetime

from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from console.monitoring.labels import (
    approval_channel_text,
    approval_status_text,
    guardrail_side_text,
    llm_call_title,
    run_status_text,
    step_status_text,
    stop_reason_text,
)
from console.monitoring.presenters import duration_text
from conversations.events import EventType

# Arguments longer than this are cut in the sentence; the raw payload keeps them whole.
ARGUMENT_CHARS = 160


def _compact(value) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value
    return text if len(text) <= ARGUMENT_CHARS else text[: ARGUMENT_CHARS - 1] + "…"


def _call_title(payload: dict, calls: dict) -> str:
    call = calls.get(payload.get("llm_call_id"))
    if call is not None:
        return llm_call_title(call)
    return llm_call_title(
        {"purpose": payload.get("purpose", "step"), "iteration": payload.get("iteration", "?"), "attempt": 1}
    )


def _run_ended(kind: str, p: dict) -> str:
    status = run_status_text(kind.removeprefix("run.")).lower()
    reason = stop_reason_text(p.get("stop_reason", "")).lower()
    text = _("Run %(status)s: %(reason)s") % {"status": status, "reason": reason} if reason else status
    if p.get("error"):
        text += " · " + p["error"].strip().splitlines()[0]
    return text


def _sentence(kind: str, p: dict, calls: dict) -> str:
    if kind == EventType.RUN_QUEUED:
        if p.get("reason"):
            return _("Queued again: %(reason)s") % {"reason": p["reason"]}
        if p.get("waiting_for"):
            return _("Queued behind %(count)s earlier runs of this conversation") % {"count": len(p["waiting_for"])}
        return _("Queued (agent version %(version)s)") % {"version": p.get("agent_version", "?")}
    if kind == EventType.RUN_RUNNING:
        return _("Taken by worker %(worker)s") % {"worker": p.get("worker", "?")}
    if kind == EventType.RUN_REQUEUED:
        if p.get("by"):
            return _("Requeued by %(name)s: %(reason)s") % {"name": p["by"], "reason": p.get("reason", "")}
        return _("Back to the queue: %(reason)s") % {"reason": p.get("reason", "")}
    if kind == EventType.RUN_RETRIED:
        return _("Retried by %(name)s from its last good step") % {"name": p.get("by", "?")}
    if kind == EventType.RUN_AWAITING_APPROVAL:
        return _("Parked: waiting for an approval")
    if kind == EventType.RUN_AWAITING_CHILDREN:
        return _("Parked: waiting for %(count)s delegated runs") % {"count": len(p.get("children", []))}
    if kind == EventType.RUN_CANCEL_REQUESTED:
        return _("Cancel requested by %(name)s") % {"name": p.get("by") or _("the system")}
    if kind in (EventType.RUN_COMPLETED, EventType.RUN_FAILED, EventType.RUN_CANCELLED, EventType.RUN_EXPIRED):
        return _run_ended(kind, p)
    if kind == EventType.LLM_CALL_STARTED:
        return _("%(call)s started (%(model)s)") % {"call": _call_title(p, calls), "model": p.get("model", "?")}
    if kind == EventType.LLM_CALL_COMPLETED:
        call = calls.get(p.get("llm_call_id")) or {}
        text = _("%(call)s finished: %(tokens)s Token, %(duration)s") % {
            "call": _call_title(p, calls),
            "tokens": (p.get("usage") or {}).get("total_tokens", "?"),
            "duration": duration_text(call.get("latency_ms")),
        }
        if p.get("tool_calls"):
            text += " · " + _("asks for %(tools)s") % {"tools": ", ".join(p["tool_calls"])}
        return text
    if kind == EventType.LLM_CALL_FAILED:
        return _("%(call)s failed: %(error)s") % {"call": _call_title(p, calls), "error": p.get("error", "")}
    if kind == EventType.TOOL_STARTED:
        return _("Tool %(tool)s called with %(arguments)s") % {
            "tool": p.get("tool", "?"),
            "arguments": _compact(p.get("arguments")),
        }
    if kind == EventType.TOOL_COMPLETED:
        status = step_status_text({"kind": "tool_invocation", "status": p.get("status", "")})
        text = _("Tool %(tool)s finished: %(status)s, %(duration)s") % {
            "tool": p.get("tool", "?"),
            "status": status.lower(),
            "duration": duration_text(p.get("latency_ms")),
        }
        return text + (" · " + _("result trimmed") if p.get("truncated") else "")
    if kind == EventType.TOOL_PROGRESS:
        return _("Tool %(tool)s reports %(details)s") % {
            "tool": p.get("tool", "?"),
            "details": _compact(p.get("details")),
        }
    if kind == EventType.APPROVAL_REQUESTED:
        text = _("Approval #%(id)s requested for %(tool)s with %(arguments)s") % {
            "id": p.get("approval_id"),
            "tool": p.get("tool", "?"),
            "arguments": _compact(p.get("arguments")),
        }
        return text + (f" · {p['why']}" if p.get("why") else "")
    if kind in (EventType.APPROVAL_DECIDED, EventType.APPROVAL_EXPIRED):
        text = _("Approval #%(id)s decided: %(status)s") % {
            "id": p.get("approval_id"),
            "status": approval_status_text(p.get("status", "")).lower(),
        }
        if p.get("decided_by"):
            text += " " + _("by %(name)s") % {"name": p["decided_by"]}
        if p.get("channel"):
            text += " " + _("via %(channel)s") % {"channel": approval_channel_text(p["channel"])}
        if p.get("edited"):
            text += " · " + _("with edited arguments")
        return text + (f": {p['reason']}" if p.get("reason") else "")
    if kind == EventType.APPROVAL_ESCALATED:
        return _("Approval #%(id)s escalated after %(minutes)s minutes waiting for %(tool)s") % {
            "id": p.get("approval_id"),
            "minutes": p.get("waited_minutes", "?"),
            "tool": p.get("tool", "?"),
        }
    if kind == EventType.APPROVAL_CANCELLED:
        return _("Approval #%(id)s cancelled: %(reason)s") % {"id": p.get("approval_id"), "reason": p.get("reason")}
    if kind == EventType.GUARDRAIL_TRIGGERED:
        return _("Guardrail on the %(side)s: %(outcome)s (%(count)s matches)") % {
            "side": guardrail_side_text(p.get("side", "")).lower(),
            "outcome": p.get("outcome", "?"),
            "count": len(p.get("triggers", [])),
        }
    if kind == EventType.PART_CONVERTED:
        return _("%(kind)s %(name)s turned into text by %(method)s (%(chars)s characters)") % {
            "kind": p.get("kind", "?"),
            "name": p.get("name", "?"),
            "method": p.get("method", "?"),
            "chars": p.get("chars", 0),
        }
    if kind == EventType.ANSWER_REPAIR:
        errors = p.get("errors") or []
        text = _("Answer not in the schema, sent back to the model (repair %(repair)s of %(of)s)") % {
            "repair": p.get("repair", "?"),
            "of": p.get("of", "?"),
        }
        return text + (" · " + _compact(errors[0]) if errors else "")
    return kind


def _offset(created_at: str, origin: datetime | None) -> str:
    if origin is None:
        return "–"
    milliseconds = int((datetime.fromisoformat(created_at) - origin).total_seconds() * 1000)
    return ("+" if milliseconds >= 0 else "−") + duration_text(abs(milliseconds))


def event_lines(*, export: dict) -> list[dict]:
    """One line per event, in order; consecutive streamed pieces of one model call make one line
    (its `raw` lists every event it stands for, `raw_json` their stored payloads)."""
    run = export["run"]
    start = run["started_at"] or run["created_at"]
    origin = datetime.fromisoformat(start) if start else None
    calls = {step["id"]: step for step in export["steps"] if step["kind"] == "llm_call"}
    lines: list[dict] = []
    for event in export["events"]:
        kind, payload = event["type"], event["payload"] or {}
        last = lines[-1] if lines else None
        if (
            kind == EventType.MESSAGE_DELTA
            and last
            and last["type"] == kind
            and last["llm_call_id"] == payload.get("llm_call_id")
        ):
            last["streamed"] += payload.get("text", "")
            last["raw"].append(event)
            last["last_seq"] = event["seq"]
            continue
        line = {
            "seq": event["seq"],
            "last_seq": event["seq"],
            "type": kind,
            "at": event["created_at"],
            "offset_text": _offset(event["created_at"], origin),
            "raw": [event],
        }
        if kind == EventType.MESSAGE_DELTA:
            line.update(llm_call_id=payload.get("llm_call_id"), streamed=payload.get("text", ""))
        else:
            line["text"] = _sentence(kind, payload, calls)
        lines.append(line)
    for line in lines:
        if line["type"] == EventType.MESSAGE_DELTA:
            line["text"] = ngettext(
                "%(call)s streamed %(count)s piece of text: “%(text)s”",
                "%(call)s streamed %(count)s pieces of text: “%(text)s”",
                len(line["raw"]),
            ) % {
                "call": _call_title({"llm_call_id": line["llm_call_id"]}, calls),
                "count": len(line["raw"]),
                "text": _compact(line["streamed"]),
            }
        # The summary names the events (seq and type): the fold holds what they stored.
        payloads = [event["payload"] for event in line["raw"]]
        line["raw_json"] = json.dumps(payloads[0] if len(payloads) == 1 else payloads, ensure_ascii=False, indent=2)
    return lines
