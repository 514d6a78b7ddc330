"""Guardrails cost one scan per message and one row per rule: a message is scanned when its run
starts and what models are to see of it is stored, not scanned again at later steps; thousands
of matches block a run with one trigger row that counts them; and a chat completion's own turns
(system, developer and made-up assistant turns) pass the input rules like the user's message,
a block answering finish_reason "content_filter"."""

import pytest

from agents import guardrails
from agents.models import GuardrailRule
from api.completions import completion_outcome, completion_request_parse, completion_start
from conversations.models import GuardrailTrigger, Message, Run, RunEvent
from tests.support.runs import advance, ask, last_answer

pytestmark = pytest.mark.django_db

BLOCK_TERMS = {"side": "input", "kind": "blocked_terms", "action": "block", "terms": "机密"}
REDACT_PHONES = {"side": "input", "kind": "pii_phone", "action": "redact"}


def guarded(scripted_agent, script: dict, *rules: dict, **fields):
    agent = scripted_agent(script, **fields)
    for rule in rules:
        GuardrailRule.objects.create(agent=agent, **rule)
    return agent


def answering(text: str) -> dict:
    return {"scenarios": [{"match": ".", "steps": [{"content": text}]}]}


def sent(fake_llm, agent) -> list[list[tuple]]:
    """Each request's messages after the agent's system prompt, as (role, content)."""
    return [[(m["role"], m["content"]) for m in r["messages"][1:]] for r in fake_llm.requests(agent.model_config.model)]


def trigger_rows(run: Run) -> list[tuple]:
    return list(
        GuardrailTrigger.objects.filter(run=run).order_by("id").values_list("kind", "action", "matched", "count")
    )


@pytest.fixture
def scans(monkeypatch) -> list[str]:
    """The texts the guardrail rules scan from now on."""
    seen = []
    real = guardrails.scan

    def scan(rules, text):
        seen.append(text)
        return real(rules, text)

    monkeypatch.setattr(guardrails, "scan", scan)
    return seen


def test_a_message_is_scanned_once_and_later_steps_send_what_is_stored(scripted_agent, fake_llm, scans):
    script = {
        "scenarios": [
            {
                "match": ".",
                "steps": [
                    {"tool_calls": [{"name": "test-echo", "arguments": {"text": "a"}}]},
                    {"tool_calls": [{"name": "test-echo", "arguments": {"text": "b"}}]},
                    {"content": "done"},
                ],
            }
        ]
    }
    agent = guarded(scripted_agent, script, REDACT_PHONES, tools=["test-echo"])
    text = "请回电13812345678"

    run = ask(agent, text)

    assert (run.status, run.stop_reason, run.iterations) == ("completed", "final_answer", 3)
    # Three model calls, one scan of the user's message: the verdict is read back, not redone.
    assert scans == [text]
    requests = sent(fake_llm, agent)
    assert len(requests) == 3
    assert all(request[0] == ("user", "请回电[redacted:phone]") for request in requests)
    message = Message.objects.get(run=run, role="user")
    assert (message.content, message.screened_content) == (text, "请回电[redacted:phone]")


def test_the_next_run_sends_the_stored_verdict_and_scans_only_what_it_shows(scripted_agent, fake_llm, scans):
    agent = guarded(scripted_agent, answering("好的"), REDACT_PHONES)
    first = ask(agent, "号码13812345678")
    scans.clear()

    second = ask(agent, "谢谢", conversation=first.conversation)

    assert second.stop_reason == "final_answer"
    # The earlier message is checked as models are shown it (the redacted text), not as typed.
    assert scans == ["号码[redacted:phone]", "谢谢"]
    assert sent(fake_llm, agent)[-1][0] == ("user", "号码[redacted:phone]")
    assert not GuardrailTrigger.objects.filter(run=second).exists()


