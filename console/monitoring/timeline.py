"""A run's whole story as one JSON document: the run (with what it was asked and what it
answered), each model call and tool call in order (request, response, tokens by kind, cost,
latency, arguments, result, approval and decider, delegated runs and their durations), its
guardrail triggers, the long-term memories it was shown and wrote, its events, and its forks
(the run it was forked from, the runs forked from it; copied calls are marked). What the user
sent besides text: the attachments their message carried (its parts), and what the run turned
into text for a model that does not take them (the pre-steps: PartText rows). The timeline
page shows it and copies it; a fixed number of queries whatever the run's size (one reads the
runs its delegate calls started; one the pre-steps' texts, only for a run with attachments)."""

from attachments.models import PartText
from console.formatting import fixed_amount
from console.monitoring.selectors import run_question
from conversations.models import GuardrailTrigger, LLMCall, Run, RunEvent
from conversations.selectors import run_final_answer, run_timeline
from conversations.usage import USAGE_FIELDS
from memory.models import MemoryChange, MemoryUse
from tools.arguments import arguments_hash


def _iso(moment) -> str | None:
    return moment.isoformat() if moment else None


def _llm_call(call, *, requests: bool) -> dict:
    return {
        "kind": "llm_call",
        "id": call.pk,
        "purpose": call.purpose,
        "iteration": call.iteration,
        "attempt": call.attempt,
        "model_config_id": call.model_config_id,
        "provider": call.provider,
        "model": call.model_name,
        "status": call.status,
        "http_status": call.http_status,
        "finish_reason": call.finish_reason,
        "tokens": {kind: getattr(call, kind) for kind in USAGE_FIELDS},
        # Shares of prompt_tokens: what the images and the audio the call sent counted for.
        "image_tokens": call.image_tokens,
        "audio_tokens": call.audio_tokens,
        # Of prompt_tokens, those written to the provider's prompt cache (priced apart).
        "cache_write_tokens": call.cache_write_tokens,
        "usage_estimated": call.usage_estimated,
        "cost": fixed_amount(call.cost),
        "latency_ms": call.latency_ms,
        "error": call.error,
        # A fork's copy of its source's call (engine.forks): not sent again, no usage of its own.
        "copied": call.copied,
        # Why this model was tried: the routing rule that picked it (engine.routing), or None.
        "routing": call.routing,
        "started_at": _iso(call.started_at),
        "finished_at": _iso(call.finished_at),
        # The agent's rendered system prompt and tools: None unless the reader may see agents'
        # configuration (conversations.selectors.agent_config_visible_to).
        "request": call.request if requests else None,
        "response": call.response,
    }


def _approval(approval, invocation) -> dict | None:
    if approval is None:
        return None
    return {
        "id": approval.pk,
        "status": approval.status,
        # What was approved; when a person edited the model's arguments, the tool ran with these.
        "arguments": approval.arguments,
        "edited": arguments_hash(approval.arguments) != arguments_hash(invocation.arguments or {}),
        "decided_by": approval.decided_by.get_username() if approval.decided_by else None,
        "decided_at": _iso(approval.decided_at),
        "channel": approval.channel,
        "reason": approval.reason,
        "created_at": _iso(approval.created_at),
        "expires_at": _iso(approval.expires_at),
    }


def _tool_invocation(invocation) -> dict:
    return {
        "kind": "tool_invocation",
        "id": invocation.pk,
        "llm_call_id": invocation.llm_call_id,
        "tool": invocation.tool_name,
        "tool_call_id": invocation.tool_call_id,
        "status": invocation.status,
        "raw_arguments": invocation.raw_arguments,
        "arguments": invocation.arguments,
        "validation_errors": invocation.validation_errors,
        "result": invocation.result,
        "truncated": invocation.truncated,
        "simulated": invocation.simulated,
        "copied": invocation.copied,
        "error": invocation.error,
        "latency_ms": invocation.latency_ms,
        "idempotency_key": invocation.idempotency_key,
        "created_at": _iso(invocation.created_at),
        "started_at": _iso(invocation.started_at),
        "finished_at": _iso(invocation.finished_at),
        "approval": _approval(getattr(invocation, "approval", None), invocation),
        # Agents as tools: the runs a delegate call started (each an ordinary run of its own).
        "child_runs": [
            {
                "id": str(child.pk),
                "agent": child.agent.name,
                "status": child.status,
                "stop_reason": child.stop_reason,
                "started_at": _iso(child.started_at),
                "finished_at": _iso(child.finished_at),
                "duration_ms": child.duration_ms,
            }
            for child in invocation.child_runs.all()
        ],
    }


def _memories(run: Run) -> dict:
    """Long-term memory in this run: the memories its model calls were shown (each once, with
    the calls that saw it) and the changes it made (extraction after it, its remember tool)."""
    shown: dict = {}
    for use in MemoryUse.objects.filter(run=run).select_related("memory").order_by("llm_call_id", "rank"):
        seen = shown.setdefault(
            use.memory_id,
            {
                "memory_id": str(use.memory_id),
                "kind": use.memory.kind,
                "statement": use.memory.statement,
                "rank": use.rank,
                "llm_call_ids": [],
            },
        )
        seen["llm_call_ids"].append(use.llm_call_id)
    written = MemoryChange.objects.filter(run=run).order_by("created_at", "id")
    return {
        "shown": list(shown.values()),
        "written": [
            {
                "id": change.pk,
                "action": change.action,
                "action_label": str(change.get_action_display()),
                "source": change.source,
                "source_label": str(change.get_source_display()),
                "memory_id": str(change.memory_id) if change.memory_id else None,
                "before": change.before,
                "after": change.after,
                "llm_call_id": change.llm_call_id,
                "reason": change.reason,
                "created_at": _iso(change.created_at),
            }
            for change in written
        ],
    }


