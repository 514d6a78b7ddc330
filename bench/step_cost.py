"""What one run costs when it is advanced in this process: for comparing two versions of the code.

    DATABASE_URL=postgres://… REDIS_URL=redis://… python -m bench.step_cost [--runs 200] [--warm-up 30]

A 3-step run (two read tool steps, then the answer; bench.scripts) of a draft agent, posted and
then advanced with engine.loop.run_advance in this thread, one run after another, against the
shipped fake model answering at once. No broker, web server or worker process takes part, and
nothing runs concurrently, so what is left is the engine's own work: its statements built, sent
and executed, the model's HTTP, the tools. bench.bench's end-to-end figures move by more than a
change of one or two statements a run from one repetition to the next; these move by less.

Printed per run: this thread's CPU (posting excluded), the CPU of every PostgreSQL process on the
machine (posting included; run it on a quiet machine), the wall time of run_advance and the
statements it sent. Run the two versions in alternation, several times each, on the same database.

`--memory`: the same runs with long-term memory on (docs/memory.md), in conversations of one end
user who already has `--memories` memories: each run is shown the most relevant ones at its first
step, and its memory extraction (one more model call, which the fake model answers by its rules)
runs after it in this thread and is counted in the figures. Compare it with a run without, in the
same window, for what memory adds.

`--image`: one-step runs instead (a message, then the answer, no tool), two kinds alternated in
the same window: a text message, and the same text with one image (demo/fixtures/broken-mug.jpg,
480×360, stored once as an attachment and sent with every image run) to a model config that takes
images. The image goes through the real provider code to the fake model: its bytes read from the
attachments' storage and put in the request at send. Printed per step for each kind: this
thread's CPU, PostgreSQL's CPU (posting included), wall and statements.
"""

import argparse
import os
import subprocess
import time

from bench import harness
from bench.scripts import three_step_script
from bench.stack import free_port, stack_prepare


def step_cost_agent(llm_base: str, *, memory: bool):
    """The 3-step agent the runs are posted to (bench.scale_ledger advances its live runs with it)."""
    import httpx

    from agents.models import Agent, AgentTool, ModelConfig
    from demo.seed import DEMO_TOOLS, demo_seed
    from tools.models import ToolDefinition

    # A new fake model port each time: the demo rows follow it (the database outlives a run).
    demo_seed(llm_base_url=f"{llm_base}/v1", stream=False, reset=True)
    script = three_step_script(0)
    if memory:
        script["memory_extraction"] = {"extract_memory": True}  # the fake model's extraction rules
    httpx.put(f"{llm_base}/_scripts/step-cost", json=script, timeout=10).raise_for_status()
    config, _ = ModelConfig.objects.update_or_create(
        name="step-cost", defaults={"base_url": f"{llm_base}/v1", "model": "step-cost", "stream": False}
    )
    agent, _ = Agent.objects.update_or_create(
        slug="step-cost",
        defaults={
            "name": "step cost",
            "model_config": config,
            "system_prompt": "你是一名智能客服。",
            "memory_enabled": memory,
        },
    )
    for tool in ToolDefinition.objects.filter(workspace_id=agent.workspace_id, name__in=DEMO_TOOLS):
        AgentTool.objects.update_or_create(agent=agent, tool=tool, defaults={"approval": "inherit"})
    return agent


IMAGE_SCRIPT = "step-cost-image"
IMAGE_BLOCK = 10


