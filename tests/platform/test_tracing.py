"""OpenTelemetry traces of a run, exported over OTLP/HTTP to a receiver this module starts (a small
HTTP server decoding the OTLP protobuf): the span tree of a run that called a tool and waited
for an approval, from the API request through Celery into a real worker."""

import gzip
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import Permission, User
from django.test import AsyncClient
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from conversations.models import Approval, Run
from engine.approvals import approval_decide
from platform_site.telemetry import tracer, tracing
from tests.support.api import client_for
from tests.support.factories import make_user, token_for
from tests.support.llm import agent_on
from tests.support.runs import ask
from tests.support.waits import wait_for
from tests.support.workers import WorkerProcess

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"

THREE_STEPS = {
    "scenarios": [
        {
            "match": ".",
            "steps": [
                {"tool_calls": [{"name": "test-echo", "arguments": {"text": "first"}}]},
                {"tool_calls": [{"name": "test-counter", "arguments": {"label": "traced"}}]},
                {"content": "Done: {last_tool_result}"},
            ],
        }
    ]
}


class Receiver:
    """An OTLP/HTTP traces endpoint: every span posted to it, decoded, with its service name."""

    def __init__(self):
        self.spans: list[dict] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver.add(request)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def add(self, request) -> None:
        for resource_spans in request.resource_spans:
            resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(
                        {
                            "service": resource.get("service.name"),
                            "name": span.name,
                            "trace_id": span.trace_id.hex(),
                            "span_id": span.span_id.hex(),
                            "parent_id": span.parent_span_id.hex(),
                            "start": span.start_time_unix_nano,
                            "end": span.end_time_unix_nano,
                            "attributes": {a.key: _value(a.value) for a in span.attributes},
                            "events": [(e.name, {a.key: _value(a.value) for a in e.attributes}) for e in span.events],
                            "error": span.status.code == span.status.STATUS_CODE_ERROR,
                        }
                    )

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _value(value):
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


@pytest.fixture
def receiver():
    receiver = Receiver()
    yield receiver
    tracing.stop()
    receiver.stop()


def test_tracing_is_off_without_an_otlp_endpoint(fake_llm, no_enqueue, db):
    """No OTEL_* variable in the suite's environment: no tracer, and runs carry no trace."""
    assert tracer() is None
    run = ask(agent_on(fake_llm, {"scenarios": [{"match": ".", "steps": [{"content": "hi"}]}]}), "hello")
    assert run.status == "completed"
    assert (run.trace_id, run.trace_span_id, run.trace_parent_span_id) == ("", "", "")


def test_an_in_process_run_is_one_trace_of_its_own(fake_llm, no_enqueue, receiver, transactional_db, client):
    """Created with tracing on but no caller: the run's span is the trace's root, and it carries
    the model call as its child. The run's page shows its trace id."""
    tracing.start(endpoint=f"{receiver.url}/v1/traces")
    run = ask(agent_on(fake_llm, {"scenarios": [{"match": ".", "steps": [{"content": "hi"}]}]}), "hello")
    tracing.flush()
    assert run.status == "completed" and len(run.trace_id) == 32 and run.trace_parent_span_id == ""
    spans = {s["name"].split(" ")[0]: s for s in receiver.spans if s["trace_id"] == run.trace_id}
    assert set(spans) == {"invoke_agent", "chat"}
    root, chat = spans["invoke_agent"], spans["chat"]
    assert root["parent_id"] == "" and root["span_id"] == run.trace_span_id
    assert chat["parent_id"] == root["span_id"] and root["start"] <= chat["start"] <= chat["end"] <= root["end"]

    client.force_login(User.objects.create_superuser("operator", password="pw"))
    page = client.get(f"/monitor/runs/{run.pk}/")
    assert page.status_code == 200
    assert f'<code id="trace-id">{run.trace_id}</code>' in page.content.decode()


