"""Claiming, labelling and agreement: "review next" gives each reviewer a run nobody else holds
(also under real concurrency, threads with their own PostgreSQL connections), a lapsed claim goes
back to the queue, a reviewer never gets a run they labelled, and a run is done after
reviews_per_run different reviewers."""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from reviews.models import ReviewItem, ReviewLabel, ReviewQueue
from reviews.selectors import queue_agreement
from reviews.services import ReviewRefused, review_label, review_next, review_release
from tests.reviews.support import ended_run
from tests.support.concurrency import concurrently
from tests.support.factories import make_agent, make_user


def _queue(items: int, **fields) -> tuple[ReviewQueue, list[ReviewItem]]:
    agent = make_agent()
    queue = ReviewQueue.objects.create(name="q", agent=agent, **fields)
    made = [
        ReviewItem.objects.create(queue=queue, run_id=ended_run(agent).pk, reason=ReviewItem.Reason.SAMPLE)
        for _ in range(items)
    ]
    return queue, made


@pytest.mark.django_db
def test_next_assigns_the_oldest_open_item_and_gives_it_back_to_its_holder():
    queue, items = _queue(3)
    alice, bob = make_user(), make_user()
    first = review_next(queue=queue, user=alice)
    assert first.pk == items[0].pk and (first.state, first.assigned_to) == ("assigned", alice)
    # Asking again while holding it: the same run, not a second one.
    assert review_next(queue=queue, user=alice).pk == first.pk
    assert review_next(queue=queue, user=bob).pk == items[1].pk


@pytest.mark.django_db
def test_a_lapsed_claim_returns_to_the_queue(settings):
    settings.AGENTRY_REVIEW_CLAIM_MINUTES = 30
    queue, [item] = _queue(1)
    alice, bob = make_user(), make_user()
    assert review_next(queue=queue, user=alice).pk == item.pk
    assert review_next(queue=queue, user=bob) is None
    ReviewItem.objects.filter(pk=item.pk).update(assigned_at=timezone.now() - timedelta(minutes=31))
    taken = review_next(queue=queue, user=bob)
    assert taken.pk == item.pk and taken.assigned_to == bob
    # Alice's lapsed claim is no longer hers to label.
    with pytest.raises(ReviewRefused):
        review_label(item=item, user=alice, verdict="good", labels={})
    review_label(item=item, user=bob, verdict="bad", labels={}, corrected_answer="  Paris.  ")
    item.refresh_from_db()
    assert item.state == "done" and ReviewLabel.objects.get(item=item).corrected_answer == "Paris."


@pytest.mark.django_db
def test_a_holder_past_the_expiry_may_still_label_while_nobody_took_it():
    queue, [item] = _queue(1)
    alice = make_user()
    review_next(queue=queue, user=alice)
    ReviewItem.objects.filter(pk=item.pk).update(assigned_at=timezone.now() - timedelta(days=1))
    review_label(item=item, user=alice, verdict="good", labels={})
    item.refresh_from_db()
    assert item.state == "done"


@pytest.mark.django_db
def test_two_reviews_per_run_by_different_reviewers_and_agreement():
    queue, items = _queue(3, reviews_per_run=2)
    alice, bob, carol = make_user(), make_user(), make_user()
    verdicts = {alice.pk: ["good", "bad", "good"], bob.pk: ["good", "good", "good"]}
    for reviewer in (alice, bob):
        for number in range(3):
            item = review_next(queue=queue, user=reviewer)
            assert item.pk == items[number].pk
            review_label(item=item, user=reviewer, verdict=verdicts[reviewer.pk][number], labels={})
        # Every run has been labelled by this reviewer: nothing left for them.
        assert review_next(queue=queue, user=reviewer) is None
    assert set(ReviewItem.objects.filter(queue=queue).values_list("state", flat=True)) == {"done"}
    assert review_next(queue=queue, user=carol) is None
    agreement = queue_agreement(queue=queue)
    assert (agreement.pairs, agreement.agreed) == (3, 2)
    assert agreement.share == pytest.approx(2 / 3)
    # Alice good 2/3, Bob good 3/3: chance 2/3; kappa (2/3 - 2/3) / (1 - 2/3) = 0.
    assert agreement.kappa == pytest.approx(0.0)


