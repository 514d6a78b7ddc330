"""Each way in, with each part type, through the real worker to the fake model server's echo
script (its answer is the user's text and a line per part, as the server decoded it): a REST
message naming an upload, a REST multipart message, a chat completion with a data: URL (through
a live uvicorn) and one with an image URL fetched through the guard. Then once on the embedded
stack (SQLite, the filesystem broker, agentry_chat --attach) and once with the bytes in an
S3-compatible bucket (moto's server), read by a worker configured for it."""

import base64
import subprocess
import sys

import httpx
import pytest
from asgiref.sync import async_to_sync
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import AsyncClient
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route

from attachments.models import AttachmentUse
from attachments.services import attachment_store
from conversations.models import Conversation, Message, Run
from engine.admission import message_submit
from tests.attachments import samples
from tests.attachments.test_s3 import BUCKET, KEYS, bucket, s3_server  # noqa: F401 - fixtures
from tests.conftest import _database_url
from tests.support.api import client_for
from tests.support.embedded import ROOT, embedded_environment
from tests.support.factories import ModelConfigFactory, make_agent, make_user, token_for
from tests.support.servers import serve
from tests.support.waits import wait_for
from tests.support.workers import WorkerProcess
from workspaces.defaults import default_workspace_id
from workspaces.models import Workspace

pytestmark = pytest.mark.e2e

CSV = "名称,数量\ntea,2\n".encode()
# kind: (bytes, name, the line the echo script adds for it)
PARTS = {
    "image": (samples.png(size=(40, 30), color=(200, 30, 30)), "photo.png", "\n[image 40x30 #c81e1e]"),
    "file": (CSV, "order.csv", f"\n[file order.csv {len(CSV)} bytes]"),
    "audio": (samples.wav(seconds=1.5), "note.wav", "\n[audio 1.5 s]"),
}
KINDS = pytest.mark.parametrize("kind", PARTS)


@pytest.fixture
def echo_agent(fake_llm):
    model = ModelConfigFactory(base_url=fake_llm.api_base, model="echo", input_kinds=["text", "image", "audio", "file"])
    return make_agent(model_config=model, slug="parts-echo")


def _finished(run_id) -> Run:
    return wait_for(
        lambda: Run.objects.filter(pk=run_id, status__in=["completed", "failed"]).first(),
        timeout=60,
        message=f"run {run_id} to end",
    )


def _answer(run_id) -> str:
    run = _finished(run_id)
    assert run.status == "completed", run.error
    return Message.objects.get(run=run, role=Message.Role.ASSISTANT).content


def _conversation(api, agent) -> str:
    response = api.post("/api/v1/conversations/", {"agent": agent.slug, "end_user": "eu-1"}, format="json")
    assert response.status_code == 201, response.content
    return response.json()["id"]


@KINDS
def test_a_rest_message_naming_an_upload(worker, echo_agent, kind):
    data, name, line = PARTS[kind]
    api = client_for(make_user())
    upload = api.post("/api/v1/attachments/", {"file": SimpleUploadedFile(name, data), "end_user": "eu-1"})
    assert upload.status_code == 201, upload.content
    url = f"/api/v1/conversations/{_conversation(api, echo_agent)}/messages/"
    response = api.post(url, {"content": "look", "attachments": [upload.json()["id"]]}, format="json")
    assert response.status_code == 202, response.content
    assert _answer(response.json()["id"]) == "look" + line


@KINDS
def test_a_rest_multipart_message(worker, echo_agent, kind):
    data, name, line = PARTS[kind]
    api = client_for(make_user())
    url = f"/api/v1/conversations/{_conversation(api, echo_agent)}/messages/"
    response = api.post(url, {"content": "look", "attachments": [SimpleUploadedFile(name, data)]})
    assert response.status_code == 202, response.content
    assert _answer(response.json()["id"]) == "look" + line


def _v1_part(kind: str) -> dict:
    data, name, _ = PARTS[kind]
    encoded = base64.b64encode(data).decode()
    if kind == "image":
        return {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{encoded}"}}
    if kind == "audio":
        return {"type": "input_audio", "input_audio": {"data": encoded, "format": "wav"}}
    return {"type": "file", "file": {"file_data": f"data:text/csv;base64,{encoded}", "filename": name}}


@KINDS
def test_a_chat_completion_with_inline_parts_through_a_live_server(api_server, worker, echo_agent, kind):
    user = make_user()
    body = {
        "model": echo_agent.slug,
        "user": "eu-1",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "look"}, _v1_part(kind)]}],
    }
    response = httpx.post(
        f"{api_server.base_url}/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {token_for(user)}"},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "look" + PARTS[kind][2]
    run = Run.objects.get(pk=response.json()["agentry"]["run_id"])
    assert AttachmentUse.objects.get(run=run).attachment.kind == kind


