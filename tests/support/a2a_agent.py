"""A tiny A2A agent built from the a2a-sdk's own server classes, on a local port.

It echoes the message as an artifact ("echo: …"); a message starting with "ask" ends in
input-required with a question, "login" in auth-required, "fail" in failed, and "slow" works
until it is cancelled (tasks/cancel), which it records. What each request carried (its headers)
is recorded too, so tests can check what the remote-agent tool really sent.
"""

import asyncio
import socket

import pytest
from a2a.helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor
from a2a.server.request_handlers import DefaultRequestHandlerV2
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Part
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware

from fakellm.testing import serve_app_in_thread


class EchoExecutor(AgentExecutor):
    def __init__(self, agent: "EchoAgent"):
        self.agent = agent

    async def execute(self, context, event_queue):
        text = context.get_user_input()
        task = context.current_task or new_task_from_user_message(context.message)
        await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        self.agent.started.append((task.id, text))
        if text.startswith("ask"):
            await updater.requires_input(updater.new_agent_message([Part(text="Which city?")]))
            return
        if text.startswith("login"):
            await updater.requires_auth(updater.new_agent_message([Part(text="Sign in at the agent's page.")]))
            return
        if text.startswith("fail"):
            await updater.failed(updater.new_agent_message([Part(text="The upstream system is down.")]))
            return
        if text.startswith("slow"):
            await asyncio.sleep(120)
        await updater.add_artifact([Part(text="echo: ")], artifact_id="answer")
        await updater.add_artifact([Part(text=text)], artifact_id="answer", append=True)
        await updater.complete()

    async def cancel(self, context, event_queue):
        self.agent.cancelled.append(context.task_id)
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


class EchoAgent:
    def __init__(self, *, streaming: bool = True):
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        self.base_url = f"http://127.0.0.1:{port}"
        self.card_url = f"{self.base_url}/.well-known/agent-card.json"
        self.started: list[tuple[str, str]] = []
        self.cancelled: list[str] = []
        self.headers: list[dict] = []
        card = AgentCard(
            name="Echo",
            description="Says back what it is told.",
            version="1.0",
            supported_interfaces=[
                AgentInterface(url=f"{self.base_url}/a2a", protocol_binding="JSONRPC", protocol_version="1.0")
            ],
            capabilities=AgentCapabilities(streaming=streaming),
            default_input_modes=["text/plain"],
            default_output_modes=["text/plain"],
            skills=[
                AgentSkill(id="echo", name="Echo", description="Repeats the message.", tags=["echo"]),
                AgentSkill(id="shout", name="Shout", description="Repeats it louder.", tags=["echo"]),
            ],
        )
        handler = DefaultRequestHandlerV2(
            agent_executor=EchoExecutor(self), task_store=InMemoryTaskStore(), agent_card=card
        )
        routes = create_agent_card_routes(card) + create_jsonrpc_routes(handler, "/a2a")
        app = Starlette(routes=routes, middleware=[Middleware(BaseHTTPMiddleware, dispatch=self._record)])
        _url, self.stop = serve_app_in_thread(app, port=port)

    async def _record(self, request, call_next):
        self.headers.append(dict(request.headers))
        return await call_next(request)


@pytest.fixture(scope="session")
def echo_agent():
    agent = EchoAgent()
    yield agent
    agent.stop()
