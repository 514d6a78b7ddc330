"""Guardrails through the engine: block, redact and flag on the user's message and on the model's
answer, what the model was sent (the fake server records it), what is stored and delivered, the
ledger rows and events, the user's message in the agent's language, and an agent whose rules
match nothing costing no statement more than one without rules."""

import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents import guardrails
from agents.models import GuardrailRule
from agents.services import agent_version_current
from conversations.models import GuardrailTrigger, LLMCall, Message, Run, RunEvent, RunRequest
from conversations.retention import runs_purge
from engine.context import TRANSCRIPT_HEADING
from engine.guardrails import UNREADABLE_VERDICT
from engine.loop import run_advance
from tests.support.factories import ModelConfigFactory
from tests.support.runs import advance, ask, last_answer, start_run

pytestmark = pytest.mark.django_db

ID_CARD = "11010519491231002X"


def answering(text: str) -> dict:
    return {"scenarios": [{"match": ".", "steps": [{"content": text}]}]}


def guarded(scripted_agent, script: dict, *rules: dict, model_fields=None, **fields):
    agent = scripted_agent(script, model_fields=model_fields, **fields)
    for rule in rules:
        GuardrailRule.objects.create(agent=agent, **rule)
    return agent


def sent_to_model(fake_llm, agent) -> list[dict]:
    return fake_llm.requests(agent.model_config.model)


def user_messages_sent(fake_llm, agent) -> list[str]:
    [request] = sent_to_model(fake_llm, agent)
    return [m["content"] for m in request["messages"] if m["role"] == "user"]


def triggers(run: Run) -> list[tuple]:
    return list(GuardrailTrigger.objects.filter(run=run).values_list("side", "kind", "action", "matched"))


def guardrail_events(run: Run) -> list[dict]:
    return [e.payload for e in RunEvent.objects.filter(run=run, type="guardrail.triggered").order_by("seq")]


def event_types(run: Run) -> list[str]:
    return list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True))


# Input.


@pytest.mark.parametrize(
    ("language", "expected"),
    [
        ("en", "I cannot respond to this message: it contains something this agent is not allowed to handle."),
        ("zh-hans", "我无法回复这条消息：其中有本助手不能处理的内容。"),
    ],
)
def test_a_blocked_message_never_reaches_the_model(scripted_agent, fake_llm, language, expected):
    agent = guarded(
        scripted_agent,
        answering("never said"),
        {"side": "input", "kind": "blocked_terms", "action": "block", "terms": "机密\nproject x"},
        language=language,
    )

    run = ask(agent, "请把PROJECT X的机密文件发给我")

    assert (run.status, run.stop_reason) == ("completed", "guardrail_blocked")
    assert last_answer(run).startswith(expected)
    assert sent_to_model(fake_llm, agent) == [] and not LLMCall.objects.filter(run=run).exists()
    # One row for the rule, however many of its terms matched.
    assert triggers(run) == [("input", "blocked_terms", "block", "PROJECT X")]
    assert list(GuardrailTrigger.objects.filter(run=run).values_list("count", "samples")) == [
        (2, ["PROJECT X", "机密"])
    ]
    [event] = guardrail_events(run)
    assert event["side"] == "input" and event["outcome"] == "blocked"
    assert event["triggers"] == [
        {
            "rule_id": event["triggers"][0]["rule_id"],
            "kind": "blocked_terms",
            "action": "block",
            "matched": "PROJECT X",
            "count": 2,
            "samples": ["PROJECT X", "机密"],
        }
    ]
    assert event_types(run) == ["run.queued", "run.running", "guardrail.triggered", "run.completed"]
    # The user's message is kept as sent; the next run's model sees a placeholder instead of it.
    assert Message.objects.get(run=run, role="user").content == "请把PROJECT X的机密文件发给我"
    ask(agent, "你好", conversation=run.conversation)
    [request] = sent_to_model(fake_llm, agent)
    assert [m["content"] for m in request["messages"] if m["role"] == "user"] == ["[blocked by a guardrail]", "你好"]


@pytest.mark.parametrize("redact_stored", [False, True])
def test_redacted_input_is_what_the_model_receives(scripted_agent, fake_llm, redact_stored):
    agent = guarded(
        scripted_agent,
        answering("好的"),
        {"side": "both", "kind": "pii_phone", "action": "redact"},
        {"side": "input", "kind": "pii_id_card", "action": "redact"},
        guardrail_redact_stored=redact_stored,
    )
    text = f"我的手机13812345678，身份证{ID_CARD}。"

    run = ask(agent, text)

    assert (run.status, run.stop_reason) == ("completed", "final_answer")
    redacted = "我的手机[redacted:phone]，身份证[redacted:id_card]。"
    assert user_messages_sent(fake_llm, agent) == [redacted]
    assert Message.objects.get(run=run, role="user").content == (redacted if redact_stored else text)
    assert RunRequest.objects.get(run=run).content == (redacted if redact_stored else text)
    # The ledger never holds the numbers themselves.
    assert triggers(run) == [
        ("input", "pii_phone", "redact", "***5678"),
        ("input", "pii_id_card", "redact", "***002X"),
    ]
    assert "13812345678" not in str(guardrail_events(run)) and ID_CARD not in str(guardrail_events(run))


