"""The conversation-length axis of bench.scale: what one step costs as the history grows.

Each point is a conversation whose history holds N prior turns, written with one set-based
INSERT (no model call made them), then one 3-step run posted into it and advanced in this
thread, as bench.step_cost does, against the fake model answering at once. Per step: this
thread's CPU and the statements sent; per model call: the prompt tokens the fake model counted
(from the LLMCall rows). Each conversation then takes a second run, measured the same way: the
steady state of a long conversation, whose earlier runs have folded its history. The agent has
a context token budget, so a long history is folded into the conversation's summary by a model
call of its own; that call's CPU and statements are kept apart from the steps'
(engine.context.summarise is timed) and counted separately.
"""

import statistics
import time

import httpx

# A prior turn as a 3-step run leaves one, shortened to one tool call: the question, the
# assistant's tool call, the tool's result and the answer.
TURN_MESSAGES = 4
# Tokens of history the agent sends before it folds the oldest turns into a summary. About 60
# turns of the seeded kind fit, so 50 prior turns are sent whole and 200 are folded.
CONTEXT_TOKEN_BUDGET = 8000
_RESULT = (
    '{"data":[{"wind_dir_day":"东北风","wind_level_day":"2","temp_high":18,"condition":"多云",'
    '"wind_dir_night":"东北风","predict_date":"2026-03-01","temp_low":9,"humidity":63}]}'
)
_ARGUMENTS = '{"city":"成都市","start_time":"2026年03月01日","end_time":"2026年03月01日"}'


def turns_script() -> dict:
    """The 3-step run with no scripted usage (the fake model counts the prompt it is sent), and
    an answer for the summary call, whose request quotes the conversation to fold."""
    steps = [
        {
            "tool_calls": [
                {
                    "name": "mojitianqi-DayWeather",
                    "arguments": {"city": "成都市", "start_time": "2026年03月01日", "end_time": "2026年03月01日"},
                }
            ]
        },
        {
            "tool_calls": [
                {"name": "gaodedetu-plan_bicycle", "arguments": {"origin": "成都南站", "destination": "成都动物园"}}
            ]
        },
        {"content": "明天多云，建议骑行。"},
    ]
    summary = {"content": "用户多次询问成都的天气与骑行路线；助手查询了天气并给出了建议。"}
    return {
        "scenarios": [
            {"match": "Conversation to summarise", "steps": [summary]},
            {"match": ".", "steps": steps},
        ]
    }


def _agent(llm_base: str):
    from agents.models import Agent, AgentTool, ModelConfig
    from demo.seed import DEMO_TOOLS, demo_seed
    from tools.models import ToolDefinition

    demo_seed(llm_base_url=f"{llm_base}/v1", stream=False, reset=True)
    httpx.put(f"{llm_base}/_scripts/scale-turns", json=turns_script(), timeout=10).raise_for_status()
    config, _ = ModelConfig.objects.update_or_create(
        name="scale-turns", defaults={"base_url": f"{llm_base}/v1", "model": "scale-turns", "stream": False}
    )
    agent, _ = Agent.objects.update_or_create(
        slug="scale-turns",
        defaults={
            "name": "scale turns",
            "model_config": config,
            "system_prompt": "你是一名智能客服。",
            "context_token_budget": CONTEXT_TOKEN_BUDGET,
        },
    )
    for tool in ToolDefinition.objects.filter(workspace_id=agent.workspace_id, name__in=DEMO_TOOLS):
        AgentTool.objects.update_or_create(agent=agent, tool=tool, defaults={"approval": "inherit"})
    return agent


def history_seed(*, conversation_ids: list, turns: int) -> None:
    """`turns` prior turns in each conversation, in one INSERT … SELECT over generate_series,
    and the conversations' message counters moved past them (new messages are numbered from it)."""
    from django.db import connection

    from conversations.models import Conversation, Message

    ids = [str(pk) for pk in conversation_ids]
    with connection.cursor() as cursor:
        cursor.execute(
            f'INSERT INTO "{Message._meta.db_table}" '
            '(conversation_id, "order", role, content, tool_calls, tool_call_id, name, created_at) '
            "SELECT c.id, %(per)s::int * (t - 1) + k, "
            "(ARRAY['user', 'assistant', 'tool', 'assistant'])[k], "
            "CASE k WHEN 1 THEN '第' || t || '个问题：明天成都天气如何？' WHEN 2 THEN '' "
            "WHEN 3 THEN %(result)s::text ELSE '第' || t || '次回答：明天多云，建议骑行。' END, "
            "CASE WHEN k = 2 THEN jsonb_build_array(jsonb_build_object('id', 'seed_' || t, 'type', 'function', "
            "'function', jsonb_build_object('name', 'mojitianqi-DayWeather', 'arguments', %(arguments)s::text))) END, "
            "CASE WHEN k = 3 THEN 'seed_' || t ELSE '' END, "
            "CASE WHEN k = 3 THEN 'mojitianqi-DayWeather' ELSE '' END, now() "
            "FROM unnest(%(ids)s::uuid[]) AS c(id), generate_series(1, %(turns)s::int) AS t, "
            "generate_series(1, %(per)s::int) AS k",
            {"per": TURN_MESSAGES, "result": _RESULT, "arguments": _ARGUMENTS, "ids": ids, "turns": turns},
        )
        cursor.execute(
            f'UPDATE "{Conversation._meta.db_table}" SET message_count = %s::int WHERE id = ANY(%s::uuid[])',
            [turns * TURN_MESSAGES, ids],
        )