def test_a_failed_run_and_its_refused_model_call_are_errors(fake_llm, no_enqueue, receiver, transactional_db):
    tracing.start(endpoint=f"{receiver.url}/v1/traces")
    run = ask(agent_on(fake_llm, {"fallback": {"content": "never", "fault": {"status": 401}}}), "hello")
    tracing.flush()
    assert run.status == "failed"
    spans = {s["name"].split(" ")[0]: s for s in receiver.spans if s["trace_id"] == run.trace_id}
    assert spans["invoke_agent"]["error"] and spans["invoke_agent"]["attributes"]["error.type"] == "provider_error"
    assert spans["chat"]["error"] and spans["chat"]["attributes"]["error.type"] == "401"
    assert spans["chat"]["parent_id"] == spans["invoke_agent"]["span_id"]


def test_an_async_request_hands_its_traceparent_to_the_run(fake_llm, no_enqueue, receiver, transactional_db):
    """Under ASGI the middleware chain runs async: the caller's span still reaches admission."""
    tracing.start(endpoint=f"{receiver.url}/v1/traces")
    agent = agent_on(fake_llm, {"scenarios": [{"match": ".", "steps": [{"content": "hi"}]}]})
    api = AsyncClient()
    auth = {"authorization": f"Bearer {token_for(make_user())}"}
    created = async_to_sync(api.post)(
        "/api/v1/conversations/", {"agent": agent.slug}, content_type="application/json", headers=auth
    )
    assert created.status_code == 201, created.json()
    conversation = created.json()
    response = async_to_sync(api.post)(
        f"/api/v1/conversations/{conversation['id']}/messages/",
        {"content": "hello"},
        content_type="application/json",
        headers={**auth, "traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"},
    )
    assert response.status_code in (200, 201, 202), response.json()
    run = Run.objects.get(conversation_id=conversation["id"])
    assert (run.trace_id, run.trace_parent_span_id) == (CALLER_TRACE, CALLER_SPAN)
    assert len(run.trace_span_id) == 16 and run.trace_span_id != CALLER_SPAN


def test_a_malformed_traceparent_starts_a_trace_of_the_runs_own(fake_llm, no_enqueue, receiver, transactional_db):
    tracing.start(endpoint=f"{receiver.url}/v1/traces")
    agent = agent_on(fake_llm, {"scenarios": [{"match": ".", "steps": [{"content": "hi"}]}]})
    api = client_for(make_user())
    conversation = api.post("/api/v1/conversations/", {"agent": agent.slug}, format="json").json()
    response = api.post(
        f"/api/v1/conversations/{conversation['id']}/messages/",
        {"content": "hello"},
        format="json",
        HTTP_TRACEPARENT="00-not-a-trace-01",
    )
    assert response.status_code in (200, 201, 202), response.json()
    run = Run.objects.get(conversation_id=conversation["id"])
    assert len(run.trace_id) == 32 and run.trace_id != CALLER_TRACE and run.trace_parent_span_id == ""


