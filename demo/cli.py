"""Terminal helpers for the management commands: wait for a run and print its timeline."""

import json
import time
from collections.abc import Callable

from django.conf import settings
from django.urls import reverse

from conversations.models import Approval, LLMCall, Run, RunStatus, ToolInvocation
from conversations.selectors import run_final_answer, run_timeline
from engine.worker_watch import NoWorker, NoWorkerWatch
from knowledge.models import KnowledgeSearch
from memory.models import MemoryChange, MemoryUse
from tools.arguments import arguments_hash


class RunWaitTimeout(Exception):
    pass


class RunWaitNoWorker(RunWaitTimeout, NoWorker):
    pass


def _watch_queued(watch: NoWorkerWatch, run_ids: list) -> None:
    try:
        watch.check(queued=Run.objects.filter(pk__in=run_ids, status=RunStatus.QUEUED).count())
    except NoWorker as exc:
        raise RunWaitNoWorker(str(exc)) from exc


def run_wait(*, run_id, timeout: float = 120, poll: float = 0.2, on_park: Callable[[Run], None] | None = None) -> Run:
    """The run once it has ended, or once it waits for an approval. With `on_park`, a parked run
    is reported to it (once per wait) and waited for until a person decides and it ends."""
    deadline = time.monotonic() + timeout
    reported = set()
    watch = NoWorkerWatch()
    while True:
        run = Run.objects.get(pk=run_id)
        if run.is_terminal or (run.status == RunStatus.AWAITING_APPROVAL and on_park is None):
            return run
        _watch_queued(watch, [run.pk])
        if run.status == RunStatus.AWAITING_APPROVAL:
            pending = set(run.approvals.filter(status=Approval.Status.PENDING).values_list("pk", flat=True))
            if pending - reported:
                on_park(run)
                reported |= pending
        if time.monotonic() > deadline:
            if run.status == RunStatus.AWAITING_APPROVAL:
                raise RunWaitTimeout(f"run {run_id} still waits for an approval after {timeout:.0f} s")
            raise RunWaitTimeout(f"run {run_id} still {run.status} after {timeout:.0f} s; is a worker running?")
        time.sleep(poll)


def run_tree_wait(*, run_id, timeout: float = 120, poll: float = 0.2, on_pending: Callable[[Approval], None]) -> Run:
    """The run once it has ended, its delegated runs included. Each approval pending anywhere in
    the tree (a child's call parks the child, and its parent waits for the child) is reported
    to `on_pending` once, which may decide it."""
    deadline = time.monotonic() + timeout
    reported = set()
    watch = NoWorkerWatch()
    while True:
        run = Run.objects.get(pk=run_id)
        if run.is_terminal:
            return run
        tree, frontier = [run.pk], [run.pk]
        while frontier:
            frontier = list(Run.objects.filter(parent_run_id__in=frontier).values_list("pk", flat=True))
            tree += frontier
        _watch_queued(watch, tree)
        pending = Approval.objects.filter(run_id__in=tree, status=Approval.Status.PENDING).exclude(pk__in=reported)
        for approval in pending.select_related("invocation", "run").order_by("pk"):
            reported.add(approval.pk)
            on_pending(approval)
        if time.monotonic() > deadline:
            waiting = list(
                Approval.objects.filter(run_id__in=tree, status=Approval.Status.PENDING).values_list("pk", flat=True)
            )
            if waiting:
                raise RunWaitTimeout(
                    f"run {run_id} still waits for approval {', '.join(map(str, waiting))} after {timeout:.0f} s; "
                    "it stays parked until someone decides (where: the lines above)"
                )
            raise RunWaitTimeout(f"run {run_id} still {run.status} after {timeout:.0f} s; is a worker running?")
        time.sleep(poll)


ARGUMENTS_EXCERPT_CHARS = 200


def site_url() -> str:
    """Where people open Agentry: AGENTRY_PUBLIC_URL, else the address scripts/dev.sh serves on by
    default (a stack moved to another PORT is named with --url)."""
    return settings.AGENTRY_PUBLIC_URL or "http://127.0.0.1:8000"


