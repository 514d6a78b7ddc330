"""Driving runs in-process (engine tests) without the queue."""

from agents.engine.loop import run_advance
from conversations.models import Message, Run
from conversations.services import conversation_create, message_post


def start_run(agent, content: str = "hello", conversation=None) -> Run:
    conversation = conversation or conversation_create(agent=agent)
    return message_post(conversation=conversation, content=content)


def advance(run: Run) -> Run:
    run_advance(run_id=run.pk)
    run.refresh_from_db()
    return run


def last_answer(run: Run) -> str:
    return Message.objects.filter(run=run, role="assistant").order_by("-order").first().content
