"""An agent over A2A, through a live uvicorn and the real worker, driven by a2a-sdk's own client:
its card, a message sent and streamed, a task read and cancelled, a run waiting for approval as
an input-required task that completes once an approver decides in the queue (followed by
resubscribing), push notifications signed like webhooks, and the boundaries (a token of another
workspace sees nothing; bad input is the protocol's error, never a 500)."""

import asyncio
import hashlib
import hmac
import json
import uuid

import httpx
import pytest
from a2a.helpers.proto_helpers import new_text_message
from a2a.types import (
    CancelTaskRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import A2AError, TaskNotFoundError
from django.contrib.auth.models import Group
from google.protobuf import json_format

from a2a_server.models import PushConfig
from conversations.models import Approval, LLMCall, Run, RunTrigger
from conversations.tokens import api_token_create
from engine.approvals import approval_decide
from tests.support.a2a import a2a_client, a2a_expose  # noqa: F401 - fixture
from tests.support.api_server import WebhookReceiver
from tests.support.factories import ModelConfigFactory, make_agent, make_user
from tests.support.waits import wait_for
from workspaces.models import Membership, Workspace

pytestmark = pytest.mark.e2e


def _ask(text: str, **fields) -> SendMessageRequest:
    message = new_text_message(text, role=Role.ROLE_USER)
    message.message_id = uuid.uuid4().hex
    for name, value in fields.items():
        setattr(message, name, value)
    return SendMessageRequest(message=message)


async def _events(client, request) -> list:
    return [event async for event in client.send_message(request)]


def _answer(task) -> str:
    return task.artifacts[0].parts[0].text


@pytest.fixture
def talker(fake_llm):
    name = fake_llm.script(f"a2a-{uuid.uuid4().hex[:8]}", {"fallback": {"content": "Hello from Agentry."}})
    return make_agent(model_config=ModelConfigFactory(base_url=fake_llm.api_base, model=name), slug="a2a-talker")


@pytest.fixture
def careful(fake_llm):
    """An agent whose model calls test-counter (approval always) once, then answers."""
    script = {
        "scenarios": [
            {
                "match": ".",
                "steps": [
                    {"tool_calls": [{"name": "test-counter", "arguments": {"label": "a2a"}}]},
                    {"content": "Counted: {last_tool_result}"},
                ],
            }
        ]
    }
    name = fake_llm.script(f"a2a-careful-{uuid.uuid4().hex[:8]}", script)
    model = ModelConfigFactory(base_url=fake_llm.api_base, model=name, max_retries=0)
    return make_agent(
        tools=["test-counter"], approval={"test-counter": "always"}, model_config=model, slug="a2a-careful"
    )


@pytest.fixture
def approver(db):
    user = make_user()
    user.groups.add(Group.objects.get(name="Approvers"))
    return user


def _approve(run_id, approver) -> None:
    approval = wait_for(
        lambda: Approval.objects.filter(run_id=run_id, status="pending").first(), message="a pending approval"
    )
    approval_decide(approval_id=approval.pk, user=approver, decision="approve", channel=Approval.Channel.PAGE)


def test_the_card_names_the_agent_its_endpoint_and_its_token(worker, a2a_expose, talker):
    exposed = a2a_expose(talker)
    card = httpx.get(exposed.card_url, headers=exposed.headers).json()
    assert card["name"] == talker.name
    assert card["capabilities"] == {"streaming": True, "pushNotifications": True}
    assert card["supportedInterfaces"][0] == {
        "url": exposed.endpoint,
        "protocolBinding": "JSONRPC",
        "protocolVersion": "1.0",
    }
    assert card["securitySchemes"]["bearerAuth"]["httpAuthSecurityScheme"]["scheme"] == "Bearer"
    assert card["skills"][0]["id"] == talker.slug
    assert httpx.get(exposed.card_url).status_code == 401
    assert httpx.get(exposed.card_url, headers={"Authorization": "Bearer nope"}).status_code == 401


def test_send_stream_and_get_run_through_the_worker(worker, a2a_expose, talker):
    exposed = a2a_expose(talker)

    async def talk():
        async with a2a_client(exposed, streaming=False) as client:
            [sent] = await _events(client, _ask("hi"))
            again = await client.get_task(GetTaskRequest(id=sent.task.id, history_length=1))
        async with a2a_client(exposed) as client:
            streamed = await _events(client, _ask("next turn", context_id=sent.task.context_id))
        return sent.task, again, streamed

    sent, again, streamed = asyncio.run(talk())
    assert sent.status.state == TaskState.TASK_STATE_COMPLETED and _answer(sent) == "Hello from Agentry."
    assert [m.role for m in sent.history] == [Role.ROLE_USER, Role.ROLE_AGENT]
    assert again.id == sent.id and len(again.history) == 1
    run = Run.objects.get(pk=sent.id)
    assert run.trigger == RunTrigger.A2A and str(run.conversation_id) == sent.context_id
    assert LLMCall.objects.filter(run=run).count() == 1
    usage = sent.metadata["agentry"]["usage"]
    assert usage["total_tokens"] == run.total_tokens > 0
    # The stream: the task, then its updates, the answer and its end.
    assert streamed[0].task.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
    last = streamed[-1]
    assert last.status_update.status.state == TaskState.TASK_STATE_COMPLETED
    artifacts = [e.artifact_update for e in streamed if e.HasField("artifact_update")]
    assert artifacts[-1].artifact.parts[0].text == "Hello from Agentry." and artifacts[-1].last_chunk
    second = Run.objects.get(pk=streamed[0].task.id)
    assert second.conversation_id == run.conversation_id and second.trigger == RunTrigger.A2A


def test_an_approval_is_input_required_then_completed_once_decided_in_the_queue(worker, a2a_expose, careful, approver):
    exposed = a2a_expose(careful)

    async def talk():
        async with a2a_client(exposed) as client:
            streamed = await _events(client, _ask("count it"))
            task_id = streamed[0].task.id
            # The approver decides in the queue while the client follows the task.
            followed = []
            async for event in client.subscribe(SubscribeToTaskRequest(id=task_id)):
                followed.append(event)
                if len(followed) == 1:
                    await asyncio.to_thread(_approve, task_id, approver)
            refused = None
            try:
                await _events(client, _ask("more?", task_id=task_id))
            except A2AError as exc:
                refused = exc
            return streamed, followed, refused

    streamed, followed, refused = asyncio.run(talk())
    waiting = streamed[-1].status_update.status
    assert waiting.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert "test-counter" in waiting.message.parts[0].text
    assert followed[0].task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert followed[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    run = Run.objects.get(pk=streamed[0].task.id)
    assert run.status == "completed" and Approval.objects.get(run=run).status == "approved"
    assert refused is not None and "ended" in str(refused)


def test_cancel_ends_a_task_waiting_for_approval(worker, a2a_expose, careful):
    exposed = a2a_expose(careful)
    neighbour = a2a_expose(careful)  # another member of the same workspace

    async def talk():
        async with a2a_client(exposed) as client:
            streamed = await _events(client, _ask("count it"))
            task_id = streamed[0].task.id
        async with a2a_client(neighbour) as client:
            for call in (
                client.get_task(GetTaskRequest(id=task_id)),
                client.cancel_task(CancelTaskRequest(id=task_id)),
            ):
                with pytest.raises(TaskNotFoundError):
                    await call
        async with a2a_client(exposed) as client:
            cancelled = await client.cancel_task(CancelTaskRequest(id=task_id))
            try:
                await client.cancel_task(CancelTaskRequest(id=task_id))
            except A2AError as exc:
                again = exc
            return cancelled, again

    cancelled, again = asyncio.run(talk())
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    run = Run.objects.get(pk=cancelled.id)
    assert run.status == "cancelled" and Approval.objects.get(run=run).status == "cancelled"
    assert "ended" in str(again)


def test_push_notifications_are_signed_with_the_configs_token(worker, a2a_expose, careful, approver):
    exposed = a2a_expose(careful)
    receiver = WebhookReceiver()
    try:

        async def talk():
            async with a2a_client(exposed, streaming=False) as client:
                request = _ask("count it")
                request.configuration.CopyFrom(
                    SendMessageConfiguration(
                        task_push_notification_config=TaskPushNotificationConfig(
                            id="mine", url=receiver.url, token="tok-" + "x" * 20
                        )
                    )
                )
                [sent] = await _events(client, request)
                config = await client.get_task_push_notification_config(
                    GetTaskPushNotificationConfigRequest(task_id=sent.task.id, id="mine")
                )
                return sent.task, config

        task, config = asyncio.run(talk())
        assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        assert config.url == receiver.url and config.token == ""  # the signing key is not shown again
        _approve(task.id, approver)
        wait_for(lambda: len(receiver.requests) >= 3, timeout=60, message="three push notifications")
    finally:
        receiver.stop()
    kinds = [r["headers"]["x-agentry-event"] for r in receiver.requests]
    assert kinds[0] == "approval.requested" and kinds[-1] == "run.completed"
    for request in receiver.requests:
        headers = request["headers"]
        mac = hmac.new(
            b"tok-" + b"x" * 20, headers["x-agentry-timestamp"].encode() + b"." + request["body"], hashlib.sha256
        )
        assert headers["x-agentry-signature"] == "sha256=" + mac.hexdigest()
    first, last = (json.loads(r["body"]) for r in (receiver.requests[0], receiver.requests[-1]))
    assert first["statusUpdate"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert last["task"]["status"]["state"] == "TASK_STATE_COMPLETED" and last["task"]["id"] == task.id
    assert PushConfig.objects.get().created_by == exposed.user


def test_another_workspaces_token_sees_nothing(a2a_expose, talker, transactional_db):
    exposed = a2a_expose(talker)
    other = Workspace.objects.create(name="Other", slug="other")
    stranger = make_user()
    Membership.objects.create(workspace=other, user=stranger, role="owner")
    token = api_token_create(user=stranger, name="t", workspace=other)[1]
    headers = {"Authorization": f"Bearer {token}"}
    assert httpx.get(exposed.card_url, headers=headers).status_code == 404
    body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": str(uuid.uuid4())}}
    assert httpx.post(exposed.endpoint, json=body, headers=headers).status_code == 404
    # An agent not opted in is as unknown as another workspace's.
    hidden = make_agent(slug="a2a-hidden")
    assert httpx.get(exposed.card_url.replace(talker.slug, hidden.slug), headers=exposed.headers).status_code == 404


def test_resubscribing_to_a_running_task_follows_it_to_its_answer(worker, a2a_expose, fake_llm):
    name = fake_llm.script(f"a2a-slow-{uuid.uuid4().hex[:8]}", {"fallback": {"content": "Slow.", "latency_ms": 2500}})
    slow = make_agent(model_config=ModelConfigFactory(base_url=fake_llm.api_base, model=name), slug="a2a-slow")
    exposed = a2a_expose(slow)

    async def talk():
        async with a2a_client(exposed, streaming=False) as client:
            request = _ask("take your time")
            request.configuration.return_immediately = True
            [sent] = await _events(client, request)
        async with a2a_client(exposed) as client:
            followed = [event async for event in client.subscribe(SubscribeToTaskRequest(id=sent.task.id))]
        return sent.task, followed

    task, followed = asyncio.run(talk())
    assert task.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
    assert followed[0].task.id == task.id and followed[0].task.status.state != TaskState.TASK_STATE_COMPLETED
    assert followed[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert followed[-2].artifact_update.artifact.parts[0].text == "Slow."


def test_an_answer_held_to_a_schema_carries_its_parsed_value_as_a_data_part(worker, a2a_expose, fake_llm):
    name = fake_llm.script(f"a2a-json-{uuid.uuid4().hex[:8]}", {"fallback": {"content": '{"order": "A-17"}'}})
    agent = make_agent(
        model_config=ModelConfigFactory(base_url=fake_llm.api_base, model=name),
        slug="a2a-json",
        output_schema={"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]},
    )
    exposed = a2a_expose(agent)

    async def talk():
        async with a2a_client(exposed, streaming=False) as client:
            [sent] = await _events(client, _ask("order?"))
        async with a2a_client(exposed) as client:
            streamed = await _events(client, _ask("again", context_id=sent.task.context_id))
        return sent.task, streamed

    sent, streamed = asyncio.run(talk())
    text, data = sent.artifacts[0].parts
    assert text.text == '{"order": "A-17"}' and data.media_type == "application/json"
    assert json_format.MessageToDict(data.data) == {"order": "A-17"}
    last = [e.artifact_update for e in streamed if e.HasField("artifact_update")][-1]
    assert last.last_chunk and json_format.MessageToDict(last.artifact.parts[1].data) == {"order": "A-17"}
