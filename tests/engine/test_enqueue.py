import pytest

from conversations.models import Message, Run
from conversations.services import conversation_create
from engine import tasks
from engine.admission import message_post
from tests.support.factories import make_agent

pytestmark = pytest.mark.django_db


def test_message_and_run_commit_together_and_only_the_id_is_enqueued(django_capture_on_commit_callbacks, monkeypatch):
    sent = []
    monkeypatch.setattr(tasks.run_advance_task, "delay", lambda *args, **kwargs: sent.append((args, kwargs)))
    conversation = conversation_create(agent=make_agent())

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        run = message_post(conversation=conversation, content="hi")
    assert sent == []  # nothing leaves before the transaction commits
    for callback in callbacks:
        callback()

    assert sent == [((str(run.pk),), {})]
    assert Run.objects.get(pk=run.pk).status == "queued"
    [message] = Message.objects.filter(conversation=conversation)
    assert (message.role, message.content, message.run_id, message.order) == ("user", "hi", run.pk, 1)
    assert list(run.events.values_list("seq", "type")) == [(1, "run.queued")]


def test_failed_transaction_enqueues_nothing(django_capture_on_commit_callbacks, monkeypatch):
    from django.db import transaction

    sent = []
    monkeypatch.setattr(tasks.run_advance_task, "delay", lambda *args: sent.append(args))
    conversation = conversation_create(agent=make_agent())
    with django_capture_on_commit_callbacks(execute=True):
        with pytest.raises(RuntimeError):
            with transaction.atomic():
                message_post(conversation=conversation, content="lost")
                raise RuntimeError("the request failed after posting")
    assert sent == [] and not Run.objects.exists()


def test_a_new_run_s_first_event_wakes_no_stream_and_its_next_one_does(django_capture_on_commit_callbacks):
    # Nothing can watch a run before its id leaves the transaction that creates it: a wake-up
    # would be a Redis round trip on every post for no one. Its later events wake as usual.
    from conversations.batch import run_event_append
    from conversations.events import EventType
    from conversations.wakeups import publish_run_event

    def wake_ups(callbacks) -> list:
        return [callback.args for callback in callbacks if getattr(callback, "func", None) is publish_run_event]

    conversation = conversation_create(agent=make_agent())
    with django_capture_on_commit_callbacks(execute=False) as posted:
        run = message_post(conversation=conversation, content="hi")
    with django_capture_on_commit_callbacks(execute=False) as later:
        run_event_append(run_id=run.pk, type=EventType.RUN_REQUEUED, payload={"reason": "test"})

    assert len(posted) == 1  # the hand-over to a worker alone
    assert wake_ups(posted) == []
    assert wake_ups(later) == [(run.pk,)]