@pytest.mark.e2e
def test_span_tree_of_a_run_with_a_tool_call_and_an_approval(fake_llm, worker_process, receiver, transactional_db):
    # The suite's worker runs only in tests that ask for it (`worker`): this run is taken by a
    # worker of its own, which exports its spans.
    traced = WorkerProcess(
        database_url=worker_process.database_url,
        name="traced-worker",
        env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
            "OTEL_SERVICE_NAME": "agentry-worker",
            "OTEL_BSP_SCHEDULE_DELAY": "200",
        },
    )
    traced.start()
    try:
        tracing.start(endpoint=f"{receiver.url}/v1/traces")
        agent = agent_on(fake_llm, THREE_STEPS, tools=["test-echo", "test-counter"])
        user = make_user(staff=True)
        user.user_permissions.add(Permission.objects.get(codename="decide_approval"))
        api = client_for(user)
        conversation = api.post("/api/v1/conversations/", {"agent": agent.slug}, format="json").json()
        response = api.post(
            f"/api/v1/conversations/{conversation['id']}/messages/",
            {"content": "count it"},
            format="json",
            HTTP_TRACEPARENT=f"00-{CALLER_TRACE}-{CALLER_SPAN}-01",
        )
        assert response.status_code in (200, 201, 202), response.json()
        run = Run.objects.get(conversation_id=conversation["id"])
        assert (run.trace_id, run.trace_parent_span_id) == (CALLER_TRACE, CALLER_SPAN)

        wait_for(lambda: Approval.objects.filter(run=run, status="pending").exists(), message="the approval")
        approval = Approval.objects.get(run=run)
        approval_decide(approval_id=approval.pk, user=user, decision="approve", channel="api")
        wait_for(lambda: Run.objects.get(pk=run.pk).is_terminal, message="the run to end")
        run.refresh_from_db()
        assert run.status == "completed", run.error
        wait_for(lambda: any(s["name"].startswith("invoke_agent") for s in receiver.spans), message="the run's span")
    finally:
        traced.stop()

    spans = [s for s in receiver.spans if s["trace_id"] == CALLER_TRACE]
    [root] = [s for s in spans if s["attributes"].get("gen_ai.operation.name") == "invoke_agent"]
    chats = sorted((s for s in spans if s["name"].startswith("chat ")), key=lambda s: s["start"])
    tools = sorted((s for s in spans if s["name"].startswith("execute_tool ")), key=lambda s: s["start"])

    # The run's span continues the caller's trace, and everything the run did hangs under it.
    assert root["parent_id"] == CALLER_SPAN and root["span_id"] == run.trace_span_id
    assert root["name"] == f"invoke_agent {agent.name}" and root["service"] == "agentry-worker"
    assert {s["parent_id"] for s in chats + tools} == {root["span_id"]}
    assert len(spans) == 1 + 3 + 2
    assert root["attributes"]["gen_ai.agent.name"] == agent.name
    assert root["attributes"]["gen_ai.conversation.id"] == conversation["id"]
    assert root["attributes"]["gen_ai.usage.input_tokens"] == run.prompt_tokens > 0
    assert root["attributes"]["agentry.run.status"] == "completed" and not root["error"]

    # Three model calls, each with its model, tokens and finish reason.
    finish_reasons = [c["attributes"]["gen_ai.response.finish_reasons"] for c in chats]
    assert finish_reasons == [["tool_calls"], ["tool_calls"], ["stop"]]
    for chat in chats:
        assert chat["attributes"]["gen_ai.operation.name"] == "chat"
        assert chat["attributes"]["gen_ai.request.model"] == agent.model_config.model
        assert chat["attributes"]["gen_ai.usage.input_tokens"] > 0
        assert chat["attributes"]["gen_ai.usage.output_tokens"] > 0
        assert root["start"] <= chat["start"] <= chat["end"] <= root["end"]
    assert sum(c["attributes"]["gen_ai.usage.input_tokens"] for c in chats) == run.prompt_tokens

    # The two tool calls, in order; the approved one ran after the decision.
    assert [t["attributes"]["gen_ai.tool.name"] for t in tools] == ["test-echo", "test-counter"]
    assert chats[0]["end"] <= tools[0]["start"] and chats[1]["end"] <= tools[1]["start"] <= chats[2]["start"]

    # The approval: requested, then decided, as events of the run's span.
    approval.refresh_from_db()
    events = [(name, a.get("gen_ai.tool.name"), a.get("agentry.approval.status")) for name, a in root["events"]]
    assert events == [
        ("agentry.approval.requested", "test-counter", None),
        ("agentry.approval.decided", "test-counter", "approved"),
    ]
    decided_ns = int(approval.decided_at.timestamp() * 1e9)
    assert tools[1]["start"] >= decided_ns - 1_000_000
