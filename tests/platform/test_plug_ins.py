"""Features that apps above tools and agents plug into them are registered at start-up by those
apps' AppConfig.ready(): a process that loads evals cannot publish past the release gate, and
one that loads knowledge can run a knowledge base's search tool, with nothing to set."""

import types

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

import knowledge.executor
from agents.releases import ReleaseRefused, release_check_register, release_checks, version_publish
from evals.gate import release_gate_check
from evals.models import EvalSuite, ReleaseGate
from tests.support.factories import make_agent
from tools.executors import executor_of, executor_register, http


def test_the_plug_ins_are_no_settings():
    assert not hasattr(settings, "AGENTRY_RELEASE_CHECKS")
    assert not hasattr(settings, "AGENTRY_TOOL_EXECUTORS")


@pytest.mark.django_db
def test_a_publish_the_release_gate_refuses_is_refused(admin_user):
    assert release_gate_check in release_checks()
    agent = make_agent()
    ReleaseGate.objects.create(agent=agent, suite=EvalSuite.objects.create(name="gate-wiring"))

    with pytest.raises(ReleaseRefused, match="needs a finished run of eval suite gate-wiring"):
        version_publish(agent=agent, user=admin_user, note="first")
    agent.refresh_from_db()
    assert agent.published_version_id is None and not agent.releases.exists()


def test_registering_a_release_check_again_asks_it_once():
    before = release_checks()
    release_check_register(release_gate_check)
    assert release_checks() == before and before.count(release_gate_check) == 1


def test_the_knowledge_kind_runs_on_the_knowledge_executor():
    assert executor_of("knowledge") is knowledge.executor
    assert executor_of("no-such-kind") is None


def test_registering_an_executor_again_is_a_no_op_and_another_for_the_kind_an_error():
    executor_register(kind="knowledge", executor=knowledge.executor)
    assert executor_of("knowledge") is knowledge.executor

    with pytest.raises(ImproperlyConfigured, match="'knowledge' has an executor already"):
        executor_register(kind="knowledge", executor=http)
    with pytest.raises(ImproperlyConfigured, match="'http' has an executor already"):
        executor_register(kind="http", executor=knowledge.executor)
    with pytest.raises(ImproperlyConfigured, match="needs load"):
        executor_register(kind="half", executor=types.SimpleNamespace(load=lambda spec, live=None: None))
    assert executor_of("knowledge") is knowledge.executor and executor_of("http") is http
    assert executor_of("half") is None