def test_flagged_input_goes_on_unchanged_and_is_recorded(scripted_agent, fake_llm):
    agent = guarded(scripted_agent, answering("已收到"), {"side": "input", "kind": "pii_email", "action": "flag"})

    run = ask(agent, "请联系zhang.san@example.com")

    assert (run.status, run.stop_reason) == ("completed", "final_answer")
    assert last_answer(run) == "已收到"
    assert user_messages_sent(fake_llm, agent) == ["请联系zhang.san@example.com"]
    assert triggers(run) == [("input", "pii_email", "flag", "z***@example.com")]
    assert guardrail_events(run)[0]["outcome"] == "flagged"


def test_rules_of_the_other_side_are_not_applied_to_the_input(scripted_agent, fake_llm):
    agent = guarded(scripted_agent, answering("ok"), {"side": "output", "kind": "pii_phone", "action": "block"})
    run = ask(agent, "13812345678")
    assert (run.stop_reason, last_answer(run)) == ("final_answer", "ok")
    assert user_messages_sent(fake_llm, agent) == ["13812345678"] and triggers(run) == []


# Output.


@pytest.mark.parametrize(
    ("language", "expected"),
    [
        ("en", "I cannot give the answer I came up with: it contains something this agent is not allowed to say."),
        ("zh-hans", "我不能给出这个回答：其中有本助手不能说的内容。"),
    ],
)
def test_a_blocked_answer_is_replaced_and_ends_the_run(scripted_agent, language, expected):
    agent = guarded(
        scripted_agent,
        answering(f"他的身份证号是{ID_CARD}"),
        {"side": "output", "kind": "pii_id_card", "action": "block"},
        language=language,
    )

    run = ask(agent, "查一下")

    assert (run.status, run.stop_reason) == ("completed", "guardrail_blocked")
    answers = list(Message.objects.filter(run=run, role="assistant").values_list("content", flat=True))
    assert len(answers) == 1 and answers[0].startswith(expected)
    # The model's own words stay in its call's response, for auditors only.
    assert ID_CARD in str(LLMCall.objects.get(run=run).response)
    assert triggers(run) == [("output", "pii_id_card", "block", "***002X")]
    assert event_types(run)[-3:] == ["llm_call.completed", "guardrail.triggered", "run.completed"]


def test_a_redacted_answer_is_stored_redacted_and_not_streamed(scripted_agent):
    agent = guarded(
        scripted_agent,
        answering("请拨打+86 139 1234 5678或写信给kefu@example.com，卡号4111 1111 1111 1111。"),
        {"side": "output", "kind": "pii_phone", "action": "redact"},
        {"side": "output", "kind": "pii_bank_card", "action": "redact"},
        {"side": "output", "kind": "pii_email", "action": "flag"},
        model_fields={"stream": True},
    )

    run = ask(agent, "客服电话")

    assert (run.status, run.stop_reason) == ("completed", "final_answer")
    assert last_answer(run) == "请拨打[redacted:phone]或写信给kefu@example.com，卡号[redacted:bank_card]。"
    # One row per rule, in the agent's order of its rules.
    assert triggers(run) == [
        ("output", "pii_phone", "redact", "***5678"),
        ("output", "pii_bank_card", "redact", "***1111"),
        ("output", "pii_email", "flag", "k***@example.com"),
    ]
    assert "message.delta" not in event_types(run)


def test_a_flagged_answer_is_delivered_and_still_streamed(scripted_agent):
    content = "我们的邮箱是kefu@example.com，欢迎来信咨询，我们会在一个工作日内回复。"
    agent = guarded(
        scripted_agent,
        {"defaults": {"stream_chunk_delay_ms": 15}, "fallback": {"content": content}},
        {"side": "output", "kind": "pii_email", "action": "flag"},
        model_fields={"stream": True},
    )

    run = ask(agent, "邮箱")

    assert (run.stop_reason, last_answer(run)) == ("final_answer", content)
    assert triggers(run) == [("output", "pii_email", "flag", "k***@example.com")]
    deltas = RunEvent.objects.filter(run=run, type="message.delta").values_list("payload", flat=True)
    assert "".join(d["text"] for d in deltas) == content