@pytest.fixture
def image_server():
    async def photo(request):
        return Response(samples.png(size=(12, 8), color=(0, 0, 255)), media_type="image/png")

    base_url, stop = serve(Starlette(routes=[Route("/photo", photo)]))
    yield base_url
    stop()


def test_a_chat_completion_with_an_image_url_fetched_through_the_guard(
    api_server, worker, echo_agent, image_server, settings
):
    token = token_for(make_user())
    body = {
        "model": echo_agent.slug,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": f"{image_server}/photo"}},
                ],
            }
        ],
    }
    # The live server keeps the default: loopback is no place to fetch from.
    refused = httpx.post(
        f"{api_server.base_url}/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
    )
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "attachment_address"
    # Here the host is allowed, as an operator would list an internal image server.
    settings.AGENTRY_ATTACHMENT_URL_ALLOWLIST = ["127.0.0.1"]
    response = async_to_sync(AsyncClient().post)(
        "/v1/chat/completions", body, content_type="application/json", headers={"Authorization": f"Bearer {token}"}
    )
    assert response.status_code == 200, response.content
    assert response.json()["choices"][0]["message"]["content"] == "look\n[image 12x8 #0000ff]"


def test_the_embedded_stack_takes_an_attachment_from_the_cli(embedded_var_dir, fake_llm, tmp_path):
    """SQLite and the filesystem broker, in child processes: the agent made there, a worker started
    there, and agentry_chat --attach waiting for the answer."""
    env = embedded_environment(embedded_var_dir) | {"REDIS_URL": "", "CELERY_BROKER_URL": "", "AGENTRY_ENV_FILE": ""}

    def manage(*arguments, check=True):
        done = subprocess.run(
            [sys.executable, "manage.py", *arguments], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240
        )
        assert not check or done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        return done

    manage(
        "shell",
        "-c",
        "from agents.models import Agent, ModelConfig\n"
        f"model = ModelConfig.objects.create(name='echo', base_url='{fake_llm.api_base}', model='echo', "
        "input_kinds=['text', 'image', 'audio', 'file'])\n"
        "Agent.objects.create(name='Echo', slug='parts-echo', model_config=model)\n",
    )
    photo = tmp_path / "photo.png"
    photo.write_bytes(PARTS["image"][0])
    from platform_site.worker_command import worker_argv

    log = open(tmp_path / "worker.log", "wb")
    worker = subprocess.Popen(
        worker_argv(concurrency=2, name="embedded@%h"), cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        out = manage("agentry_chat", "look", "--agent", "parts-echo", "--attach", str(photo), "--timeout", "90")
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    assert "completed" in out.stdout and "[image 40x30 #c81e1e]" in out.stdout, out.stdout
    assert (embedded_var_dir / "agentry.sqlite3").exists() and list((embedded_var_dir / "attachments").rglob("*"))
    refused = manage(
        "agentry_chat", "look", "--agent", "parts-echo", "--attach", str(tmp_path / "none.png"), check=False
    )
    assert refused.returncode != 0 and "--attach" in refused.stderr


@pytest.fixture
def s3_worker(bucket, s3_server, transactional_db):  # noqa: F811 - the fixtures imported above
    worker = WorkerProcess(
        database_url=_database_url(),
        name="s3-worker",
        env={
            "AGENTRY_ATTACHMENTS_S3_BUCKET": BUCKET,
            "AGENTRY_ATTACHMENTS_S3_ENDPOINT_URL": s3_server,
            "AGENTRY_ATTACHMENTS_S3_REGION": "us-east-1",
            "AGENTRY_ATTACHMENTS_S3_ACCESS_KEY_ID": KEYS["aws_access_key_id"],
            "AGENTRY_ATTACHMENTS_S3_SECRET_ACCESS_KEY": KEYS["aws_secret_access_key"],
            "AGENTRY_ATTACHMENTS_S3_ADDRESSING_STYLE": "path",
        },
    )
    worker.start()
    yield worker
    worker.stop()


def test_the_bytes_in_an_s3_bucket_reach_the_model(s3_worker, bucket, echo_agent):  # noqa: F811
    owner = make_user()
    workspace = Workspace.objects.get(pk=default_workspace_id())
    data, name, line = PARTS["image"]
    photo = attachment_store(workspace=workspace, uploaded_by=owner, owner=owner, data=data, name=name)
    assert [item["Key"] for item in bucket.list_objects_v2(Bucket=BUCKET)["Contents"]] == [
        f"attachments/{photo.storage_key}"
    ]
    conversation = Conversation.objects.create(agent=echo_agent, owner=owner)
    run = message_submit(conversation=conversation, content="look", user=owner, attachments=[photo]).run
    assert _answer(run.pk) == "look" + line
