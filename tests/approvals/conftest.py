"""Fixtures for the approval tests: approvers, agents on scripted fake models, captured enqueues."""

import itertools

import pytest
from django.contrib.auth.models import Group, User

from agents.models import AgentTool
from conversations.models import Run
from conversations.services import conversation_create
from engine.admission import message_post
from engine.tasks import run_advance_task
from tests.support.factories import make_agent
from tools.models import ToolDefinition

_names = itertools.count()


@pytest.fixture
def approver(db):
    user = User.objects.create_user("approver", password="approver-pass-1")
    user.groups.add(Group.objects.get(name="Approvers"))
    return user


@pytest.fixture
def owner(db):
    return User.objects.create_user("owner", password="owner-pass-1")


@pytest.fixture
def enqueued(monkeypatch):
    """Run ids handed to the queue; the test advances runs itself with run_advance."""
    ids: list[str] = []
    monkeypatch.setattr(run_advance_task, "delay", lambda run_id: ids.append(str(run_id)))
    return ids


class Scenario:
    """An agent whose fake model follows `steps` for every user message, and helpers to run it."""

    def __init__(
        self,
        fake_llm,
        *,
        steps: list[dict],
        match: str = ".",
        fallback: dict | None = None,
        tools=("test-counter", "test-echo"),
        approval: dict | None = None,
        rules: dict | None = None,
        owner=None,
        tool_settings: dict | None = None,
    ):
        self.fake_llm = fake_llm
        script = {"scenarios": [{"match": match, "steps": steps}]}
        if fallback:
            script["fallback"] = fallback
        self.model = fake_llm.script(f"approvals-{next(_names)}", script)
        self.agent = make_agent(
            tools=list(tools),
            approval=approval,
            model_config__base_url=fake_llm.api_base,
            model_config__model=self.model,
            model_config__max_retries=0,
        )
        for tool_name, fields in (tool_settings or {}).items():
            ToolDefinition.objects.filter(name=tool_name).update(**fields)
        for tool_name, rule in (rules or {}).items():
            AgentTool.objects.filter(agent=self.agent, tool__name=tool_name).update(approval="rule", approval_rule=rule)
        self.conversation = conversation_create(agent=self.agent, owner=owner)

    def post(self, content: str = "please do it") -> Run:
        return message_post(conversation=self.conversation, content=content)

    def requests(self) -> list[dict]:
        return self.fake_llm.requests(self.model)


def counter_steps(*labels: str, reply: str = "Done: {last_tool_result}") -> list[dict]:
    """One step calling test-counter once per label (in parallel), then a final answer."""
    return [
        {"tool_calls": [{"name": "test-counter", "arguments": {"label": label}} for label in labels]},
        {"content": reply},
    ]


@pytest.fixture
def scenario(fake_llm, db):
    def build(**kwargs) -> Scenario:
        return Scenario(fake_llm, **kwargs)

    return build
