"""Bad input to the A2A endpoint, on a live server: each is the protocol's error (a JSON-RPC
error object) or an HTTP 4xx in the API's error shape, never a 500, and starts nothing."""

import json
import uuid

import httpx
import pytest

from conversations.models import Run
from tests.support.a2a import a2a_expose  # noqa: F401 - fixture
from tests.support.factories import make_agent

pytestmark = pytest.mark.e2e

V1 = {"A2A-Version": "1.0"}


def _send(parts, **message) -> dict:
    return {"message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": parts, **message}}


# name: (method, params, the JSON-RPC error code)
CALLS = {
    "unknown method": ("NoSuchMethod", {}, -32601),
    "params not an object": ("GetTask", "x", -32600),
    "unknown task": ("GetTask", {"id": str(uuid.uuid4())}, -32001),
    "malformed task id": ("GetTask", {"id": "../../etc"}, -32001),
    "negative history": ("GetTask", {"id": str(uuid.uuid4()), "historyLength": -1}, -32602),
    "cancel unknown task": ("CancelTask", {"id": "nope"}, -32001),
    "subscribe unknown task": ("SubscribeToTask", {"id": "nope"}, -32001),
    "no parts": ("SendMessage", _send([]), -32602),
    "empty text": ("SendMessage", _send([{"text": "   "}]), -32602),
    "agent role": (
        "SendMessage",
        {"message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "hi"}]}},
        -32602,
    ),
    "file part": ("SendMessage", _send([{"url": "https://example.com/a.png", "mediaType": "image/png"}]), -32005),
    "text too long": ("SendMessage", _send([{"text": "x" * 40000}]), -32602),
    "unknown context": ("SendMessage", _send([{"text": "hi"}], contextId=str(uuid.uuid4())), -32602),
    "unknown task to continue": ("SendMessage", _send([{"text": "hi"}], taskId=str(uuid.uuid4())), -32001),
    "bad end user": ("SendMessage", _send([{"text": "hi"}], metadata={"end_user": 5}), -32602),
    "push to ftp": (
        "SendMessage",
        {**_send([{"text": "hi"}]), "configuration": {"taskPushNotificationConfig": {"url": "ftp://x/y"}}},
        -32602,
    ),
    "push config of unknown task": (
        "CreateTaskPushNotificationConfig",
        {"taskId": "nope", "url": "https://x/y"},
        -32001,
    ),
    "list tasks": ("ListTasks", {}, -32004),
    "extended card": ("GetExtendedAgentCard", {}, -32007),
}
BODIES = {
    "not JSON": b"{nope",
    "too deep": b"[" * 100 + b"]" * 100,
    "lone surrogate": b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "\\ud800"}}',
    "NUL": b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"x": "a\\u0000"}}',
    "batch": b'[{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}]',
    "no method": b'{"jsonrpc": "2.0", "id": 1}',
    "old jsonrpc": b'{"jsonrpc": "1.0", "id": 1, "method": "GetTask"}',
    "method not a string": b'{"jsonrpc": "2.0", "id": 1, "method": ["SendMessage"]}',
    "not UTF-8": b'{"jsonrpc": "2.0", "id": 1, "method": "\xff"}',
    "null": b"null",
    "huge number": b'{"jsonrpc": "2.0", "id": 1e999, "method": "GetTask"}',
}


@pytest.fixture
def exposed(a2a_expose):
    return a2a_expose(make_agent(slug="a2a-bad-input"))


def _error(response: httpx.Response) -> dict:
    assert response.status_code == 200, (response.status_code, response.text[:300])
    body = response.json()
    assert "error" in body and "result" not in body, body
    return body["error"]


@pytest.mark.parametrize("name", CALLS)
def test_a_bad_call_is_the_protocols_error(exposed, name):
    method, params, code = CALLS[name]
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
    response = httpx.post(exposed.endpoint, json=body, headers={**exposed.headers, **V1}, timeout=30)
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        # A stream's error comes as its one event.
        error = json.loads(response.text.split("data:", 1)[1].strip().split("\n")[0])["error"]
    else:
        error = _error(response)
    assert error["code"] == code, (name, error)
    assert not Run.objects.exists()


@pytest.mark.parametrize("name", BODIES)
def test_a_bad_body_is_the_protocols_error(exposed, name):
    response = httpx.post(
        exposed.endpoint,
        content=BODIES[name],
        headers={**exposed.headers, **V1, "Content-Type": "application/json"},
        timeout=30,
    )
    assert _error(response)["code"] in (-32700, -32600, -32602, -32001), name


def test_the_protocol_version_is_checked_and_0_3_names_are_taken(exposed):
    task = str(uuid.uuid4())
    get = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task}}
    future = httpx.post(exposed.endpoint, json=get, headers={**exposed.headers, "A2A-Version": "9.0"})
    assert _error(future)["code"] == -32009
    old = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": task}}
    assert _error(httpx.post(exposed.endpoint, json=old, headers=exposed.headers))["code"] == -32001


def test_http_refusals_are_4xx_in_the_error_shape(exposed):
    checks = [
        ("GET", exposed.endpoint, exposed.headers, 405),
        ("POST", exposed.card_url, exposed.headers, 405),
        ("POST", exposed.endpoint, {}, 401),
        ("POST", exposed.endpoint, {"Authorization": "Bearer a b"}, 401),
        ("POST", exposed.endpoint.replace("a2a-bad-input", "no%00such"), exposed.headers, 404),
        ("GET", exposed.card_url.replace("a2a-bad-input", "x" * 300), exposed.headers, 404),
    ]
    for method, url, headers, status in checks:
        response = httpx.request(method, url, headers=headers, content=b"{}")
        assert response.status_code == status, (method, url, response.status_code, response.text[:200])
        assert set(response.json()) == {"message", "extra"}
