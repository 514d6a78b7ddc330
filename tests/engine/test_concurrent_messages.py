"""Concurrent messages on one conversation: each agent policy, with real concurrent posts on
PostgreSQL and a real worker."""

from datetime import timedelta

import pytest
from django.utils import timezone

from conversations.models import Message, Run
from conversations.services import conversation_create
from engine.admission import ConversationBusy, message_post, message_submit
from engine.leases import run_claim
from engine.runs import run_finish
from engine.sweeper import runs_sweep
from tests.support.concurrency import concurrently
from tests.support.factories import ModelConfigFactory, make_agent, make_user
from tests.support.waits import wait_for

THREADS = 5


def _conversation(policy: str, *, model: str = "echo", base_url: str = "http://127.0.0.1:9/v1"):
    agent = make_agent(
        tools=["test-echo"], concurrent_messages=policy, model_config=ModelConfigFactory(base_url=base_url, model=model)
    )
    user = make_user()
    return conversation_create(agent=agent, owner=user), user


def _all_terminal(runs):
    return all(r.is_terminal for r in Run.objects.filter(pk__in=[r.pk for r in runs]))


# These tests take the worker too: the run they admit is enqueued, and it must be finished before
# the test database is emptied, or a worker step could deadlock with the TRUNCATE.
@pytest.mark.e2e
def test_reject_lets_exactly_one_of_concurrent_posts_through(worker, fake_llm):
    conversation, user = _conversation("reject", base_url=fake_llm.api_base)
    results = concurrently(
        [lambda i=i: message_post(conversation=conversation, content=f"q{i}", user=user) for i in range(THREADS)]
    )
    runs = [r for r in results if isinstance(r, Run)]
    busy = [r for r in results if isinstance(r, ConversationBusy)]
    assert len(runs) == 1 and len(busy) == THREADS - 1, results
    assert all(b.run.pk == runs[0].pk for b in busy)
    assert Run.objects.filter(conversation=conversation).count() == 1
    wait_for(lambda: _all_terminal(runs), message="the admitted run to finish")
    assert [m.content for m in Message.objects.filter(conversation=conversation, role="user")] == [
        runs[0].request.content
    ]


@pytest.mark.e2e
def test_concurrent_retries_with_one_idempotency_key_make_one_run(worker, fake_llm):
    conversation, user = _conversation("enqueue", base_url=fake_llm.api_base)
    results = concurrently(
        [
            lambda: message_submit(conversation=conversation, content="pay", user=user, idempotency_key="retry-1")
            for _ in range(THREADS)
        ]
    )
    assert len({r.run.pk for r in results}) == 1, results
    assert sum(not r.replayed for r in results) == 1
    assert Run.objects.filter(conversation=conversation).count() == 1
    wait_for(lambda: _all_terminal([results[0].run]), message="the run to finish")


@pytest.mark.e2e
def test_enqueue_runs_concurrent_posts_one_after_another(worker, fake_llm):
    fake_llm.script(
        "slow-echo-enqueue",
        {"defaults": {"latency_ms": 150}, "scenarios": [], "fallback": {"content": "answer to {last_user_message}"}},
    )
    conversation, user = _conversation("enqueue", model="slow-echo-enqueue", base_url=fake_llm.api_base)
    results = concurrently(
        [lambda i=i: message_post(conversation=conversation, content=f"q{i}", user=user) for i in range(THREADS)]
    )
    assert all(isinstance(r, Run) for r in results), results
    wait_for(lambda: _all_terminal(results), timeout=60, message="all enqueued runs to finish")

    runs = list(Run.objects.filter(conversation=conversation).order_by("request__id"))
    assert [r.status for r in runs] == ["completed"] * THREADS
    for earlier, later in zip(runs, runs[1:]):
        assert later.started_at >= earlier.finished_at, "two runs of one conversation overlapped"
    # The conversation reads turn by turn, in the order the posts were admitted.
    turns = [(m.role, m.content) for m in Message.objects.filter(conversation=conversation).order_by("order")]
    asked = [r.request.content for r in runs]
    assert turns == [pair for q in asked for pair in (("user", q), ("assistant", f"answer to {q}"))]
    # Each run's model call carried every earlier turn.
    last_request = fake_llm.requests("slow-echo-enqueue")[-1]
    assert len([m for m in last_request["messages"] if m["role"] != "system"]) == 2 * THREADS - 1


