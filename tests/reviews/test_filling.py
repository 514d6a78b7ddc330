"""Filling a review queue: each filter picks the runs it should (and only production runs of the
queue's agent or workspace), a fill adds what came since the last one, and a fill is bounded."""

from datetime import timedelta

import pytest
from django.utils import timezone

from conversations.models import RunFeedback
from evals.models import OnlineEvaluator
from reviews import filling
from reviews.filling import review_queue_fill, review_queues_fill
from reviews.models import ReviewItem, ReviewQueue
from reviews.tasks import review_queues_fill_task
from tests.reviews.support import ended_run, guardrail_hit, rated_bad, scored, tool_failed
from tests.support.factories import make_agent
from workspaces.models import Workspace

pytestmark = pytest.mark.django_db

NONE_ON = {"on_negative_feedback": False}


def _items(queue) -> dict:
    return {item.run_id: item.reason for item in ReviewItem.objects.filter(queue=queue)}


def test_each_filter_picks_its_runs_and_says_why():
    agent = make_agent()
    bad, low, high, guarded, failed, rejected, plain = (ended_run(agent) for _ in range(7))
    rated_bad(bad)
    RunFeedback.objects.create(run=plain, rating=1)
    evaluator = scored(low, 0.2).evaluator
    scored(high, 0.9, evaluator)
    guardrail_hit(guarded)
    tool_failed(failed)
    tool_failed(rejected, status="rejected")
    queue = ReviewQueue.objects.create(
        name="all", agent=agent, score_below=0.5, score_evaluator=evaluator, on_guardrail_hit=True, on_tool_error=True
    )
    assert review_queue_fill(queue_id=queue.pk) == 4
    assert _items(queue) == {
        bad.pk: "negative_feedback",
        low.pk: "low_score",
        guarded.pk: "guardrail",
        failed.pk: "tool_error",
    }
    assert all(item.state == "open" and item.assigned_to is None for item in ReviewItem.objects.filter(queue=queue))


def test_a_run_matching_two_filters_enters_once_with_the_first_reason():
    agent = make_agent()
    run = ended_run(agent)
    rated_bad(run)
    guardrail_hit(run)
    queue = ReviewQueue.objects.create(name="q", agent=agent, on_guardrail_hit=True)
    assert review_queue_fill(queue_id=queue.pk) == 1
    assert _items(queue) == {run.pk: "negative_feedback"}


def test_only_finished_production_runs_of_the_queue_s_scope():
    agent, other = make_agent(), make_agent()
    elsewhere = Workspace.objects.create(name="Elsewhere", slug="elsewhere")
    mine = ended_run(agent)
    evaluation = ended_run(agent, sandbox={"results": {}})
    running = ended_run(agent, status="running", stop_reason="")
    others = ended_run(other)
    for run in (mine, evaluation, running, others):
        rated_bad(run)
    for_agent = ReviewQueue.objects.create(name="agent", agent=agent)
    whole = ReviewQueue.objects.create(name="whole workspace")
    abroad = ReviewQueue.objects.create(name="abroad", workspace=elsewhere)
    review_queues_fill()
    assert set(_items(for_agent)) == {mine.pk}
    assert set(_items(whole)) == {mine.pk, others.pk}
    assert _items(abroad) == {}


def test_the_sample_is_the_rate_of_completed_runs_and_the_same_run_each_time():
    agent = make_agent()
    runs = [ended_run(agent) for _ in range(40)]
    ended_run(agent, status="failed", stop_reason="provider_error")
    everything = ReviewQueue.objects.create(name="all", agent=agent, sample_rate=1, **NONE_ON)
    half = ReviewQueue.objects.create(name="half", agent=agent, sample_rate=0.5, **NONE_ON)
    nothing = ReviewQueue.objects.create(name="none", agent=agent, **NONE_ON)
    review_queues_fill()
    assert set(_items(everything)) == {run.pk for run in runs}
    expected = {run.pk for run in runs if run.pk.int < 2**127}
    assert set(_items(half)) == expected and 0 < len(expected) < 40
    assert _items(nothing) == {}
    assert set(_items(everything).values()) == {"sample"}


def test_a_fill_adds_what_came_since_the_last_one():
    agent = make_agent()
    first = ended_run(agent)
    rated_bad(first)
    queue = ReviewQueue.objects.create(name="q", agent=agent)
    assert review_queue_fill(queue_id=queue.pk) == 1
    assert review_queue_fill(queue_id=queue.pk) == 0
    queue.refresh_from_db()
    assert queue.filled_until is not None
    # A rating given later, on a run that ended before the last fill, enters at the next one.
    later = ended_run(agent, minutes_ago=30)
    rated_bad(later)
    assert review_queue_fill(queue_id=queue.pk) == 1
    assert set(_items(queue)) == {first.pk, later.pk}


def test_the_first_fill_looks_back_a_week_and_a_disabled_queue_is_not_filled():
    agent = make_agent()
    old, recent = ended_run(agent, minutes_ago=60 * 24 * 9), ended_run(agent)
    for run in (old, recent):
        rated_bad(run)
    RunFeedback.objects.filter(run=old).update(updated_at=timezone.now() - timedelta(days=8))
    queue = ReviewQueue.objects.create(name="q", agent=agent)
    off = ReviewQueue.objects.create(name="off", agent=agent, enabled=False)
    review_queues_fill()
    assert set(_items(queue)) == {recent.pk}
    assert review_queue_fill(queue_id=off.pk) == 0 and _items(off) == {}


def test_a_fill_is_bounded_and_the_next_goes_on_from_where_it_stopped(monkeypatch):
    monkeypatch.setattr(filling, "FILL_MAX", 3)
    agent = make_agent()
    runs = [ended_run(agent) for _ in range(7)]
    for run in runs:
        rated_bad(run)
    queue = ReviewQueue.objects.create(name="q", agent=agent)
    assert [review_queue_fill(queue_id=queue.pk) for _ in range(4)] == [3, 3, 1, 0]
    assert set(_items(queue)) == {run.pk for run in runs}


def test_the_evaluator_filter_reads_only_that_evaluator_s_scores():
    agent = make_agent()
    a, b = ended_run(agent), ended_run(agent)
    strict = OnlineEvaluator.objects.create(agent=agent, name="strict", kind="regex", config={"pattern": "x"})
    lenient = OnlineEvaluator.objects.create(agent=agent, name="lenient", kind="regex", config={"pattern": "y"})
    scored(a, 0.1, strict)
    scored(b, 0.1, lenient)
    only_strict = ReviewQueue.objects.create(name="strict", agent=agent, score_below=0.5, score_evaluator=strict)
    any_low = ReviewQueue.objects.create(name="any", agent=agent, score_below=0.5)
    review_queues_fill()
    assert set(_items(only_strict)) == {a.pk}
    assert set(_items(any_low)) == {a.pk, b.pk}


def test_beat_fills_every_enabled_queue(settings):
    assert settings.CELERY_BEAT_SCHEDULE["fill-review-queues"]["task"] == review_queues_fill_task.name
    agent = make_agent()
    run = ended_run(agent)
    rated_bad(run)
    queue = ReviewQueue.objects.create(name="q", agent=agent)
    assert review_queues_fill_task.apply().get() == {queue.pk: 1}
    assert set(_items(queue)) == {run.pk}