# The calls that turn an attachment into text (PartText.llm_call); OCR makes its text with none.
PRE_STEP_PURPOSES = {LLMCall.Purpose.TRANSCRIPTION, LLMCall.Purpose.DESCRIPTION}


def _part_texts(run: Run, *, parts: list[dict], steps: list[dict]) -> list[dict]:
    """The attachments this run turned into text, in the order they were made. Read only when
    the run's message carried attachments or one of its calls is a pre-step's: a text-only run's
    timeline costs no query more."""
    if not parts and not any(step.get("purpose") in PRE_STEP_PURPOSES for step in steps):
        return []
    texts = PartText.objects.filter(run=run).select_related("attachment").order_by("created_at", "id")
    return [
        {
            "id": text.pk,
            "method": text.method,
            "method_label": str(text.get_method_display()),
            "attachment": str(text.attachment_id),
            "name": text.attachment.name,
            "kind": text.attachment.kind,
            "media_type": text.attachment.media_type,
            "text": text.text,
            "llm_call_id": text.llm_call_id,
            "duration_ms": text.duration_ms,
            "created_at": _iso(text.created_at),
        }
        for text in texts
    ]


def _forks(run: Run) -> list[dict]:
    """The runs forked from this one, oldest first."""
    forks = Run.objects.filter(forked_from=run).order_by("created_at", "id")
    return [
        {
            "id": str(fork["id"]),
            "fork_step": fork["fork_step"],
            "change": (fork["fork_change"] or {}).get("kind", ""),
            "by": (fork["fork_change"] or {}).get("by", ""),
            "status": fork["status"],
            "created_at": _iso(fork["created_at"]),
        }
        for fork in forks.values("id", "fork_step", "fork_change", "status", "created_at")
    ]


def run_timeline_export(*, run: Run, requests: bool) -> dict:
    answer = run_final_answer(run=run)
    question, parts = run_question(run=run)
    steps = [
        _llm_call(step["obj"], requests=requests) if step["kind"] == "llm_call" else _tool_invocation(step["obj"])
        for step in run_timeline(run=run)
    ]
    events = RunEvent.objects.filter(run=run).order_by("seq").values("seq", "type", "payload", "created_at")
    triggers = (
        GuardrailTrigger.objects.filter(run=run)
        .order_by("id")
        .values("id", "side", "rule_id", "kind", "action", "matched", "created_at")
    )
    return {
        "run": {
            "id": str(run.pk),
            "conversation_id": str(run.conversation_id),
            "agent_id": run.agent_id,
            "agent": run.agent.name,
            "agent_version": run.agent_version.number,
            "status": run.status,
            "stop_reason": run.stop_reason,
            "error": run.error,
            # What the API client attached to the run (conversations.run_labels).
            "tags": run.tags,
            "metadata": run.metadata,
            # What was asked and what the run answered, so the story reads from its two ends.
            "question": question,
            # The attachments the question carried, in order (attachments.parts' descriptors).
            "question_parts": parts,
            "answer": answer.content if answer is not None else None,
            "iterations": run.iterations,
            "tokens": {kind: getattr(run, kind) for kind in USAGE_FIELDS},
            "cost": fixed_amount(run.cost),
            "created_at": _iso(run.created_at),
            "started_at": _iso(run.started_at),
            "finished_at": _iso(run.finished_at),
            "duration_ms": run.duration_ms,
            "claims": run.claims,
            "recoveries": run.recoveries,
            # Finds the run's spans in the tracing backend (engine.tracing); empty when untraced.
            "trace_id": run.trace_id,
            # Agents as tools: the run that delegated to this one, and what this run's own
            # delegated runs used (their trees included).
            "parent_run_id": str(run.parent_run_id) if run.parent_run_id else None,
            "parent_tool_invocation_id": run.parent_tool_invocation_id,
            "depth": run.depth,
            "children_tokens": run.children_tokens,
            "children_cost": fixed_amount(run.children_cost),
            # Forks (engine.forks): the run this one was forked from, at which step, changing
            # what; and the runs forked from this one.
            "forked_from": str(run.forked_from_id) if run.forked_from_id else None,
            "fork_step": run.fork_step,
            "fork_change": run.fork_change,
            "forks": _forks(run),
        },
        "steps": steps,
        # What matched is masked for personal data (agents.guardrails): never the number itself.
        "guardrails": [{**trigger, "created_at": _iso(trigger["created_at"])} for trigger in triggers],
        "memories": _memories(run),
        "part_texts": _part_texts(run, parts=parts, steps=steps),
        "events": [{**event, "created_at": _iso(event["created_at"])} for event in events],
    }