def approval_waiting_lines(approval: Approval, *, base_url: str | None = None) -> list[str]:
    """What a call waiting for a person is (tool, arguments cut short, which run: a delegated
    run names its agent and the run that called it) and where to decide it, as absolute URLs."""
    base = (base_url or site_url()).rstrip("/")
    run = approval.run
    arguments = json.dumps(approval.arguments, ensure_ascii=False)
    if len(arguments) > ARGUMENTS_EXCERPT_CHARS:
        arguments = arguments[:ARGUMENTS_EXCERPT_CHARS] + "…"
    where = f"run {run.pk}"
    if run.parent_run_id:
        where = f"delegated run {run.pk} of {run.agent.slug}, called by run {run.parent_run_id}"
    return [
        f"  waiting for approval {approval.pk}: {approval.invocation.tool_name} {arguments} ({where})",
        f"    decide at {base}{reverse('approvals:detail', args=[approval.pk])} "
        f"(queue: {base}{reverse('approvals:queue')}), "
        f"or POST {base}{reverse('approval-decision', args=[approval.pk])}",
    ]


def pending_approvals(run: Run, *, base_url: str | None = None) -> list[str]:
    """The lines of approval_waiting_lines for each call of the run waiting for a person."""
    approvals = run.approvals.filter(status=Approval.Status.PENDING).select_related("invocation", "run", "run__agent")
    return [line for a in approvals.order_by("pk") for line in approval_waiting_lines(a, base_url=base_url)]


def _decision(invocation: ToolInvocation) -> str:
    """How a person decided the call, when one did: who, and what the tool ran with if edited."""
    try:
        approval = invocation.approval
    except Approval.DoesNotExist:
        return ""
    who = approval.decided_by.get_username() if approval.decided_by else approval.get_channel_display()
    if approval.status == Approval.Status.PENDING:
        return f" [waiting for approval {approval.pk}]"
    if approval.status == Approval.Status.APPROVED and approval.arguments_hash != arguments_hash(
        invocation.arguments or {}
    ):
        return f" [edited by {who} to {json.dumps(approval.arguments, ensure_ascii=False)}]"
    if approval.status == Approval.Status.REJECTED:
        return f" [rejected by {who}{': ' + approval.reason if approval.reason else ''}]"
    return f" [{approval.status} by {who}]"


def _run_header(run: Run) -> str:
    return (
        f"run {run.pk}: {run.status} ({run.stop_reason or '-'}), {run.iterations} model steps, "
        f"tokens {run.prompt_tokens} prompt + {run.completion_tokens} completion = {run.total_tokens} "
        f"(cached {run.cached_tokens}, reasoning {run.reasoning_tokens}), cost {run.cost:.8f}, "
        f"{run.duration_ms} ms"
    )


def _tool_line(o: ToolInvocation, *, one_line: bool = False) -> str:
    result = " ".join(o.result.split()) if one_line else o.result
    return f"    tool {o.tool_name} {o.status} args {o.raw_arguments}{_decision(o)} → {result[:160]}".rstrip()


def _answer_line(run: Run, *, one_line: bool = False) -> str:
    answer = run_final_answer(run=run)
    if answer is None and run.status == RunStatus.AWAITING_APPROVAL:
        return "  answer: (none yet: the run waits for an approval)"
    text = answer.content if answer else "(none)"
    return f"  answer: {' '.join(text.split()) if one_line else text}"


def format_run(run: Run) -> str:
    lines = [_run_header(run)]
    for step in run_timeline(run=run):
        o = step["obj"]
        if step["kind"] == "llm_call":
            lines.append(
                f"  LLM call {o.iteration}.{o.attempt}{_purpose(o)} {o.status} {o.finish_reason} "
                f"tokens {o.prompt_tokens}/{o.completion_tokens} {o.latency_ms} ms {o.error}".rstrip()
            )
        else:
            lines.append(_tool_line(o))
    if run.error:
        lines.append(f"  error: {run.error.strip().splitlines()[-1]}")
    lines.append(_answer_line(run))
    return "\n".join(lines)


