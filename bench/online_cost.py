"""What online evaluation adds to a production run, advanced in this process.

    DATABASE_URL=postgres://… REDIS_URL=redis://… python -m bench.online_cost [--runs 400] [--block 20]

The 3-step runs of bench.step_cost (two read tool steps, then the answer, the shipped fake model
answering at once), posted and advanced with engine.loop.run_advance in this thread, in
alternating blocks in the same window:

- off: the agent has no enabled online evaluator (the ledger's listener asks, and hears nothing);
- 10 %: one regex evaluator sampling 10 % of the runs (`--rate`), or with `--judge` a judge
  model (one more model call per sampled run, the fake model answering at once).

Printed per run for each: this thread's CPU and the statements sent by the run's own path
(run_advance: what a worker's run pays), and the same with the scoring included (the task that a
sampled run sends after its commit, run here in this thread right after it, amortised over all
runs), and the share of runs scored. Run it on a quiet machine.
"""

import argparse
import os
import time

from bench import harness
from bench.stack import free_port, stack_prepare
from bench.step_cost import _revision, step_cost_agent

JUDGE_SCRIPT = "online-cost-judge"


def _evaluator(agent, llm_base: str, *, judge: bool, rate: float):
    import httpx

    from agents.models import ModelConfig
    from evals.models import OnlineEvaluator

    OnlineEvaluator.objects.filter(agent=agent).delete()
    fields = {"kind": "regex", "config": {"pattern": "."}}
    if judge:
        script = {"scenarios": [], "fallback": {"content": '{"score": 1, "reason": "fine"}'}}
        httpx.put(f"{llm_base}/_scripts/{JUDGE_SCRIPT}", json=script, timeout=10).raise_for_status()
        config, _ = ModelConfig.objects.update_or_create(
            name=JUDGE_SCRIPT, defaults={"base_url": f"{llm_base}/v1", "model": JUDGE_SCRIPT, "stream": False}
        )
        fields = {"kind": "judge", "config": {}, "judge_model": config, "rubric": "Answers the question."}
    return OnlineEvaluator.objects.create(
        agent=agent, name="online cost", sample_rate=rate, on_negative_feedback=False, on_guardrail_hit=False, **fields
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=400, help="runs measured of each kind")
    parser.add_argument("--block", type=int, default=20, help="runs of one kind in a row")
    parser.add_argument("--warm-up", type=int, default=30, help="runs advanced first, not measured")
    parser.add_argument("--rate", type=float, default=0.1, help="the evaluator's sample rate")
    parser.add_argument("--judge", action="store_true", help="a judge evaluator instead of a regex one")
    options = parser.parse_args()
    stack_prepare(script="bench.online_cost", env={"AGENTRY_TOOL_MODULES": "demo.tools", "LOG_LEVEL": "WARNING"})
    from django.db import connection

    from conversations.models import Run
    from conversations.services import conversation_create
    from engine import tasks
    from engine.admission import message_post
    from engine.loop import run_advance
    from evals.models import OnlineEvaluator, OnlineScore
    from evals.online import ONLINE_SCORE_TASK
    from evals.online_scoring import online_scores_make
    from platform_site.celery import app

    port = free_port()
    fake = harness.start_fakellm(port)
    llm_base = f"http://127.0.0.1:{port}"
    # (run-path CPU, run-path statements, CPU with scoring, statements with scoring) per run
    figures = {"off": [], "on": []}
    sent: list[tuple] = []
    try:
        agent = step_cost_agent(llm_base, memory=False)
        evaluator = _evaluator(agent, llm_base, judge=options.judge, rate=options.rate)
        # Runs and the scoring are done here: nothing goes to the queue.
        tasks.run_advance_task.delay = lambda run_id: None
        app.tasks[ONLINE_SCORE_TASK].delay = lambda run_id, picks: sent.append((run_id, picks))

        def one() -> tuple[float, int, float, int]:
            run = message_post(conversation=conversation_create(agent=agent), content="数一数")
            counted = [0]

            def count(execute, sql, params, many, context):
                counted[0] += 1
                return execute(sql, params, many, context)

            with connection.execute_wrapper(count):
                cpu = time.thread_time()
                run_advance(run_id=run.pk)
                run_cpu, run_statements = time.thread_time() - cpu, counted[0]
                while sent:
                    run_id, picks = sent.pop()
                    online_scores_make(run_id=run_id, picks=[tuple(pick) for pick in picks])
                cpu = time.thread_time() - cpu
            if Run.objects.get(pk=run.pk).status != "completed":
                raise SystemExit(f"run {run.pk} did not complete")
            return run_cpu, run_statements, cpu, counted[0]

        def switch(on: bool) -> None:
            OnlineEvaluator.objects.filter(pk=evaluator.pk).update(enabled=on)

        for on in (False, True):
            switch(on)
            for _ in range(options.warm_up // 2):
                one()
        scored_before = OnlineScore.objects.filter(evaluator=evaluator).count()
        for start in range(0, options.runs, options.block):
            for kind in ("off", "on"):
                switch(kind == "on")
                figures[kind] += [one() for _ in range(min(options.block, options.runs - start))]
        scored = OnlineScore.objects.filter(evaluator=evaluator).count() - scored_before
    finally:
        harness.stop(fake)
    what = "a judge" if options.judge else "a regex rule"
    print(
        f"{options.runs} runs of 3 steps of each kind, in alternating blocks of {options.block}, advanced in this "
        f"process (git {_revision()}); online evaluation by {what} at a {options.rate:.0%} sample:"
    )
    for kind, label in (("off", "off"), ("on", f"{options.rate:.0%} sample")):
        rows = figures[kind]
        per_run = 1000 / len(rows)
        print(
            f"  {label}: run path {sum(r[0] for r in rows) * per_run:.2f} ms CPU, "
            f"{sum(r[1] for r in rows) / len(rows):.2f} statements; with scoring "
            f"{sum(r[2] for r in rows) * per_run:.2f} ms CPU, {sum(r[3] for r in rows) / len(rows):.2f} statements"
        )
    print(f"  runs scored at the sample: {scored} of {options.runs} ({scored / options.runs:.1%})")


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "platform_site.settings")
    main()