def image_step_agent(llm_base: str):
    """The one-step agent of `--image`, on a model config that takes images, and the photo its
    image runs send (an attachment of the agent's workspace, stored once)."""
    import httpx

    from agents.models import Agent, ModelConfig
    from attachments.services import attachment_store
    from demo.pictures import PHOTO

    answer = {"content": "照片里的杯子碎了。"}
    script = {"scenarios": [{"match": ".", "steps": [answer]}]}
    httpx.put(f"{llm_base}/_scripts/{IMAGE_SCRIPT}", json=script, timeout=10).raise_for_status()
    config, _ = ModelConfig.objects.update_or_create(
        name=IMAGE_SCRIPT,
        defaults={
            "base_url": f"{llm_base}/v1",
            "model": IMAGE_SCRIPT,
            "stream": False,
            "input_kinds": ["text", "image"],
        },
    )
    agent, _ = Agent.objects.update_or_create(
        slug=IMAGE_SCRIPT,
        defaults={"name": "step cost, one image", "model_config": config, "system_prompt": "你是一名智能客服。"},
    )
    photo = attachment_store(
        workspace=agent.workspace, uploaded_by=None, owner=None, data=PHOTO.read_bytes(), name=PHOTO.name
    )
    return agent, photo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=200, help="runs measured")
    parser.add_argument("--warm-up", type=int, default=30, help="runs advanced first, not measured")
    parser.add_argument("--memory", action="store_true", help="long-term memory on, extraction included")
    parser.add_argument("--memories", type=int, default=20, help="memories the end user holds, with --memory")
    parser.add_argument("--image", action="store_true", help="one-step runs, a text one and a one-image one alternated")
    options = parser.parse_args()
    if options.image:
        image_main(options)
        return
    stack_prepare(script="bench.step_cost", env={"AGENTRY_TOOL_MODULES": "demo.tools", "LOG_LEVEL": "WARNING"})
    from django.db import connection

    from conversations.models import Run
    from conversations.services import conversation_create
    from engine import tasks
    from engine.admission import message_post
    from engine.loop import run_advance
    from engine.memory import memory_extract

    port = free_port()
    fake = harness.start_fakellm(port)
    try:
        agent = step_cost_agent(f"http://127.0.0.1:{port}", memory=options.memory)
        end_user = _memories_seed(agent, options.memories) if options.memory else ""
        # The runs (and their memory extractions) are advanced here: none goes to the queue.
        tasks.run_advance_task.delay = lambda run_id: None
        tasks.memory_extract_task.delay = lambda run_id: None
        statements = []

        def one() -> tuple[float, float]:
            conversation = conversation_create(agent=agent, end_user=end_user)
            run = message_post(conversation=conversation, content="数一数")
            sent = [0]

            def count(execute, sql, params, many, context):
                sent[0] += 1
                return execute(sql, params, many, context)

            cpu, wall = time.thread_time(), time.perf_counter()
            with connection.execute_wrapper(count):
                run_advance(run_id=run.pk)
                if options.memory:
                    memory_extract(run_id=run.pk)
            cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
            if Run.objects.get(pk=run.pk).status != "completed":
                raise SystemExit(f"run {run.pk} did not complete")
            statements.append(sent[0])
            return cpu, wall

        for _ in range(options.warm_up):
            one()
        postgres = harness.named_cpu_seconds("postgres")
        measured = [one() for _ in range(options.runs)]
        postgres = harness.named_cpu_seconds("postgres") - postgres
    finally:
        harness.stop(fake)
    per_run = 1000 / options.runs
    memory = f", memory on ({options.memories} held, extraction included)" if options.memory else ""
    print(
        f"{options.runs} runs of 3 steps{memory}, advanced in this process (git {_revision()}): "
        f"this thread's CPU {sum(cpu for cpu, _ in measured) * per_run:.2f} ms, "
        f"PostgreSQL's CPU {postgres * per_run:.2f} ms (posting included), "
        f"wall {sum(wall for _, wall in measured) * per_run:.2f} ms, "
        f"{sum(statements[-options.runs :]) / options.runs:.1f} statements per run"
    )


