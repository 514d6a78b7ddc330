"""Structured logs: one run can be followed through web and worker logs by its ids."""

import io
import json
import logging

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.urls import reverse
from django.utils.module_loading import import_string

from platform_site.logs import ContextFilter, HumanFormatter, log_context
from tests.factories import make_agent
from tests.ledger import ledger_run
from tests.runs import advance, start_run


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


def _json_formatter():
    config = dict(settings.LOGGING["formatters"]["json"])
    return import_string(config.pop("()"))(**config)


def test_json_lines_carry_the_bound_ids():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(_json_formatter())
    handler.addFilter(ContextFilter())
    logger = logging.getLogger("agentry.test.json")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        with log_context(run_id="r-1", request_id="q-9"):
            with log_context(llm_call_id=7):
                logger.warning("model call %s failed", 7)
            logger.info("after the call")
        logger.info("outside")
    finally:
        logger.removeHandler(handler)
    first, second, third = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["message"] == "model call 7 failed" and first["level"] == "WARNING"
    assert first["logger"] == "agentry.test.json" and "time" in first
    assert (first["run_id"], first["llm_call_id"], first["request_id"]) == ("r-1", "7", "q-9")
    assert second["run_id"] == "r-1" and "llm_call_id" not in second
    assert "run_id" not in third


def test_human_lines_append_the_ids():
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "hello", None, None)
    with log_context(run_id="abc", tool_invocation_id=5):
        ContextFilter().filter(record)
    assert HumanFormatter().format(record).endswith("hello [run_id=abc tool_invocation_id=5]")


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
