"""A new conversation's first run, as a chat completion starts one (engine.admission.conversation_start):
what message_submit would write, without its lock, its reads of the new row, or a savepoint."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.models import Agent
from agents.releases import canary_start, release_choice, version_publish
from conversations.batch import Batch
from conversations.models import Conversation, Message, Run, RunEvent, RunRequest
from conversations.services import conversation_create
from engine.admission import conversation_start, message_submit
from tests.security.privileges import user_with
from tests.support.factories import make_agent, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def sent(no_enqueue):
    return no_enqueue


def _written(run: Run) -> dict:
    """What a start wrote, without ids and times."""
    run.refresh_from_db()
    request = RunRequest.objects.get(run=run)
    [event] = RunEvent.objects.filter(run=run)
    messages = Message.objects.filter(conversation=run.conversation).order_by("order")
    return {
        "run": (run.status, run.agent_id, run.agent_version_id, run.event_seq, run.enqueued_at is not None),
        "deadline": None if run.deadline is None else round((run.deadline - run.created_at).total_seconds()),
        "request": (request.user_id, request.content, request.content_hash, request.idempotency_key),
        "event": (event.seq, event.type, event.payload),
        "messages": [(m.order, m.role, m.content, m.run_id == run.pk) for m in messages],
        "conversation": (run.conversation.message_count, run.conversation.agent_version_id),
    }


# Commits: the run goes to the broker in an on_commit callback, which the test counts.
@pytest.mark.django_db(transaction=True)
def test_a_start_writes_what_a_post_into_a_new_conversation_writes(sent):
    agent = make_agent(run_timeout_seconds=120)
    user = make_user()
    posted = message_submit(
        conversation=conversation_create(agent=agent, owner=user, title="t"), content="你好 'x' 100%", user=user
    ).run
    started = conversation_start(agent=agent, user=user, content="你好 'x' 100%", title="t")

    assert _written(started) == _written(posted)
    assert _written(started)["deadline"] == 120 and _written(started)["conversation"] == (1, None)
    assert sent == [str(posted.pk), str(started.pk)]  # handed to a worker once committed, as a post is


def test_the_history_comes_first_and_belongs_to_no_run(sent):
    agent = make_agent()
    history = [
        {"role": Message.Role.SYSTEM, "content": "Answer briefly."},
        {"role": Message.Role.USER, "content": "one"},
        {"role": Message.Role.ASSISTANT, "content": "1"},
    ]
    run = conversation_start(agent=agent, user=make_user(), content="two", history=history)

    assert _written(run)["messages"] == [
        (1, "system", "Answer briefly.", False),
        (2, "user", "one", False),
        (3, "assistant", "1", False),
        (4, "user", "two", True),
    ]
    assert _written(run)["conversation"][0] == 4


def test_a_published_agent_s_conversation_keeps_the_published_version_not_the_draft(sent):
    agent = make_agent(system_prompt="Published.")
    published = version_publish(agent=agent, user=user_with("agents.publish_agent"), note="One.").version
    Agent.objects.filter(pk=agent.pk).update(system_prompt="Draft.")
    agent.refresh_from_db()

    run = conversation_start(agent=agent, user=make_user(), content="hi")

    assert run.agent_version_id == published.pk
    assert Conversation.objects.get(pk=run.conversation_id).agent_version_id == published.pk


def test_a_canary_splits_new_conversations_as_release_choice_does_and_they_keep_their_version(sent):
    agent = make_agent(system_prompt="Published.")
    publisher = user_with("agents.publish_agent")
    published = version_publish(agent=agent, user=publisher, note="One.").version
    Agent.objects.filter(pk=agent.pk).update(system_prompt="Candidate.")
    agent.refresh_from_db()
    candidate = canary_start(agent=agent, percent=50, user=publisher, note="Two.").version
    agent.refresh_from_db()
    user = make_user()

    runs = [conversation_start(agent=agent, user=user, content=f"q{n}") for n in range(16)]

    chosen = {run.agent_version_id for run in runs}
    assert chosen == {published.pk, candidate.pk}  # 16 conversations: both sides, all but surely
    for run in runs:
        assert run.agent_version_id == release_choice(agent=agent, conversation_id=run.conversation_id, current_id=None)
        conversation = Conversation.objects.get(pk=run.conversation_id)
        assert conversation.agent_version_id == run.agent_version_id
        # The conversation's next message runs the version it was given.
        Run.objects.filter(pk=run.pk).update(status="completed")
        later = message_submit(conversation=conversation, content="more", user=user).run
        assert later.agent_version_id == run.agent_version_id


# Commits: counts the BEGIN and COMMIT a start makes, which a test's transaction turns into a savepoint.
@pytest.mark.django_db(transaction=True)
def test_a_start_is_the_insert_and_the_run_s_statement_in_one_transaction(sent):
    if connection.vendor != "postgresql":
        pytest.skip("the run's writes are one statement on PostgreSQL")
    made = make_agent()
    user = make_user()

    def agent():  # as a request reads it, holding no model config: its version is found by state
        # With its workspace, as agent_usable_by gives it: a workspace without limits costs no read.
        return Agent.objects.select_related("workspace").get(pk=made.pk)

    conversation_start(agent=agent(), user=user, content="warm")  # the version is found once
    fresh = agent()
    with CaptureQueriesContext(connection) as queries:
        conversation_start(agent=fresh, user=user, content="counted")

    statements = [query["sql"] for query in queries]
    assert not [sql for sql in statements if "SAVEPOINT" in sql]
    assert not [sql for sql in statements if sql.startswith("UPDATE") and "conversations_conversation" in sql]
    assert not [sql for sql in statements if sql.startswith("SELECT") and "conversations_run" in sql]
    begin, insert, run, commit = statements[-4:]
    assert (begin, commit) == ("BEGIN", "COMMIT")
    assert insert.startswith('INSERT INTO "conversations_conversation"') and run.startswith('WITH "new_run"')
    assert len(statements) <= 5, "\n".join(s[:150] for s in statements)  # and the version's one read


def test_a_start_whose_run_cannot_be_written_leaves_no_conversation(sent, monkeypatch):
    agent = make_agent()
    before = Conversation.objects.count()

    def broken(self):
        raise RuntimeError("the database went away")

    monkeypatch.setattr(Batch, "execute", broken)
    with pytest.raises(RuntimeError):
        conversation_start(agent=agent, user=make_user(), content="lost")

    assert Conversation.objects.count() == before and sent == []
