"""Every way in takes attachments through the one contract: the REST message (ids of uploads, or
files in multipart form data), /v1/chat/completions' content parts (data: URLs, base64 audio,
files, image URLs fetched through the outbound guard) and agentry_chat --attach. Each stores as
the conversation's identity, records the parts on the message and the uses with the run."""

import base64
import io

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from PIL import Image
from starlette.applications import Starlette
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from api.completions import CompletionRequestError, completion_request_parse, completion_start
from attachments.fetch import attachment_url_fetch, fetch_deadline
from attachments.models import Attachment, AttachmentUse
from attachments.services import attachment_read
from attachments.sniff import AttachmentRefused
from conversations.models import Message, Run, RunRequest
from tests.attachments import samples
from tests.support.api import client_for
from tests.support.factories import ModelConfigFactory, make_agent, make_user, token_for
from tests.support.servers import serve

pytestmark = pytest.mark.django_db


@pytest.fixture
def agent():
    """The suite's plain agent, on a model config that takes every kind of part (never called)."""
    return make_agent(
        tools=["test-echo"],
        slug="helper",
        model_config=ModelConfigFactory(input_kinds=["text", "image", "audio", "file"]),
    )


@pytest.fixture
def alice():
    return make_user()


@pytest.fixture
def api(alice):
    return client_for(alice)


def conversation_of(api, agent, end_user="eu-1") -> str:
    response = api.post("/api/v1/conversations/", {"agent": agent.slug, "end_user": end_user}, format="json")
    assert response.status_code == 201, response.content
    return response.json()["id"]


def uploaded(api, data: bytes, name: str, end_user="eu-1") -> str:
    response = api.post("/api/v1/attachments/", {"file": SimpleUploadedFile(name, data), "end_user": end_user})
    assert response.status_code == 201, response.content
    return response.json()["id"]


def data_url(data: bytes, media_type: str = "") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


# --- REST: ids of uploads ---------------------------------------------------------------------------


def test_a_message_names_uploads_and_answers_them_with_their_download_urls(stored, api, agent, alice):
    conversation = conversation_of(api, agent)
    photo, clip = uploaded(api, samples.png(), "photo.png"), uploaded(api, samples.wav(), "note.wav")
    response = api.post(
        f"/api/v1/conversations/{conversation}/messages/", {"content": "", "attachments": [clip, photo]}, format="json"
    )
    assert response.status_code == 202, response.content
    run = response.json()
    assert run["input"] == ""
    assert [(a["attachment"], a["type"]) for a in run["input_attachments"]] == [(clip, "audio"), (photo, "image")]
    assert run["input_attachments"][1]["width"] == 40 and run["input_attachments"][0]["duration_ms"] == 1500
    assert run["input_attachments"][1]["url"].endswith(f"/api/v1/attachments/{photo}/content/")
    assert [str(u.attachment_id) for u in AttachmentUse.objects.filter(run_id=run["id"]).order_by("position")] == [
        clip,
        photo,
    ]
    # The message the run answers carries them, and the conversation shows them with their URLs.
    message = Message.objects.get(run_id=run["id"], role="user")
    assert [part["attachment"] for part in message.parts] == [clip, photo]
    shown = api.get(f"/api/v1/conversations/{conversation}/").json()["messages"][0]
    assert [a["attachment"] for a in shown["attachments"]] == [clip, photo]
    assert api.get(shown["attachments"][1]["url"]).status_code == 200
    assert api.get(f"/api/v1/runs/{run['id']}/").json()["input_attachments"] == run["input_attachments"]


def test_a_text_message_has_no_attachments_in_its_answers(stored, api, agent):
    conversation = conversation_of(api, agent)
    run = api.post(f"/api/v1/conversations/{conversation}/messages/", {"content": "hi"}, format="json").json()
    assert run["input_attachments"] == []
    assert Message.objects.get(run_id=run["id"]).parts is None
    assert api.get(f"/api/v1/conversations/{conversation}/").json()["messages"][0]["attachments"] == []