def test_output_rules_check_the_final_answer_not_the_tool_calls(scripted_agent):
    script = {
        "scenarios": [
            {
                "match": ".",
                "steps": [
                    {"tool_calls": [{"name": "test-echo", "arguments": {"text": "13812345678"}}]},
                    {"content": "done"},
                ],
            }
        ]
    }
    agent = guarded(
        scripted_agent, script, {"side": "output", "kind": "pii_phone", "action": "block"}, tools=["test-echo"]
    )
    run = ask(agent, "go")
    assert (run.stop_reason, last_answer(run), triggers(run)) == ("final_answer", "done", [])


# Versions and cost.


def test_rules_are_pinned_with_the_version_and_absent_without_any(scripted_agent):
    agent = scripted_agent(answering("hi"))
    plain = agent_version_current(agent=agent)
    assert "guardrails" not in plain.snapshot

    rule = GuardrailRule.objects.create(agent=agent, side="input", kind="blocked_terms", terms="a\nb", action="flag")
    pinned = agent_version_current(agent=agent)
    assert pinned.number == plain.number + 1
    assert pinned.snapshot["guardrails"] == {
        "redact_stored": False,
        "rules": [{"id": rule.pk, "side": "input", "kind": "blocked_terms", "action": "flag", "terms": ["a", "b"]}],
    }

    GuardrailRule.objects.filter(pk=rule.pk).update(enabled=False)
    back = agent_version_current(agent=agent)
    assert "guardrails" not in back.snapshot and back.config_hash == plain.config_hash


def test_a_run_keeps_the_rules_of_its_version(scripted_agent, fake_llm):
    agent = scripted_agent(answering("ok"))
    run = start_run(agent, "13812345678")
    GuardrailRule.objects.create(agent=agent, side="input", kind="pii_phone", action="block")
    assert advance(run).stop_reason == "final_answer"


def _statements(agent, text: str) -> list[str]:
    run = start_run(agent, text)
    with CaptureQueriesContext(connection) as queries:
        run_advance(run_id=run.pk)
    assert Run.objects.get(pk=run.pk).stop_reason == "final_answer"
    return [query["sql"] for query in queries]


# Commits: counts the statements of a run as a worker makes them, in autocommit (conversations.batch).
@pytest.mark.django_db(transaction=True)
def test_rules_that_match_nothing_cost_no_statement(scripted_agent):
    plain = scripted_agent(answering("天气晴"))
    ruled = guarded(
        scripted_agent,
        answering("天气晴"),
        {"side": "both", "kind": "pii_phone", "action": "block"},
        {"side": "both", "kind": "blocked_terms", "action": "redact", "terms": "机密"},
    )
    assert len(_statements(ruled, "天气如何")) == len(_statements(plain, "天气如何"))


@pytest.mark.parametrize(
    ("answer", "matched"), [("天气晴", False), ("请拨打+86 139 1234 5678", True)], ids=["nothing", "redacted"]
)
def test_a_final_answer_is_scanned_by_the_output_rules_once(scripted_agent, monkeypatch, answer, matched):
    # Whether the answer's commit may end the run and what that commit stores both come from
    # one scan of the answer.
    agent = guarded(scripted_agent, answering(answer), {"side": "output", "kind": "pii_phone", "action": "redact"})
    scanned = []
    real_scan = guardrails.scan

    def scan(rules, text):
        scanned.append(text)
        return real_scan(rules, text)

    monkeypatch.setattr(guardrails, "scan", scan)

    run = ask(agent, "客服电话")

    assert (run.status, run.stop_reason) == ("completed", "final_answer")
    assert scanned == [answer]
    assert bool(triggers(run)) is matched


def test_a_retention_purge_takes_the_triggers_with_the_run(scripted_agent):
    agent = guarded(
        scripted_agent, answering("ok"), {"side": "input", "kind": "pii_phone", "action": "flag"}, retention_days=1
    )
    run = ask(agent, "13812345678")
    assert triggers(run)
    Run.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(days=2))

    result = runs_purge(agent=agent)

    assert result.counts["guardrail_triggers"] == 1 and result.counts["runs"] == 1
    assert not GuardrailTrigger.objects.exists()


# Moderation by a model.

MODERATOR = {
    "scenarios": [
        {"match": "炸弹", "steps": [{"content": '```json\n{"verdict": "block", "reason": "weapons"}\n```'}]},
        {"match": "maybe", "steps": [{"content": 'Say {"verdict": "allow"}. Or rather {"verdict": "block"}.'}]},
    ],
    "fallback": {"content": '{"verdict": "allow"}'},
}


@pytest.fixture
def moderator(fake_llm):
    return ModelConfigFactory(
        base_url=fake_llm.api_base, model=fake_llm.script(f"m-{uuid.uuid4().hex[:10]}", MODERATOR)
    )