def test_thousands_of_matches_block_the_run_with_one_row_that_counts_them(scripted_agent, fake_llm):
    # One row per match used to put more parameters in one statement than PostgreSQL takes
    # (65,535), and the run failed as an internal error instead of being blocked.
    agent = guarded(scripted_agent, answering("never said"), BLOCK_TERMS)

    run = ask(agent, "机密 " * 10_000)

    assert (run.status, run.stop_reason) == ("completed", "guardrail_blocked")
    assert last_answer(run).startswith("I cannot respond to this message")
    assert sent(fake_llm, agent) == []
    [row] = GuardrailTrigger.objects.filter(run=run)
    assert (row.count, row.matched, row.samples) == (10_000, "机密", ["机密"] * guardrails.SAMPLES_MAX)
    [event] = RunEvent.objects.filter(run=run, type="guardrail.triggered")
    assert event.payload["triggers"][0]["count"] == 10_000


def test_a_run_checked_again_after_its_block_ends_blocked_without_new_rows(scripted_agent, fake_llm):
    # The worker stopped between the check's commit and the run's end: the next worker finds the
    # stored verdict and ends the run the same way, recording nothing twice.
    agent = guarded(scripted_agent, answering("never said"), BLOCK_TERMS)
    run = ask(agent, "机密")
    message = Message.objects.get(run=run, role="user")
    assert message.screened_content == guardrails.BLOCKED_PLACEHOLDER
    Run.objects.filter(pk=run.pk).update(status="queued", stop_reason="", finished_at=None)
    Message.objects.filter(run=run, role="assistant").delete()

    run = advance(run)

    assert (run.status, run.stop_reason) == ("completed", "guardrail_blocked")
    assert GuardrailTrigger.objects.filter(run=run).count() == 1 and sent(fake_llm, agent) == []


def _complete(agent, admin_user, messages: list[dict]) -> Run:
    request = completion_request_parse({"model": agent.slug, "messages": messages})
    return advance(completion_start(user=admin_user, agent=agent, request=request))


def test_a_chat_completion_s_own_turns_pass_the_input_rules(scripted_agent, fake_llm, admin_user):
    agent = guarded(
        scripted_agent,
        answering("好的"),
        REDACT_PHONES,
        {"side": "input", "kind": "blocked_terms", "action": "redact", "terms": "机密"},
    )

    run = _complete(
        agent,
        admin_user,
        [
            {"role": "system", "content": "客户电话13812345678"},
            {"role": "developer", "content": "机密指示"},
            {"role": "user", "content": "你好"},
            {"role": "assistant", "content": "我记得你的号码+86 139 1234 5678和机密"},
            {"role": "user", "content": "继续"},
        ],
    )

    assert run.stop_reason == "final_answer"
    assert sent(fake_llm, agent) == [
        [
            ("system", "客户电话[redacted:phone]\n\n[redacted:term]指示"),
            ("user", "你好"),
            ("assistant", "我记得你的号码[redacted:phone]和[redacted:term]"),
            ("user", "继续"),
        ]
    ]
    assert trigger_rows(run) == [
        ("pii_phone", "redact", "***5678", 2),
        ("blocked_terms", "redact", "机密", 2),
    ]
    assert completion_outcome(run_id=run.pk).finish_reason == "stop"


@pytest.mark.parametrize("role", ["system", "developer", "assistant"])
def test_a_blocked_term_in_any_turn_of_a_chat_completion_is_a_content_filter_stop(
    scripted_agent, fake_llm, admin_user, role
):
    agent = guarded(scripted_agent, answering("never said"), BLOCK_TERMS)
    turns = [{"role": "user", "content": "你好"}, {"role": "user", "content": "继续"}]
    turns.insert(0 if role != "assistant" else 1, {"role": role, "content": "这是机密"})

    run = _complete(agent, admin_user, turns)

    assert (run.status, run.stop_reason) == ("completed", "guardrail_blocked")
    assert sent(fake_llm, agent) == []
    assert trigger_rows(run) == [("blocked_terms", "block", "机密", 1)]
    outcome = completion_outcome(run_id=run.pk)
    assert outcome.finish_reason == "content_filter"
    assert outcome.text.startswith("I cannot respond to this message")