def _purpose(call: LLMCall) -> str:
    # A run's steps are most of its calls; the others (a summary, a memory extraction) say so.
    return "" if call.purpose == LLMCall.Purpose.STEP else f" ({call.purpose})"


def _change_line(change: MemoryChange) -> str:
    if change.action == MemoryChange.Action.ADD:
        kind = f" {change.memory.kind}" if change.memory else ""
        return f"  memory added:{kind} “{change.after}”"
    if change.action == MemoryChange.Action.UPDATE:
        return f"  memory updated: “{change.before}” → “{change.after}”"
    reason = f" ({change.reason})" if change.reason else ""
    return f"  memory {change.get_action_display().lower()}: “{change.before}”{reason}"


def _statement_then(use: MemoryUse) -> str:
    """The memory's statement when the call was shown it: a later update changed the row itself,
    and its change row keeps what it said before."""
    later = MemoryChange.objects.filter(memory=use.memory, created_at__gt=use.llm_call.started_at)
    first = later.order_by("created_at", "pk").first()
    return first.before if first is not None and first.before else use.memory.statement


def memories_shown_line(*, run: Run) -> str | None:
    """The memories the run was shown (those of its first call, which every later call is
    shown too), most relevant first, as they read then; None when it was shown none."""
    first = MemoryUse.objects.filter(run=run).order_by("llm_call_id").first()
    if first is None:
        return None
    uses = MemoryUse.objects.filter(run=run, llm_call_id=first.llm_call_id).select_related("memory", "llm_call")
    return f"  memories shown: {'; '.join(_statement_then(use) for use in uses.order_by('rank'))}"


def memory_change_lines(*, run: Run, extraction: LLMCall) -> list[str]:
    """What the memory extraction after the run (`extraction`, once it has ended) changed."""
    if extraction.status == LLMCall.Status.FAILED:
        return [f"  memory extraction failed: {extraction.error}"]
    changes = MemoryChange.objects.filter(run=run).select_related("memory").order_by("created_at", "pk")
    return [_change_line(c) for c in changes] or ["  memory: nothing to change"]


def _search_lines(search: KnowledgeSearch) -> list[str]:
    if search.fallback:
        return [f"      search {search.base.name} “{search.query}”: no passage above the threshold (fallback)"]
    return [f"      search {search.base.name} “{search.query}”:"] + [
        f"        [{p['citation']}] {p['title']} (score {p['score']:.4f})" for p in search.passages
    ]


def format_run_tree(run: Run, *, indent: str = "") -> str:
    """The run as format_run prints it, with each delegate call followed by its child run's own
    tree (indented one level) and each knowledge search by the passages it returned. Results and
    answers are kept on one line each, so the indentation shows the tree."""
    searches = {s.tool_call_id: s for s in KnowledgeSearch.objects.filter(run=run).select_related("base")}
    children = {c.parent_tool_invocation_id: c for c in Run.objects.filter(parent_run=run).order_by("created_at")}
    lines = [_run_header(run) + (f", delegated runs: tokens {run.children_tokens}" if children else "")]
    for step in run_timeline(run=run):
        o = step["obj"]
        if step["kind"] == "llm_call":
            call = f"  LLM call {o.iteration}.{o.attempt} {o.status} {o.finish_reason} {o.latency_ms} ms"
            lines.append(call.rstrip())
            continue
        lines.append(_tool_line(o, one_line=True))
        if o.tool_call_id in searches:
            lines += _search_lines(searches[o.tool_call_id])
        if o.pk in children:
            child = children[o.pk]
            lines.append(f"      ↳ delegated to {child.agent.name} ({child.agent.slug}):")
            lines += format_run_tree(child, indent="        ").splitlines()
    if run.error:
        lines.append(f"  error: {run.error.strip().splitlines()[-1]}")
    lines.append(_answer_line(run, one_line=True))
    return "\n".join(indent + line for line in lines)