def image_main(options) -> None:
    stack_prepare(script="bench.step_cost", env={"LOG_LEVEL": "WARNING"})
    from django.db import connection

    from conversations.models import LLMCall, Run
    from conversations.services import conversation_create
    from engine import tasks
    from engine.admission import message_submit
    from engine.loop import run_advance

    port = free_port()
    fake = harness.start_fakellm(port)
    figures = {"text": [], "image": []}  # (CPU, wall, statements) per run
    postgres = {"text": 0.0, "image": 0.0}
    try:
        agent, photo = image_step_agent(f"http://127.0.0.1:{port}")
        tasks.run_advance_task.delay = lambda run_id: None

        def one(kind: str) -> tuple[float, float, int]:
            conversation = conversation_create(agent=agent)
            attachments = [photo] if kind == "image" else []
            run = message_submit(conversation=conversation, content="看看这个", attachments=attachments).run
            sent = [0]

            def count(execute, sql, params, many, context):
                sent[0] += 1
                return execute(sql, params, many, context)

            cpu, wall = time.thread_time(), time.perf_counter()
            with connection.execute_wrapper(count):
                run_advance(run_id=run.pk)
            cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
            if Run.objects.get(pk=run.pk).status != "completed":
                raise SystemExit(f"{kind} run {run.pk} did not complete")
            if kind == "image" and not LLMCall.objects.filter(run_id=run.pk, image_tokens__gt=0).exists():
                raise SystemExit(f"run {run.pk}: the image did not reach the model")
            return cpu, wall, sent[0]

        for _ in range(options.warm_up):
            one("text")
            one("image")
        # Blocks of ten of each kind in turn: PostgreSQL's CPU is read from /proc in clock ticks
        # (10 ms), too coarse for one run.
        for start in range(0, options.runs, IMAGE_BLOCK):
            for kind in ("text", "image"):
                before = harness.named_cpu_seconds("postgres")
                figures[kind] += [one(kind) for _ in range(min(IMAGE_BLOCK, options.runs - start))]
                postgres[kind] += harness.named_cpu_seconds("postgres") - before
    finally:
        harness.stop(fake)
    print(
        f"{options.runs} one-step runs of each kind, in alternating blocks of {IMAGE_BLOCK}, advanced in this "
        f"process (git {_revision()}), per step:"
    )
    for kind, label in (("text", "text"), ("image", f"one image ({photo.width}×{photo.height} {photo.media_type})")):
        rows = figures[kind]
        per_run = 1000 / len(rows)
        print(
            f"  {label}: this thread's CPU {sum(r[0] for r in rows) * per_run:.2f} ms, "
            f"PostgreSQL's CPU {postgres[kind] * per_run:.2f} ms (posting included), "
            f"wall {sum(r[1] for r in rows) * per_run:.2f} ms, "
            f"{sum(r[2] for r in rows) / len(rows):.1f} statements"
        )


def _memories_seed(agent, count: int) -> str:
    """A fresh end user of `agent` holding `count` memories (seeded through memory_apply, as an
    extraction would write them); the end user's id."""
    import uuid

    from agents.services import agent_version_current
    from memory.services import MemoryProposal, memory_apply, memory_scope

    snapshot = agent_version_current(agent=agent).snapshot
    end_user = f"bench-{uuid.uuid4().hex[:8]}"
    proposals = [
        MemoryProposal(action="add", kind="fact", statement=f"第{i}件事：喜欢编号{i}的座位") for i in range(count)
    ]
    for start in range(0, count, 20):  # memory_apply takes at most 20 proposals at once
        memory_apply(
            workspace_id=agent.workspace_id,
            scope=memory_scope(snapshot),
            owner_id=None,
            end_user=end_user,
            proposals=proposals[start : start + 20],
            source="api",
            kinds=["fact"],
            ttl_days=None,
        )
    return end_user


def _revision() -> str:
    """The checkout's commit, so that alternating runs of two versions say which is which."""
    try:
        done = subprocess.run(
            ["git", "-C", str(harness.ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        )
    except OSError:
        return "unknown"
    return done.stdout.strip() or "unknown"


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "platform_site.settings")
    main()
