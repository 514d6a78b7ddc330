"""Structured logs: one run can be followed through web and worker logs by its ids."""

import logging

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.urls import reverse

from platform_site.logs import ContextFilter
from tests.support.factories import make_agent
from tests.support.ledger import ledger_run
from tests.support.runs import advance, start_run


class Records(logging.Handler):
    """Collects records as the console handler sees them (after the context filter)."""

    def __init__(self):
        super().__init__(level=logging.DEBUG)
        self.addFilter(ContextFilter())
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture
def records():
    handler = Records()
    root = logging.getLogger()
    previous = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    yield handler.records
    root.removeHandler(handler)
    root.setLevel(previous)


@pytest.mark.django_db
def test_engine_binds_run_model_call_and_tool_invocation_ids(scripted_agent, records):
    agent = scripted_agent(
        {
            "scenarios": [
                {
                    "match": ".",
                    "steps": [
                        {"tool_calls": [{"name": "test-echo", "arguments": {"text": "hi"}}]},
                        {"content": "done"},
                    ],
                }
            ]
        },
        tools=["test-echo"],
    )
    run = advance(start_run(agent))
    mine = [r for r in records if getattr(r, "run_id", None) == str(run.pk)]

    calls = [r for r in mine if r.name == "engine.model_call"]
    tools = [r for r in mine if r.name == "engine.tool_step"]
    assert len(calls) == 2 and len({r.llm_call_id for r in calls}) == 2
    [tool] = tools
    assert tool.tool_invocation_id == str(run.tool_invocations.get().pk)
    assert tool.llm_call_id == calls[0].llm_call_id  # the call that asked for the tool
    assert any("claimed by" in r.getMessage() for r in mine)
    # Nothing leaks past the run: the bound ids end with it.
    probe = logging.LogRecord("x", logging.INFO, __file__, 1, "after", None, None)
    ContextFilter().filter(probe)
    assert not hasattr(probe, "run_id")


@pytest.mark.django_db
def test_web_requests_bind_a_request_id_and_the_run_in_the_url(client, records, no_enqueue):
    operator = get_user_model().objects.create_user("oncall", password="pw", is_staff=True)
    operator.user_permissions.add(Permission.objects.get(codename="operate_run"))
    client.force_login(operator)
    run = ledger_run(make_agent(), status="queued", stop_reason="")
    response = client.post(reverse("monitoring:run-action", args=[run.pk, "requeue"]), HTTP_X_REQUEST_ID="req-123")
    assert response["X-Request-ID"] == "req-123"
    [line] = [r for r in records if r.name == "engine.operations"]
    assert line.run_id == str(run.pk) and line.request_id == "req-123"
    assert "requeued by oncall" in line.getMessage()
