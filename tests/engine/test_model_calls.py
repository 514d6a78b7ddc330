"""Model calls inside runs: attempts as rows, retries, Retry-After, fallback, honest failure,
cut streams, deltas as events, malformed tool-call JSON, usage, forced tool choice."""

from decimal import Decimal

import pytest

from conversations.models import LLMCall, Message, RunEvent, ToolInvocation
from tests.support.llm import agent_on, assert_totals_match_calls, calls_of, fake_model
from tests.support.runs import ask

pytestmark = pytest.mark.django_db
PROVIDERS = ["openai_compatible", "anthropic"]
USAGE = {"prompt_tokens": 100, "completion_tokens": 10, "cached_tokens": 40}


def echo_script(first_step_extra: dict | None = None, final_extra: dict | None = None) -> dict:
    return {
        "scenarios": [
            {
                "match": r"echo (?P<word>\w+)",
                "steps": [
                    {
                        "tool_calls": [{"name": "test-echo", "arguments": {"text": "{word}"}}],
                        "usage": USAGE,
                        **(first_step_extra or {}),
                    },
                    {"content": "You said {last_tool_result}.", "usage": USAGE, **(final_extra or {})},
                ],
            }
        ]
    }


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_500_is_retried_and_each_attempt_is_a_row(fake_llm, provider):
    agent = agent_on(fake_llm, echo_script({"fault": {"status": 500, "times": 1}}), provider=provider)
    run = ask(agent, "echo hello")

    assert run.status == "completed" and run.stop_reason == "final_answer"
    rows = [(c.iteration, c.attempt, c.status, c.http_status) for c in calls_of(run)]
    assert rows == [(1, 1, "failed", 500), (1, 2, "succeeded", 200), (2, 1, "succeeded", 200)]
    assert Message.objects.filter(run=run, role="assistant").last().content == "You said hello."
    assert run.iterations == 2
    assert_totals_match_calls(run)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_429_waits_as_long_as_retry_after_says(fake_llm, provider):
    agent = agent_on(
        fake_llm, echo_script({"fault": {"status": 429, "retry_after": 0.6, "times": 1}}), provider=provider
    )
    run = ask(agent, "echo hi")

    failed, retried = calls_of(run)[:2]
    assert (failed.status, failed.http_status, retried.status) == ("failed", 429, "succeeded")
    # The configured backoff is 0.05 s here: only Retry-After explains a wait this long.
    assert (retried.started_at - failed.finished_at).total_seconds() >= 0.55


def test_after_the_last_attempt_the_fallback_model_answers(fake_llm):
    fallback = fake_model(fake_llm, echo_script())
    agent = agent_on(
        fake_llm, {"fallback": {"content": "never", "fault": {"status": 503}}}, fallback_model_config=fallback
    )
    run = ask(agent, "echo hi")

    assert run.status == "completed"
    first_step = [c for c in calls_of(run) if c.iteration == 1]
    assert [(c.attempt, c.status, c.model_config_id) for c in first_step] == [
        (1, "failed", agent.model_config_id),
        (2, "failed", agent.model_config_id),
        (3, "failed", agent.model_config_id),
        (4, "succeeded", fallback.pk),
    ]
    assert Message.objects.filter(run=run, role="assistant").last().content == "You said hi."


def test_a_non_retryable_4xx_goes_to_the_fallback_at_once(fake_llm):
    fallback = fake_model(fake_llm, echo_script(), provider="anthropic")
    agent = agent_on(
        fake_llm, {"fallback": {"content": "never", "fault": {"status": 401}}}, fallback_model_config=fallback
    )
    run = ask(agent, "echo hi")

    assert [(c.status, c.http_status, c.provider) for c in calls_of(run)][:2] == [
        ("failed", 401, "openai_compatible"),
        ("succeeded", 200, "anthropic"),
    ]
    assert run.stop_reason == "final_answer"