def _interruptible(fake_llm, name: str, held) -> None:
    """A long question's run asks for a tool, its model call answered once the test releases it:
    an interrupting post certainly lands while that call is in flight. A cancelled run stops at
    the boundary after it (an answer already being written when the cancel arrives is kept, like
    any step in flight). Any other question is answered at once."""
    long_question = {
        "match": "^long",
        "steps": [
            {"tool_calls": [{"name": "test-echo", "arguments": {"text": "x"}}], "hold": held.label},
            {"content": "the long answer"},
        ],
    }
    fake_llm.script(name, {"scenarios": [long_question], "fallback": {"content": "answer to {last_user_message}"}})


@pytest.mark.e2e
def test_interrupt_cancels_the_active_run_then_starts_the_new_one(worker, fake_llm):
    with fake_llm.held() as held:
        _interruptible(fake_llm, "slow-interrupt", held)
        conversation, user = _conversation("interrupt", model="slow-interrupt", base_url=fake_llm.api_base)
        first = message_post(conversation=conversation, content="long question", user=user)
        held.wait_arrived()  # the first run's model call is in flight

        second = message_post(conversation=conversation, content="never mind, this instead", user=user)
        held.release()
    wait_for(lambda: _all_terminal([first, second]), timeout=30, message="both runs to end")
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.status, first.stop_reason) == ("cancelled", "cancelled")
    assert (second.status, second.stop_reason) == ("completed", "final_answer")
    assert second.started_at >= first.finished_at
    answer = Message.objects.filter(run=second, role="assistant").get()
    assert answer.content == "answer to never mind, this instead"


@pytest.mark.e2e
def test_interrupt_with_concurrent_posts_leaves_only_the_last_one(worker, fake_llm):
    with fake_llm.held() as held:
        _interruptible(fake_llm, "slow-interrupt-many", held)
        conversation, user = _conversation("interrupt", model="slow-interrupt-many", base_url=fake_llm.api_base)
        results = concurrently(
            [
                lambda i=i: message_post(conversation=conversation, content=f"long q{i}", user=user)
                for i in range(THREADS)
            ]
        )
        assert all(isinstance(r, Run) for r in results), results
        held.wait_arrived()  # a run is in its model call: every post has been admitted meanwhile
        held.release()
    wait_for(lambda: _all_terminal(results), timeout=60, message="all runs to end")
    runs = list(Run.objects.filter(conversation=conversation).order_by("request__id"))
    assert [r.status for r in runs] == ["cancelled"] * (THREADS - 1) + ["completed"]


@pytest.mark.django_db
def test_a_waiting_run_cannot_be_claimed_until_the_run_before_it_ends(django_capture_on_commit_callbacks):
    conversation, user = _conversation("enqueue")
    first = message_post(conversation=conversation, content="one", user=user)
    second = message_post(conversation=conversation, content="two", user=user)
    assert not run_claim(run_id=second.pk, owner="test-worker")
    assert not Message.objects.filter(run=second).exists()

    with django_capture_on_commit_callbacks(execute=True):
        run_finish(run_id=first.pk, status="completed", stop_reason="final_answer")
    assert Message.objects.get(run=second).content == "two"
    assert run_claim(run_id=second.pk, owner="test-worker")


@pytest.mark.django_db
def test_the_sweeper_admits_a_waiting_run_whose_hand_over_was_lost(django_capture_on_commit_callbacks, settings):
    conversation, user = _conversation("enqueue")
    first = message_post(conversation=conversation, content="one", user=user)
    second = message_post(conversation=conversation, content="two", user=user)
    # Finished without its after-commit hand-over, as after a crash at the wrong moment.
    run_finish(run_id=first.pk, status="completed", stop_reason="final_answer")
    Run.objects.filter(pk=second.pk).update(
        created_at=timezone.now() - timedelta(seconds=settings.AGENTRY_QUEUED_REENQUEUE_SECONDS + 1)
    )

    with django_capture_on_commit_callbacks(execute=True):
        assert runs_sweep()["admitted"] == 1
    assert Message.objects.get(run=second).content == "two"
