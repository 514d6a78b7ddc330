"""A command waiting on runs says that no worker is taking them, soon, instead of waiting out
its timeout (engine.worker_watch), and still waits when a worker is there."""

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from demo.seed import demo_seed
from engine import worker_watch
from engine.worker_watch import NoWorker, NoWorkerWatch


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _watch(answers):
    pings = []

    def ping():
        pings.append(clock.now)
        return answers

    clock = Clock()
    return NoWorkerWatch(ping=ping, clock=clock), clock, pings


def test_no_worker_is_said_once_runs_stayed_queued_for_the_threshold():
    watch, clock, pings = _watch([])
    watch.check(queued=6)
    clock.now = 14.9
    watch.check(queued=6)
    assert pings == []
    clock.now = 15.0
    with pytest.raises(NoWorker, match="No worker is taking the runs: 6 still queued after 15 s"):
        watch.check(queued=6)


def test_a_worker_that_answers_keeps_the_wait_going_and_is_asked_again_later():
    watch, clock, pings = _watch(["worker@host"])
    watch.check(queued=3)
    for now in (15.0, 16.0, 29.0, 30.0):
        clock.now = now
        watch.check(queued=3)
    assert pings == [15.0, 30.0]


def test_the_wait_restarts_when_no_run_is_queued():
    watch, clock, pings = _watch([])
    watch.check(queued=1)
    clock.now = 10.0
    watch.check(queued=0)
    clock.now = 20.0
    watch.check(queued=1)
    clock.now = 34.0
    watch.check(queued=1)
    assert pings == []


@pytest.mark.django_db
def test_agentry_chat_with_no_worker_says_so_instead_of_timing_out(fake_llm, monkeypatch):
    monkeypatch.setattr(worker_watch, "NO_WORKER_AFTER_SECONDS", 0.5)
    demo_seed(llm_base_url=fake_llm.api_base, stream=False)
    # Without the watch the command would wait out its timeout and fail saying so, not this.
    with pytest.raises(CommandError, match="No worker is taking the runs: 1 still queued") as error:
        call_command("agentry_chat", "你是谁？", timeout=120)
    assert "scripts/dev.sh" in str(error.value)


@pytest.mark.django_db
def test_agentry_eval_with_no_worker_says_so_instead_of_waiting_ten_minutes(fake_llm, monkeypatch):
    monkeypatch.setattr(worker_watch, "NO_WORKER_AFTER_SECONDS", 0.5)
    call_command("agentry_seed_demo", llm_base_url=fake_llm.api_base, no_stream=True)
    with pytest.raises(CommandError, match=r"eval run \d+: No worker is taking the runs: 6 still queued"):
        call_command("agentry_eval", "customer-service", suite="seed-000", version="draft", against="draft")
