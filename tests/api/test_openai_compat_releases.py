"""/v1/chat/completions is live traffic: once the agent is published it runs the published
version, not the draft edited since."""

import openai
import pytest

from agents.models import Agent
from agents.releases import version_publish
from conversations.models import LLMCall, Run
from tests.security.privileges import user_with
from tests.support.factories import make_user, token_for
from tests.support.llm import agent_on

pytestmark = pytest.mark.e2e


def test_chat_completions_run_the_published_version(api_server, worker, fake_llm):
    agent = agent_on(fake_llm, {"fallback": {"content": "hi"}}, slug="oa-released", system_prompt="Published.")
    published = version_publish(agent=agent, user=user_with("agents.publish_agent"), note="One.").version
    Agent.objects.filter(pk=agent.pk).update(system_prompt="Draft.")
    client = openai.OpenAI(
        api_key=token_for(make_user()), base_url=f"{api_server.base_url}/v1", max_retries=0, timeout=60
    )

    completion = client.chat.completions.create(model="oa-released", messages=[{"role": "user", "content": "hello"}])

    run = Run.objects.get(pk=completion.model_extra["agentry"]["run_id"])
    assert run.status == "completed" and run.agent_version == published
    [request] = LLMCall.objects.filter(run=run).values_list("request", flat=True)
    assert [m["content"] for m in request["messages"] if m["role"] == "system"] == ["Published."]
