"""Terminal helpers for the management commands: wait for a run and print its timeline."""

import time

from conversations.models import Run
from conversations.selectors import run_final_answer, run_timeline


class RunWaitTimeout(Exception):
    pass


def run_wait(*, run_id, timeout: float = 120, poll: float = 0.2) -> Run:
    deadline = time.monotonic() + timeout
    while True:
        run = Run.objects.get(pk=run_id)
        if run.is_terminal or run.status == "awaiting_approval":
            return run
        if time.monotonic() > deadline:
            raise RunWaitTimeout(f"run {run_id} still {run.status} after {timeout:.0f} s; is a worker running?")
        time.sleep(poll)


def format_run(run: Run) -> str:
    lines = [
        f"run {run.pk}: {run.status} ({run.stop_reason or '-'}), {run.iterations} model steps, "
        f"tokens {run.prompt_tokens} prompt + {run.completion_tokens} completion = {run.total_tokens} "
        f"(cached {run.cached_tokens}, reasoning {run.reasoning_tokens}), cost {run.cost:.8f}, "
        f"{run.duration_ms} ms"
    ]
    for step in run_timeline(run=run):
        o = step["obj"]
        if step["kind"] == "llm_call":
            lines.append(
                f"  LLM call {o.iteration}.{o.attempt} {o.status} {o.finish_reason} "
                f"tokens {o.prompt_tokens}/{o.completion_tokens} {o.latency_ms} ms {o.error}".rstrip()
            )
        else:
            lines.append(f"    tool {o.tool_name} {o.status} args {o.raw_arguments} → {o.result[:160]}")
    answer = run_final_answer(run=run)
    if run.error:
        lines.append(f"  error: {run.error.strip().splitlines()[-1]}")
    lines.append(f"  answer: {answer.content if answer else '(none)'}")
    return "\n".join(lines)