def test_an_id_not_found_for_the_conversation_is_a_400_naming_it_and_revealing_nothing(stored, api, agent):
    conversation = conversation_of(api, agent)
    url = f"/api/v1/conversations/{conversation}/messages/"
    other_end_user = uploaded(api, samples.png(), "a.png", end_user="eu-2")
    other_owner = uploaded(client_for(make_user()), samples.png(), "a.png")
    missing = "6a1e8d8e-0000-4000-8000-000000000000"
    answers = {}
    for attachment_id in (other_end_user, other_owner, missing, "not-an-id"):
        response = api.post(url, {"content": "look", "attachments": [attachment_id]}, format="json")
        assert response.status_code == 400, response.content
        answers[attachment_id] = response.json()["message"]
        assert attachment_id in answers[attachment_id]
    # Another's attachment reads exactly as a missing one.
    assert {message.replace(key, "ID") for key, message in answers.items()} == {
        "attachments: There is no attachment ID for this conversation's end user; upload it first "
        "(POST /api/v1/attachments/ with the same end_user)."
    }
    assert not Run.objects.exists()


def test_an_idempotency_key_covers_the_attachments(stored, api, agent):
    conversation = conversation_of(api, agent)
    url = f"/api/v1/conversations/{conversation}/messages/"
    first, second = uploaded(api, samples.png(), "a.png"), uploaded(api, samples.gif(), "b.gif")
    body = {"content": "see", "attachments": [first]}
    one = api.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY="k")
    again = api.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert again["Idempotent-Replayed"] == "true" and again.json()["id"] == one.json()["id"]
    other = api.post(url, {**body, "attachments": [second]}, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert other.status_code == 422
    assert Run.objects.count() == 1


# --- REST: multipart form data -----------------------------------------------------------------------


def test_a_multipart_message_stores_its_files_as_the_conversations_identity(stored, api, agent, alice):
    conversation = conversation_of(api, agent)
    earlier = uploaded(api, samples.docx(), "terms.docx")
    response = api.post(
        f"/api/v1/conversations/{conversation}/messages/",
        {
            "content": "这张发票和照片",
            "attachments": [
                SimpleUploadedFile("invoice.pdf", b"%PDF-1.4\n%%EOF\n"),
                earlier,
                SimpleUploadedFile("photo.jpg", samples.jpeg(exif=samples.gps_exif())),
            ],
        },
    )
    assert response.status_code == 202, response.content
    parts = response.json()["input_attachments"]
    # Ids first among the form's values, then the files, in the order sent.
    assert [(p["type"], p["media_type"], p["name"]) for p in parts] == [
        ("file", "application/vnd.openxmlformats-officedocument.wordprocessingml.document", "terms.docx"),
        ("file", "application/pdf", "invoice.pdf"),
        ("image", "image/jpeg", "photo.jpg"),
    ]
    photo = Attachment.objects.get(pk=parts[2]["attachment"])
    assert (photo.owner, photo.end_user, photo.uploaded_by) == (alice, "eu-1", alice)
    assert not Image.open(io.BytesIO(attachment_read(attachment=photo))).getexif()
    assert RunRequest.objects.get(run_id=response.json()["id"]).content == "这张发票和照片"


def test_a_multipart_message_takes_files_only_in_its_attachments_field(stored, api, agent):
    conversation = conversation_of(api, agent)
    response = api.post(
        f"/api/v1/conversations/{conversation}/messages/",
        {"content": "x", "photo": SimpleUploadedFile("a.png", samples.png())},
    )
    assert response.status_code == 400
    assert response.json()["message"] == "photo: Send files in the field `attachments`."
    assert not Attachment.objects.exists() and not Run.objects.exists()


def test_a_message_without_text_or_attachments_is_still_refused(stored, api, agent):
    conversation = conversation_of(api, agent)
    url = f"/api/v1/conversations/{conversation}/messages/"
    assert api.post(url, {"content": "", "attachments": []}, format="json").json()["message"] == (
        "content: This field may not be blank."
    )


# --- /v1/chat/completions ---------------------------------------------------------------------------


def completion(agent, *messages, user="eu-1") -> dict:
    return {"model": agent.slug, "user": user, "messages": list(messages)}


def test_openai_content_parts_become_the_messages_attachments(stored, agent, alice, no_enqueue):
    body = completion(
        agent,
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": data_url(samples.png(), "image/png"), "detail": "low"}},
            ],
        },
        {"role": "assistant", "content": "A red square."},
        {
            "role": "user",
            "content": [
                {
                    "type": "input_audio",
                    "input_audio": {"data": base64.b64encode(samples.wav()).decode(), "format": "wav"},
                },
                {
                    "type": "file",
                    "file": {"file_data": data_url(b"%PDF-1.4\n%%EOF\n", "application/pdf"), "filename": "a.pdf"},
                },
                # Declared JPEG, sent PNG: the bytes decide (attachments.data_urls).
                {"type": "image_url", "image_url": {"url": data_url(samples.png(color=(0, 0, 255)), "image/jpeg")}},
            ],
        },
    )
    run = completion_start(user=alice, agent=agent, request=completion_request_parse(body))
    messages = list(Message.objects.filter(conversation=run.conversation).order_by("order"))
    assert [m.role for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[1].content == "What is this?" and [p["type"] for p in messages[1].parts] == ["image"]
    assert messages[3].content == "" and [(p["type"], p["media_type"]) for p in messages[3].parts] == [
        ("audio", "audio/wav"),
        ("file", "application/pdf"),
        ("image", "image/png"),
    ]
    assert messages[2].parts is None and run.conversation.end_user == "eu-1"
    uses = AttachmentUse.objects.filter(run=run).order_by("position")
    assert [str(u.attachment_id) for u in uses] == [p["attachment"] for p in messages[1].parts + messages[3].parts]
    assert {(a.owner_id, a.end_user) for a in Attachment.objects.all()} == {(alice.pk, "eu-1")}
    assert run.conversation.title == "audio.wav, a.pdf, image"


def _refusal(body) -> CompletionRequestError:
    with pytest.raises(CompletionRequestError) as refused:
        completion_request_parse(body)
    return refused.value


def test_openai_parts_that_cannot_be_taken_are_refused_naming_the_part(agent):
    def user(*parts):
        return completion(agent, {"role": "user", "content": [{"type": "text", "text": "hi"}, *parts]})

    file_id = _refusal(user({"type": "file", "file": {"file_id": "file-abc"}}))
    assert file_id.param == "messages[0].content[1]" and "keeps no OpenAI file store" in file_id.message
    unknown = _refusal(user({"type": "video_url", "video_url": {"url": "x"}}))
    assert unknown.param == "messages[0].content[1].type" and "video_url" in unknown.message
    in_assistant = _refusal(
        completion(
            agent,
            {"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": data_url(samples.png())}}]},
            {"role": "user", "content": "hi"},
        )
    )
    assert "Only user messages" in in_assistant.message
    ftp = _refusal(user({"type": "image_url", "image_url": {"url": "ftp://example.com/a.png"}}))
    assert ftp.message == "image_url.url must be a data: URL or an http(s) URL."
    declared = _refusal(user({"type": "image_url", "image_url": {"url": data_url(samples.png(), "application/pdf")}}))
    assert declared.code == "attachment_mismatch"
    audio = _refusal(user({"type": "input_audio", "input_audio": {"data": "AAAA", "format": "../x"}}))
    assert "input_audio.format" in audio.message


