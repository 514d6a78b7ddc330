"""What an A2A client sees of a run and an agent, without a database: the task state of each run
status, the card's endpoint and capabilities, and the push configs refused before any write."""

import uuid
from datetime import UTC, datetime

import pytest
from a2a.types import TaskPushNotificationConfig, TaskState
from a2a.utils.errors import InvalidParamsError

from a2a_server.cards import agent_card
from a2a_server.runs import task_state
from a2a_server.submit import push_config_check
from agents.models import Agent
from conversations.models import Run, RunStatus

NOW = datetime(2026, 12, 7, tzinfo=UTC)


@pytest.mark.parametrize(
    ("status", "started", "state"),
    [
        (RunStatus.QUEUED, None, TaskState.TASK_STATE_SUBMITTED),
        (RunStatus.QUEUED, NOW, TaskState.TASK_STATE_WORKING),
        (RunStatus.RUNNING, NOW, TaskState.TASK_STATE_WORKING),
        (RunStatus.AWAITING_CHILDREN, NOW, TaskState.TASK_STATE_WORKING),
        (RunStatus.AWAITING_APPROVAL, NOW, TaskState.TASK_STATE_INPUT_REQUIRED),
        (RunStatus.COMPLETED, NOW, TaskState.TASK_STATE_COMPLETED),
        (RunStatus.FAILED, NOW, TaskState.TASK_STATE_FAILED),
        (RunStatus.EXPIRED, NOW, TaskState.TASK_STATE_FAILED),
        (RunStatus.CANCELLED, None, TaskState.TASK_STATE_CANCELED),
    ],
)
def test_each_run_status_is_one_task_state(status, started, state):
    assert task_state(Run(id=uuid.uuid4(), status=status, started_at=started)) == state


def test_every_run_status_has_a_task_state():
    for status in RunStatus:
        task_state(Run(status=status, started_at=NOW))


def test_the_card_points_at_the_agents_endpoint():
    agent = Agent(name="Support", slug="support", description="Answers customers.", updated_at=NOW)
    card = agent_card(agent=agent, base_url="https://agentry.example.com/")
    assert [i.url for i in card.supported_interfaces] == ["https://agentry.example.com/a2a/support"] * 2
    assert [i.protocol_version for i in card.supported_interfaces] == ["1.0", "0.3"]
    assert card.capabilities.streaming and card.capabilities.push_notifications
    assert card.skills[0].id == "support" and card.skills[0].description == "Answers customers."
    assert card.security_schemes["bearerAuth"].http_auth_security_scheme.scheme == "Bearer"


@pytest.mark.parametrize(
    "config",
    [
        TaskPushNotificationConfig(url="ftp://example.com/x"),
        TaskPushNotificationConfig(url="javascript:alert(1)"),
        TaskPushNotificationConfig(url="https://example.com/" + "x" * 500),
        TaskPushNotificationConfig(url="https://example.com/x", id="i" * 201),
        TaskPushNotificationConfig(url="https://example.com/x", token="a\x00b"),
    ],
)
def test_a_push_config_it_cannot_keep_is_refused(config):
    with pytest.raises(InvalidParamsError):
        push_config_check(config)