def test_a_run_that_cannot_reach_any_model_fails_with_a_readable_error(fake_llm):
    agent = agent_on(fake_llm, {"fallback": {"content": "never", "fault": {"status": 503}}})
    run = ask(agent, "echo hi")

    assert (run.status, run.stop_reason) == ("failed", "provider_error")
    assert run.error.startswith("The model call failed after 3 attempts: HTTP 503 from http://")
    assert agent.model_config.model in run.error and "overloaded" in run.error
    assert LLMCall.objects.filter(run=run, status="failed").count() == 3
    assert not Message.objects.filter(run=run, role="assistant").exists()


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_cut_stream_is_retried_and_leaves_no_half_answer(fake_llm, provider):
    script = echo_script(final_extra={"fault": {"kind": "cut_stream", "times": 1}})
    agent = agent_on(fake_llm, script, provider=provider, stream=True)
    run = ask(agent, "echo streaming")

    assert [(c.iteration, c.attempt, c.status) for c in calls_of(run)] == [
        (1, 1, "succeeded"),
        (2, 1, "failed"),
        (2, 2, "succeeded"),
    ]
    assert "before the answer was complete" in calls_of(run)[1].error
    answers = Message.objects.filter(run=run, role="assistant", tool_calls__isnull=True)
    assert [m.content for m in answers] == ["You said streaming."]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_streamed_text_reaches_the_run_events_as_it_arrives(fake_llm, provider):
    script = {
        "defaults": {"stream_chunk_delay_ms": 15},
        "fallback": {"content": "成都明天多云，气温10到18度，东北风二级，湿度百分之七十六，适合骑行出门。"},
    }
    agent = agent_on(fake_llm, script, provider=provider, stream=True, tools=[])
    run = ask(agent, "明天天气")

    events = list(RunEvent.objects.filter(run=run).order_by("seq"))
    deltas = [e for e in events if e.type == "message.delta"]
    completed = next(e for e in events if e.type == "llm_call.completed")
    assert len(deltas) >= 2, "deltas should be relayed while the stream is still open"
    assert "".join(e.payload["text"] for e in deltas) == script["fallback"]["content"]
    assert all(e.seq < completed.seq for e in deltas)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_malformed_tool_call_json_gets_a_friendly_error_and_the_run_goes_on(fake_llm, stream):
    script = {
        "fallback": {
            "branches": [
                {"if_last_tool_result_matches": "not valid JSON", "then": {"content": "Sorry, let me fix that."}}
            ],
            "else": {"tool_calls": [{"name": "test-echo", "arguments": '{"text": "hi"'}]},
        }
    }
    agent = agent_on(fake_llm, script, stream=stream)
    run = ask(agent, "echo broken")

    [invocation] = ToolInvocation.objects.filter(run=run)
    assert invocation.status == "error" and invocation.raw_arguments == '{"text": "hi"'
    tool_message = Message.objects.get(run=run, role="tool")
    assert "not valid JSON" in tool_message.content
    assert (run.status, run.stop_reason) == ("completed", "final_answer")


@pytest.mark.parametrize("provider", PROVIDERS)
def test_usage_present_and_absent_on_the_ledger(fake_llm, provider):
    script = echo_script(final_extra={"usage": None})
    agent = agent_on(fake_llm, script, provider=provider, stream=True)
    run = ask(agent, "echo usage")

    reported, estimated = calls_of(run)
    assert (reported.prompt_tokens, reported.completion_tokens, reported.cached_tokens, reported.usage_estimated) == (
        100,
        10,
        40,
        False,
    )
    assert estimated.usage_estimated and estimated.prompt_tokens > 0
    assert_totals_match_calls(run)
    # Cost from the config's prices: 60 uncached × 1.0 + 40 cached × 0.5 + 10 out × 2.0, per million.
    assert reported.cost == Decimal("60") * 1 / 10**6 + Decimal("40") * Decimal("0.5") / 10**6 + Decimal("20") / 10**6


def test_cost_uses_the_prices_in_force_at_call_time(fake_llm):
    agent = agent_on(fake_llm, echo_script())
    run = ask(agent, "echo a")
    first = calls_of(run)[0]
    agent.model_config.price_output_per_million = "20.0"
    agent.model_config.save()
    second_run = ask(agent, "echo b")

    assert calls_of(second_run)[0].cost - first.cost == Decimal(10 * 18) / 10**6


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_named_tool_choice_holds_until_the_run_has_called_a_tool(fake_llm, provider):
    agent = agent_on(fake_llm, echo_script(), provider=provider, tool_choice="tool", tool_choice_name="test-echo")
    run = ask(agent, "echo forced")

    first, second = fake_llm.requests(agent.model_config.model)[-2:]
    if provider == "anthropic":
        assert first["tool_choice"] == {"type": "tool", "name": "test-echo"}
        assert second["tool_choice"] == {"type": "auto"}
    else:
        assert first["tool_choice"] == {"type": "function", "function": {"name": "test-echo"}}
        assert second["tool_choice"] == "auto"
    assert run.stop_reason == "final_answer"


def test_a_timed_out_attempt_is_retried(fake_llm):
    script = echo_script({"fault": {"kind": "timeout", "timeout_ms": 1000, "times": 1}})
    agent = agent_on(fake_llm, script, model_fields={"read_timeout_seconds": 0.3})
    run = ask(agent, "echo patience")

    first, second = calls_of(run)[:2]
    assert first.status == "failed" and "timed out" in first.error
    assert second.status == "succeeded" and run.stop_reason == "final_answer"


def test_connection_errors_are_retried_then_the_run_fails_honestly(fake_llm):
    agent = agent_on(fake_llm, echo_script())
    agent.model_config.base_url = "http://127.0.0.1:9/v1"  # nothing listens on the discard port
    agent.model_config.save()
    run = ask(agent, "echo nobody")

    assert [c.status for c in calls_of(run)] == ["failed"] * 3
    assert all(
        "Could not connect to http://127.0.0.1:9/v1" in c.error and "connection refused" in c.error
        for c in calls_of(run)
    )
    assert (run.status, run.stop_reason) == ("failed", "provider_error")