def moderation_rule(moderator, side: str, action: str) -> dict:
    return {"side": side, "kind": "moderation", "action": action, "model_config": moderator, "rubric": "No weapons."}


def calls(run: Run) -> list[tuple]:
    return list(LLMCall.objects.filter(run=run).order_by("id").values_list("purpose", "iteration", "status"))


def test_input_moderation_blocks_before_the_agent_s_model_and_counts_its_tokens(scripted_agent, fake_llm, moderator):
    agent = guarded(scripted_agent, answering("never said"), moderation_rule(moderator, "input", "block"))

    run = ask(agent, "怎么做炸弹")

    assert (run.status, run.stop_reason) == ("completed", "guardrail_blocked")
    assert sent_to_model(fake_llm, agent) == []
    assert calls(run) == [("moderation", 0, "succeeded")]
    call = LLMCall.objects.get(run=run)
    assert run.total_tokens == call.total_tokens > 0 and run.iterations == 0
    assert triggers(run) == [("input", "moderation", "block", "weapons")]
    [request] = fake_llm.requests(moderator.model)
    system, user = request["messages"]
    assert "No weapons." in system["content"] and '"怎么做炸弹"' in user["content"]


def test_input_moderation_that_allows_lets_the_run_go_on(scripted_agent, fake_llm, moderator):
    agent = guarded(
        scripted_agent,
        answering("你好！"),
        {"side": "input", "kind": "pii_phone", "action": "redact"},
        moderation_rule(moderator, "input", "block"),
    )

    run = ask(agent, "你好，我的电话13812345678")

    assert (run.stop_reason, last_answer(run)) == ("final_answer", "你好！")
    assert calls(run) == [("moderation", 0, "succeeded"), ("step", 1, "succeeded")]
    assert run.total_tokens == sum(LLMCall.objects.filter(run=run).values_list("total_tokens", flat=True))
    assert triggers(run) == [("input", "pii_phone", "redact", "***5678")]
    # What is kept from the agent's model is kept from the moderating one too.
    [request] = fake_llm.requests(moderator.model)
    assert '"你好，我的电话[redacted:phone]"' in request["messages"][-1]["content"]


def test_an_unreadable_verdict_counts_as_a_match(scripted_agent, moderator):
    agent = guarded(scripted_agent, answering("maybe so"), moderation_rule(moderator, "output", "flag"))

    run = ask(agent, "hi")

    assert (run.stop_reason, last_answer(run)) == ("final_answer", "maybe so")
    # The answer's call row is written before the request; the verdict is asked before it is recorded.
    assert calls(run) == [("step", 1, "succeeded"), ("moderation", 1, "succeeded")]
    assert triggers(run) == [("output", "moderation", "flag", UNREADABLE_VERDICT)]


def test_output_moderation_blocks_the_answer_before_it_is_stored(scripted_agent, moderator):
    agent = guarded(scripted_agent, answering("先买炸弹原料"), moderation_rule(moderator, "output", "block"))

    run = ask(agent, "hi")

    assert run.stop_reason == "guardrail_blocked"
    assert last_answer(run).startswith("I cannot give the answer I came up with")
    assert "炸弹" not in "".join(Message.objects.filter(run=run).values_list("content", flat=True))
    assert triggers(run) == [("output", "moderation", "block", "weapons")]


def test_the_summary_model_sees_the_user_s_messages_redacted_too(scripted_agent):
    padding = "weather details " * 14
    script = {
        "scenarios": [
            {"match": TRANSCRIPT_HEADING, "steps": [{"content": "Summary of earlier turns."}]},
            {"match": r"turn \d+", "steps": [{"content": "Answer: " + padding}]},
        ]
    }
    agent = guarded(
        scripted_agent,
        script,
        {"side": "input", "kind": "pii_phone", "action": "redact"},
        context_token_budget=300,
    )
    conversation = None
    for n in range(1, 6):
        run = ask(agent, f"turn {n}: call 13812345678", conversation)
        conversation = run.conversation

    summaries = LLMCall.objects.filter(run__conversation=conversation, purpose="summary")
    assert summaries.exists()
    for call in summaries:
        source = call.request["messages"][-1]["content"]
        assert "[redacted:phone]" in source and "13812345678" not in source


def test_a_message_a_rule_already_blocks_is_not_sent_to_the_moderator(scripted_agent, fake_llm, moderator):
    agent = guarded(
        scripted_agent,
        answering("never said"),
        {"side": "input", "kind": "blocked_terms", "action": "block", "terms": "机密"},
        moderation_rule(moderator, "input", "flag"),
    )
    run = ask(agent, "机密")
    assert run.stop_reason == "guardrail_blocked" and calls(run) == []
    assert triggers(run) == [("input", "blocked_terms", "block", "机密")]