class FoldMeter:
    """This thread's CPU and the statements sent while the history is folded into a summary."""

    def __init__(self):
        self.cpu = 0.0
        self.statements = 0
        self.folding = False

    def timed(self, summarise):
        def summarise_timed(**kwargs):
            started, self.folding = time.thread_time(), True
            try:
                return summarise(**kwargs)
            finally:
                self.cpu += time.thread_time() - started
                self.folding = False

        return summarise_timed


def _advance(run_id, fold: FoldMeter) -> dict:
    """Advance one run here; its CPU and statements, less the summary's."""
    from django.db import connection

    from engine.loop import run_advance

    sent = [0]

    def count(execute, sql, params, many, context):
        if fold.folding:
            fold.statements += 1
        else:
            sent[0] += 1
        return execute(sql, params, many, context)

    fold_cpu, fold_statements = fold.cpu, fold.statements
    started = time.thread_time()
    with connection.execute_wrapper(count):
        run_advance(run_id=run_id)
    cpu = time.thread_time() - started - (fold.cpu - fold_cpu)
    return {
        "cpu": cpu,
        "statements": sent[0],
        "fold_cpu": fold.cpu - fold_cpu,
        "fold_statements": fold.statements - fold_statements,
    }


def _calls(run_id) -> dict:
    from conversations.models import LLMCall, Run

    if Run.objects.get(pk=run_id).status != "completed":
        raise RuntimeError(f"run {run_id} did not complete")
    calls = LLMCall.objects.filter(run_id=run_id)
    steps = calls.filter(purpose=LLMCall.Purpose.STEP)
    # A step is a model call, and the tool calls it asked for are a second step (as bench.bench counts).
    return {
        "steps": steps.count() + steps.exclude(tool_invocations=None).count(),
        "calls": steps.count(),
        "prompt_tokens": sum(steps.values_list("prompt_tokens", flat=True)),
        "summaries": calls.filter(purpose=LLMCall.Purpose.SUMMARY).count(),
    }


def _run(conversation, fold: FoldMeter) -> dict:
    from engine.admission import message_post

    run = message_post(conversation=conversation, content="明天成都天气如何？")
    return {**_advance(run.pk, fold), **_calls(run.pk)}


def _per_step(measured: list[dict]) -> dict:
    summaries = sum(m["summaries"] for m in measured)
    return {
        "cpu_ms_per_step": statistics.median(1000 * m["cpu"] / m["steps"] for m in measured),
        "statements_per_step": sum(m["statements"] for m in measured) / sum(m["steps"] for m in measured),
        "prompt_tokens_per_call": sum(m["prompt_tokens"] for m in measured) / sum(m["calls"] for m in measured),
        "summary_calls_per_run": summaries / len(measured),
        "summary_cpu_ms": 1000 * sum(m["fold_cpu"] for m in measured) / summaries if summaries else None,
    }


def _point(agent, turns: int, runs: int, fold: FoldMeter) -> dict:
    """The first run after the seeded history (it folds what does not fit, as a conversation
    whose history never met the budget would), then a second run in the same conversation: the
    steady state, where earlier runs have folded the history already."""
    from conversations.services import conversation_create

    conversations = [conversation_create(agent=agent) for _ in range(runs)]
    history_seed(conversation_ids=[c.pk for c in conversations], turns=turns)
    first = [_run(conversation, fold) for conversation in conversations]
    second = [_run(conversation, fold) for conversation in conversations]
    steady = _per_step(second)
    return {
        "prior_turns": turns,
        **_per_step(first),
        "next_cpu_ms_per_step": steady["cpu_ms_per_step"],
        "next_statements_per_step": steady["statements_per_step"],
        "next_prompt_tokens_per_call": steady["prompt_tokens_per_call"],
        "runs": runs,
    }


def turns_curve(sizes: list[int], *, runs: int = 10, warm_up: int = 5) -> list[dict]:
    """One point per size in `sizes` (prior turns): the median over `runs` runs, each in a
    conversation of its own, after `warm_up` runs that are not counted."""
    from bench import harness
    from bench.stack import free_port
    from engine import context, tasks

    port = free_port()
    fake = harness.start_fakellm(port)
    # The runs are advanced here: none goes to the queue.
    delay, tasks.run_advance_task.delay = tasks.run_advance_task.delay, lambda run_id: None
    summarise, fold = context.summarise, FoldMeter()
    context.summarise = fold.timed(summarise)
    try:
        agent = _agent(f"http://127.0.0.1:{port}")
        _point(agent, 1, warm_up, fold)
        return [_point(agent, turns, runs, fold) for turns in sizes]
    finally:
        context.summarise = summarise
        tasks.run_advance_task.delay = delay
        harness.stop(fake)
