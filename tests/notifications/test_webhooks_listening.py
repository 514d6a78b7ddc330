"""Which runs a webhook hears: the condition notifications' run-event listener registers, read
before a terminal or approval event is written (conversations.batch.run_listened)."""

import pytest

from agents.services import agent_version_current
from conversations.batch import run_listened
from conversations.models import Run
from conversations.services import conversation_create
from notifications.models import Webhook
from tests.support.factories import make_agent

pytestmark = pytest.mark.django_db

URL = "https://hooks.example.com/agentry"
SECRET = "s" * 32


def _run(agent, conversation=None) -> Run:
    conversation = conversation or conversation_create(agent=agent)
    return Run.objects.create(conversation=conversation, agent=agent, agent_version=agent_version_current(agent=agent))


def test_no_webhook_no_listener():
    assert not run_listened(run_id=_run(make_agent()).pk)


def test_an_active_webhook_of_the_run_s_agent_listens():
    agent = make_agent()
    Webhook.objects.create(agent=agent, url=URL, secret=SECRET)
    assert run_listened(run_id=_run(agent).pk)


def test_a_switched_off_webhook_or_another_agent_s_does_not():
    agent, other = make_agent(), make_agent()
    Webhook.objects.create(agent=agent, url=URL, secret=SECRET, is_active=False)
    Webhook.objects.create(agent=other, url=URL, secret=SECRET)
    assert not run_listened(run_id=_run(agent).pk)


def test_a_conversation_s_webhook_hears_only_that_conversation():
    agent = make_agent()
    mine = conversation_create(agent=agent)
    Webhook.objects.create(agent=agent, conversation=mine, url=URL, secret=SECRET)
    assert run_listened(run_id=_run(agent, mine).pk)
    assert not run_listened(run_id=_run(agent).pk)


def test_a_run_that_does_not_exist_has_no_listener():
    assert not run_listened(run_id="00000000-0000-0000-0000-000000000000")
