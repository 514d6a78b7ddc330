"""Driving runs in-process (engine tests) without the queue.

`start_run` posts the user message without handing the run to the broker (a worker left
running by an end-to-end test would otherwise race the in-process loop); `advance` then
takes every step in this process, as a worker would.
"""

from unittest import mock

from conversations.models import Conversation, Message, Run
from conversations.services import conversation_create
from engine import loop as loop_module
from engine.admission import message_post
from engine.loop import run_advance


def endings_asked(monkeypatch) -> list[dict]:
    """The endings the loop asks run_finish to make from now on (none when a final answer's commit
    made it: engine.runs.AnswerEnding, and run_finish only does what follows)."""
    seen = []
    finish = loop_module.run_finish

    def recorded(**ending):
        if ending.get("made") is None:
            seen.append(ending)
        return finish(**ending)

    monkeypatch.setattr(loop_module, "run_finish", recorded)
    return seen


def start_run(agent, content: str = "hello", conversation: Conversation | None = None) -> Run:
    conversation = conversation or conversation_create(agent=agent)
    with mock.patch("engine.tasks.run_advance_task.delay"):
        return message_post(conversation=conversation, content=content)


def advance(run: Run) -> Run:
    run_advance(run_id=run.pk)
    run.refresh_from_db()
    return run


def ask(agent, content: str, conversation: Conversation | None = None) -> Run:
    return advance(start_run(agent, content, conversation))


def last_answer(run: Run) -> str:
    return Message.objects.filter(run=run, role="assistant").order_by("-order").first().content