@pytest.mark.django_db
def test_after_the_first_review_the_run_is_open_for_a_second_reviewer_only():
    queue, [item] = _queue(1, reviews_per_run=2)
    alice, bob = make_user(), make_user()
    review_label(item=review_next(queue=queue, user=alice), user=alice, verdict="bad", labels={})
    item.refresh_from_db()
    assert (item.state, item.assigned_to) == ("open", None)
    assert review_next(queue=queue, user=alice) is None
    assert review_next(queue=queue, user=bob).pk == item.pk


@pytest.mark.django_db
def test_labels_must_be_the_rubric_s_and_a_skip_gives_the_run_back():
    rubric = [{"name": "tone", "choices": ["fine", "rude"]}]
    queue, [item] = _queue(1, rubric=rubric)
    alice, bob = make_user(), make_user()
    review_next(queue=queue, user=alice)
    with pytest.raises(ValidationError):
        review_label(item=item, user=alice, verdict="bad", labels={"tone": "angry"})
    with pytest.raises(ValidationError):
        review_label(item=item, user=alice, verdict="bad", labels={"speed": "slow"})
    with pytest.raises(ValidationError):
        review_label(item=item, user=alice, verdict="meh", labels={})
    review_release(item=item, user=alice)
    assert review_next(queue=queue, user=bob).pk == item.pk
    label = review_label(item=item, user=bob, verdict="bad", labels={"tone": "rude"})
    assert label.labels == {"tone": "rude"}


@pytest.mark.django_db
def test_the_rubric_and_scores_are_checked_on_the_queue():
    agent = make_agent()
    for rubric in (
        [{"name": "tone"}],
        [{"name": "t", "choices": ["one"]}],
        {"a": 1},
        [{"name": "", "choices": ["a", "b"]}],
    ):
        with pytest.raises(ValidationError) as raised:
            ReviewQueue(name="bad", agent=agent, rubric=rubric).full_clean()
        assert "rubric" in raised.value.message_dict
    with pytest.raises(ValidationError):
        ReviewQueue(name="bad", agent=agent, reviews_per_run=3).full_clean()
    ReviewQueue(name="good", agent=agent, rubric=[{"name": "tone", "choices": ["fine", "rude"]}]).full_clean()


REVIEWERS = 6


@pytest.mark.django_db(transaction=True)
def test_reviewers_asking_at_once_never_hold_the_same_run():
    queue, items = _queue(3)
    users = [make_user() for _ in range(REVIEWERS)]
    got = concurrently([lambda user=user: review_next(queue=queue, user=user) for user in users])
    assert not [r for r in got if isinstance(r, Exception)], got
    taken = [r.pk for r in got if r is not None]
    assert sorted(taken) == sorted(item.pk for item in items) and got.count(None) == REVIEWERS - 3
    holders = dict(ReviewItem.objects.filter(queue=queue).values_list("pk", "assigned_to"))
    assert {holders[r.pk] for r in got if r is not None} == {r.assigned_to_id for r in got if r is not None}


@pytest.mark.django_db(transaction=True)
def test_reviewers_working_a_queue_together_review_each_run_exactly_as_often_as_asked():
    queue, items = _queue(24, reviews_per_run=2)
    users = [make_user() for _ in range(REVIEWERS)]

    def work(user) -> list:
        claimed = []
        while (item := review_next(queue=queue, user=user)) is not None:
            claimed.append(item.pk)
            review_label(item=item, user=user, verdict="good", labels={})
        return claimed

    results = concurrently([lambda user=user: work(user) for user in users])
    assert not [r for r in results if isinstance(r, Exception)], results
    # Each run was claimed twice in all, by two different reviewers; no label was refused.
    claims = [pk for claimed in results for pk in claimed]
    assert sorted(claims) == sorted([item.pk for item in items] * 2)
    assert all(len(set(claimed)) == len(claimed) for claimed in results)
    pairs = ReviewLabel.objects.filter(item__queue=queue).values_list("item_id", "reviewer_id")
    assert len(pairs) == 48 and len(set(pairs)) == 48
    assert set(ReviewItem.objects.filter(queue=queue).values_list("state", flat=True)) == {"done"}
