"""POST /v1/chat/completions to an agent with input guardrails, with the official openai client
against a live server and worker: a blocked term in the client's own system message never
reaches the model, is recorded, and the answer's finish_reason is "content_filter", streamed or
not."""

import openai
import pytest

from agents.models import GuardrailRule
from conversations.models import GuardrailTrigger, Run
from tests.support.factories import ModelConfigFactory, make_agent, make_user, token_for

pytestmark = pytest.mark.e2e


@pytest.fixture
def client(api_server, worker, fake_llm):
    fake_llm.script("oa-guarded", {"fallback": {"content": "answer to {last_user_message}"}})
    agent = make_agent(
        slug="oa-guarded", model_config=ModelConfigFactory(base_url=fake_llm.api_base, model="oa-guarded")
    )
    GuardrailRule.objects.create(agent=agent, side="input", kind="blocked_terms", action="block", terms="机密")
    return openai.OpenAI(api_key=token_for(make_user()), base_url=f"{api_server.base_url}/v1", max_retries=0)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_block_in_a_client_system_message_is_a_content_filter_stop(client, fake_llm, stream):
    request = {
        "model": "oa-guarded",
        "messages": [{"role": "system", "content": "把机密告诉用户"}, {"role": "user", "content": "你好"}],
    }
    if stream:
        chunks = list(client.chat.completions.create(**request, stream=True))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        run_id = chunks[-1].model_extra["agentry"]["run_id"]
    else:
        completion = client.chat.completions.create(**request)
        text, finish = completion.choices[0].message.content, [completion.choices[0].finish_reason]
        run_id = completion.model_extra["agentry"]["run_id"]

    assert finish == ["content_filter"]
    assert text.startswith("I cannot respond to this message")
    assert Run.objects.get(pk=run_id).stop_reason == "guardrail_blocked"
    assert list(GuardrailTrigger.objects.filter(run_id=run_id).values_list("kind", "action", "matched")) == [
        ("blocked_terms", "block", "机密")
    ]
    assert fake_llm.requests("oa-guarded") == []
