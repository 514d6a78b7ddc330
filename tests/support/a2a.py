"""An agent exposed over A2A on a live server (the suite's uvicorn, `api_server`), and a2a-sdk's
own client for it. A test that needs one imports the fixture:

    from tests.support.a2a import a2a_expose  # noqa: F401 - fixture

    def test_…(worker, a2a_expose, fake_llm):
        exposed = a2a_expose(agent)          # its card URL, endpoint and a token that may use it
        async with a2a_client(exposed) as client: …
"""

from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory

from agents.models import Agent
from tests.support.factories import make_user, token_for


@dataclass
class ExposedAgent:
    agent: Agent
    endpoint: str  # the JSON-RPC endpoint, the base the card's path is relative to
    card_url: str
    token: str
    user: object

    @property
    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.token}"}


@pytest.fixture
def a2a_expose(api_server):
    """expose(agent, user=None) → ExposedAgent: the agent opted in to A2A on the live server, and
    a token of `user` (a new member of the default workspace when None)."""

    def expose(agent: Agent, *, user=None) -> ExposedAgent:
        Agent.objects.filter(pk=agent.pk).update(a2a_exposed=True)
        user = user or make_user()
        endpoint = f"{api_server.base_url}/a2a/{agent.slug}"
        return ExposedAgent(
            agent=agent,
            endpoint=endpoint,
            card_url=f"{endpoint}/.well-known/agent-card.json",
            token=token_for(user),
            user=user,
        )

    return expose


@asynccontextmanager
async def a2a_client(exposed: ExposedAgent, *, streaming: bool = True, timeout: float = 60):
    """a2a-sdk's client for the agent, made from its card as the SDK resolves it."""
    http = httpx.AsyncClient(headers=exposed.headers, timeout=timeout)
    try:
        card = await A2ACardResolver(http, exposed.endpoint).get_agent_card()
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=streaming)).create(card)
        try:
            yield client
        finally:
            await client.close()
    finally:
        await http.aclose()
