"""The suite's worker is shared only when nothing of a test can reach the next one (tests/conftest.py):
it counts as idle only once its runs are over, and a test that asks for no worker finds none."""

from types import SimpleNamespace

import pytest

from conversations.models import Run
from conversations.services import conversation_create
from engine.admission import message_post
from tests.conftest import _worker_idle, pytest_runtest_setup
from tests.support.factories import ModelConfigFactory, make_agent
from tests.support.waits import wait_for

pytestmark = pytest.mark.e2e


def test_the_worker_is_idle_only_once_its_run_is_over(worker, fake_llm):
    with fake_llm.held() as held:
        name = fake_llm.script("suite-idle", {"fallback": {"content": "done", "hold": held.label}})
        agent = make_agent(model_config=ModelConfigFactory(base_url=fake_llm.api_base, model=name))
        run = message_post(conversation=conversation_create(agent=agent), content="hi")
        held.wait_arrived()
        # Its task is delivered and not acknowledged, its run leased: the worker is busy.
        assert not _worker_idle(timeout=0.5)
    wait_for(lambda: Run.objects.filter(pk=run.pk, status="completed").exists(), message="the run to complete")
    assert _worker_idle()
    assert worker.alive


def test_a_test_that_asks_for_no_worker_finds_none_alive(worker):
    starts = worker.starts
    pytest_runtest_setup(SimpleNamespace(fixturenames=["db"]))
    assert not worker.alive and worker.starts == starts