def test_a_file_part_whose_bytes_are_another_family_than_declared_is_refused(stored, agent, alice):
    body = completion(
        agent,
        {
            "role": "user",
            "content": [{"type": "file", "file": {"file_data": data_url(samples.png(), "application/pdf")}}],
        },
    )
    with pytest.raises(CompletionRequestError) as refused:
        completion_start(user=alice, agent=agent, request=completion_request_parse(body))
    assert refused.value.code == "attachment_mismatch" and refused.value.param == "messages[0].content[0]"
    assert "declared application/pdf but it is image/png" in refused.value.message
    assert not Run.objects.exists()


@pytest.fixture
def image_server():
    async def photo(request):
        return Response(samples.png(size=(12, 8)), media_type="image/png")

    async def page(request):
        return Response(b"<html><body>not an image</body></html>", media_type="image/png")

    async def to_metadata(request):
        return RedirectResponse("http://169.254.169.254/latest/meta-data/")

    async def missing(request):
        return Response(b"", status_code=404)

    base_url, stop = serve(
        Starlette(
            routes=[
                Route("/photo.jpg", photo),
                Route("/page", page),
                Route("/redirect", to_metadata),
                Route("/missing", missing),
            ]
        )
    )
    yield base_url
    stop()


def test_an_image_url_is_fetched_through_the_guard_when_its_host_is_allowed(
    stored, settings, agent, alice, image_server
):
    settings.AGENTRY_ATTACHMENT_URL_ALLOWLIST = ["127.0.0.1"]
    body = completion(
        agent,
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": f"{image_server}/photo.jpg"}}]},
    )
    run = completion_start(user=alice, agent=agent, request=completion_request_parse(body))
    [part] = Message.objects.get(run=run).parts
    # Named by the URL without its extension: the server sent a PNG for .jpg.
    assert (part["media_type"], part["width"], part["name"]) == ("image/png", 12, "photo")

    def refused(path) -> AttachmentRefused:
        with pytest.raises(AttachmentRefused) as caught:
            attachment_url_fetch(f"{image_server}{path}", deadline=fetch_deadline())
        return caught.value

    assert refused("/redirect").code == "address"  # each hop goes through the guard again
    assert refused("/missing").code == "url" and "HTTP 404" in str(refused("/missing"))
    settings.AGENTRY_ATTACHMENT_MAX_BYTES = 20
    assert refused("/photo.jpg").code == "size"
    settings.AGENTRY_ATTACHMENT_URL_ALLOWLIST = []
    assert refused("/photo.jpg").code == "address"
    # The tools' allowlist (the suite's lists loopback) opens nothing here.
    assert "127.0.0.1" in settings.AGENTRY_OUTBOUND_ALLOWLIST


def test_an_image_url_that_is_not_an_image_is_refused(stored, settings, agent, alice, image_server):
    settings.AGENTRY_ATTACHMENT_URL_ALLOWLIST = ["127.0.0.1"]
    body = completion(
        agent, {"role": "user", "content": [{"type": "image_url", "image_url": {"url": f"{image_server}/page"}}]}
    )
    with pytest.raises(CompletionRequestError) as refused:
        completion_start(user=alice, agent=agent, request=completion_request_parse(body))
    assert refused.value.status == 400 and refused.value.code == "attachment_markup"
    assert not Run.objects.exists()


def test_the_urls_of_a_request_share_one_deadline():
    with pytest.raises(AttachmentRefused) as refused:
        attachment_url_fetch("http://example.com/a.png", deadline=0)
    assert refused.value.code == "url" and "took too long" in str(refused.value)


# --- agentry_chat --attach ----------------------------------------------------------------------------


def test_the_cli_stores_and_sends_its_attachments(stored, agent, tmp_path, no_enqueue):
    photo, note = tmp_path / "photo.png", tmp_path / "note.wav"
    photo.write_bytes(samples.png())
    note.write_bytes(samples.wav())
    with pytest.raises(CommandError, match="did not end|still"):
        call_command(
            "agentry_chat",
            "这是什么？",
            agent=agent.slug,
            attach=[str(photo), str(note)],
            timeout=0.01,
            end_user="cli-1",
        )
    run = Run.objects.get()
    message = Message.objects.get(run=run)
    assert [(p["type"], p["name"]) for p in message.parts] == [("image", "photo.png"), ("audio", "note.wav")]
    assert {(a.owner_id, a.end_user) for a in Attachment.objects.all()} == {(None, "cli-1")}


@pytest.mark.parametrize(
    "name, data, reason",
    [
        ("logo.svg", samples.SVG_WITH_SCRIPT, "HTML, SVG and XML files are not accepted."),
        ("empty.png", b"", "The file is empty."),
        ("missing.png", None, "No such file or directory"),
    ],
)
def test_the_cli_refuses_a_file_saying_why(stored, agent, tmp_path, no_enqueue, name, data, reason):
    path = tmp_path / name
    if data is not None:
        path.write_bytes(data)
    with pytest.raises(CommandError) as refused:
        call_command("agentry_chat", "look", agent=agent.slug, attach=[str(path)])
    assert str(refused.value) == f"--attach {path}: {reason}"
    assert not Run.objects.exists()


def test_the_ways_that_carry_files_in_a_message_may_have_an_uploads_body(settings):
    from platform_site.body_limit import body_limit

    settings.AGENTRY_MAX_BODY_BYTES = 4_000_000
    settings.AGENTRY_MAX_ATTACHMENT_BODY_BYTES = 21_000_000
    conversation = "/api/v1/conversations/6a1e8d8e-0000-4000-8000-000000000000"
    assert body_limit({"path": f"{conversation}/messages/", "headers": []}) == 21_000_000
    assert body_limit({"path": "/v1/chat/completions", "headers": []}) == 21_000_000
    assert body_limit({"path": f"{conversation}/", "headers": []}) == 4_000_000
    assert body_limit({"path": f"{conversation}/messages/x/", "headers": []}) == 4_000_000
    assert body_limit({"path": "/v1/chat/completions/x", "headers": []}) == 4_000_000


# Commits: the token is read on a thread of the async view.
@pytest.mark.django_db(transaction=True)
def test_a_chat_completion_may_carry_more_json_than_a_form_but_no_more_than_an_upload(settings, agent, alice):
    from asgiref.sync import async_to_sync
    from django.test import AsyncClient

    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    settings.AGENTRY_MAX_ATTACHMENT_BODY_BYTES = 5000
    post = async_to_sync(AsyncClient().post)
    headers = {"Authorization": f"Bearer {token_for(alice)}"}
    body = {"model": "no-such-agent", "messages": [{"role": "user", "content": "x" * 3000}]}
    # Past the form limit and read: the agent is what is missing.
    assert post("/v1/chat/completions", body, content_type="application/json", headers=headers).status_code == 404
    body["messages"][0]["content"] = "x" * 6000
    response = post("/v1/chat/completions", body, content_type="application/json", headers=headers)
    assert response.status_code == 413
    assert response.json()["error"] == {
        "message": "The request body is larger than 5000 bytes.",
        "type": "invalid_request_error",
        "param": None,
        "code": "request_too_large",
    }


# --- a part the agent's model does not take (admission's check, where it exists) --------------------


@pytest.fixture
def text_only_agent():
    pytest.importorskip("engine.admission_parts", reason="admission refuses parts a model does not take")
    return make_agent(slug="text-only", model_config=ModelConfigFactory(input_kinds=["text"]))


def test_every_way_in_answers_a_part_the_model_does_not_take_with_a_4xx(
    stored, text_only_agent, alice, no_enqueue, tmp_path
):
    api = client_for(alice)
    url = f"/api/v1/conversations/{conversation_of(api, text_only_agent)}/messages/"
    photo = uploaded(api, samples.png(), "photo.png")
    response = api.post(url, {"content": "look", "attachments": [photo]}, format="json")
    assert response.status_code == 400 and response.json()["message"].startswith("attachments: "), response.content
    response = api.post(url, {"content": "look", "attachments": [SimpleUploadedFile("a.png", samples.png())]})
    assert response.status_code == 400, response.content
    body = completion(
        text_only_agent,
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_url(samples.png())}}]},
    )
    with pytest.raises(CompletionRequestError) as refused:
        completion_start(user=alice, agent=text_only_agent, request=completion_request_parse(body))
    assert (refused.value.status, refused.value.param) == (400, "messages")
    path = tmp_path / "photo.png"
    path.write_bytes(samples.png())
    with pytest.raises(CommandError, match="^--attach: "):
        call_command("agentry_chat", "look", agent=text_only_agent.slug, attach=[str(path)])
    assert not Run.objects.exists()
