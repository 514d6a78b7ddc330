"""The bad-input sweep: every way in that takes attachments (the upload route, a REST message's
ids and its multipart files, /v1's content parts) against every bad input. Each is a clear 4xx
(400, or 413 for one too large) in the way's error shape, or a refused part: never a 500, and
nothing is started, so no worker ever sees it (parsing and sniffing happen in the request; a
worker only reads stored bytes). The one good input here, an EXIF-laden photo, is taken on every
way, its metadata gone from the bytes stored, sent and downloaded."""

import base64
import io

import pytest
from asgiref.sync import async_to_sync
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import AsyncClient
from PIL import Image

from attachments.models import Attachment
from attachments.services import attachment_read
from conversations.models import Run
from tests.attachments import samples
from tests.support.api import client_for
from tests.support.factories import ModelConfigFactory, make_agent, make_user, token_for

OVERSIZE_LIMIT = 5_000

# name: (bytes, file name, status on every way); None: accepted.
FILES = {
    "0-byte": (b"", "empty.png", 400),
    "truncated-png": (samples.png()[:60], "a.png", 400),
    "truncated-jpeg": (samples.jpeg()[:200], "a.jpg", 400),
    "50-megapixels": (samples.bomb_png(), "big.png", 400),
    "polyglot-jpeg-and-zip": (samples.jpeg_with_zip(), "a.jpg", 400),
    "gifar": (samples.gifar(), "a.gif", 400),
    "gif-and-html": (samples.gif() + b"<html><script>alert(1)</script></html>", "a.gif", 400),
    "wrong-extension": (samples.png(), "invoice.pdf", 400),
    "svg-with-script": (samples.SVG_WITH_SCRIPT, "logo.svg", 400),
    "oversized": (samples.noise_png(), "noise.png", 413),
    "exif-laden": (samples.jpeg(exif=samples.gps_exif()), "photo.jpg", None),
}
FILE_WAYS = ("upload", "multipart", "v1-file", "v1-image")
# An image_url's data: URL carries no name: a PNG in it is a PNG whatever it was called.
NOT_APPLICABLE = {("v1-image", "wrong-extension")}


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


def _conversation(api, agent) -> str:
    response = api.post("/api/v1/conversations/", {"agent": agent.slug, "end_user": "eu-1"}, format="json")
    assert response.status_code == 201, response.content
    return response.json()["id"]


def _data_url(data: bytes, media_type: str = "") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def _v1(user, body: dict):
    """POST /v1/chat/completions as the view is served (async); streamed, so an accepted request
    answers as soon as its run is queued."""
    return async_to_sync(AsyncClient().post)(
        "/v1/chat/completions",
        {**body, "stream": True},
        content_type="application/json",
        headers={"Authorization": f"Bearer {token_for(user)}"},
    )


def _v1_part(way: str, data: bytes, name: str) -> dict:
    if way == "v1-image":
        return {"type": "image_url", "image_url": {"url": _data_url(data)}}
    return {"type": "file", "file": {"file_data": _data_url(data, "application/octet-stream"), "filename": name}}


def _send(way: str, *, user, agent, data: bytes, name: str):
    """(status, error message) of sending one file on `way`."""
    api = client_for(user)
    if way == "upload":
        response = api.post("/api/v1/attachments/", {"file": SimpleUploadedFile(name, data), "end_user": "eu-1"})
        return response.status_code, response.json().get("message")
    if way == "multipart":
        url = f"/api/v1/conversations/{_conversation(api, agent)}/messages/"
        response = api.post(url, {"content": "look", "attachments": [SimpleUploadedFile(name, data)]})
        return response.status_code, response.json().get("message")
    body = {
        "model": agent.slug,
        "user": "eu-1",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "look"}, _v1_part(way, data, name)]}],
    }
    response = _v1(user, body)
    if response.status_code != 200:
        return response.status_code, response.json()["error"]["message"]
    return 200, None


def _sweep(way, case, settings, alice, agent):
    data, name, status = FILES[case]
    if case == "oversized":
        settings.AGENTRY_ATTACHMENT_MAX_BYTES = OVERSIZE_LIMIT
        assert len(data) > OVERSIZE_LIMIT
    got, message = _send(way, user=alice, agent=agent, data=data, name=name)
    if status is not None:
        assert got == status, (way, case, got, message)
        assert message, (way, case)
        assert not Attachment.objects.exists() and not Run.objects.exists()
        return
    assert got in (200, 201, 202), (way, case, got, message)
    photo = Attachment.objects.get()
    assert not Image.open(io.BytesIO(attachment_read(attachment=photo))).getexif()
    download = client_for(alice).get(f"/api/v1/attachments/{photo.pk}/content/")
    assert not Image.open(io.BytesIO(b"".join(download.streaming_content))).getexif()
    assert Run.objects.count() == (0 if way == "upload" else 1)


REST_CASES = [(way, case) for way in ("upload", "multipart") for case in FILES]
V1_CASES = [(way, case) for way in ("v1-file", "v1-image") for case in FILES if (way, case) not in NOT_APPLICABLE]


@pytest.mark.django_db
@pytest.mark.parametrize("way, case", REST_CASES, ids=[f"{w}-{c}" for w, c in REST_CASES])
def test_rest_ways_answer_each_bad_file_with_a_4xx(stored, settings, alice, agent, no_enqueue, way, case):
    _sweep(way, case, settings, alice, agent)


# The token is read on a thread of the async view, with a connection of its own: committed rows.
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("way, case", V1_CASES, ids=[f"{w}-{c}" for w, c in V1_CASES])
def test_v1_answers_each_bad_file_with_a_4xx_in_openais_shape(stored, settings, alice, agent, no_enqueue, way, case):
    settings.AGENTRY_COMPLETION_TIMEOUT_SECONDS = 0.1
    _sweep(way, case, settings, alice, agent)


# --- REST: ids of uploads -------------------------------------------------------------------------

MISSING_ID = "6a1e8d8e-0000-4000-8000-000000000000"
REFS = {
    "unknown id": [MISSING_ID],
    "another owner's": "stranger",
    "another end user's": "eu-2",
    "not an id": ["../../etc/passwd"],
    "a number": [5],
    "an object": [{"id": MISSING_ID}],
    "not a list": MISSING_ID,
    "an empty id": [""],
    "100 ids": [MISSING_ID] * 100,
}


@pytest.mark.django_db
@pytest.mark.parametrize("case", REFS)
def test_rest_references_answer_each_bad_reference_with_a_400(stored, alice, agent, no_enqueue, case):
    api = client_for(alice)
    refs = REFS[case]
    if refs in ("stranger", "eu-2"):
        uploader, end_user = (client_for(make_user()), "eu-1") if refs == "stranger" else (api, "eu-2")
        upload = {"file": SimpleUploadedFile("a.png", samples.png()), "end_user": end_user}
        refs = [uploader.post("/api/v1/attachments/", upload).json()["id"]]
    url = f"/api/v1/conversations/{_conversation(api, agent)}/messages/"
    response = api.post(url, {"content": "look", "attachments": refs}, format="json")
    assert response.status_code == 400, (case, response.content[:300])
    assert response.json()["message"].startswith("attachments")
    assert not Run.objects.exists()


# --- REST: multipart ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_multipart_message_with_100_files_is_refused_before_any_is_stored(stored, alice, agent, no_enqueue):
    api = client_for(alice)
    url = f"/api/v1/conversations/{_conversation(api, agent)}/messages/"
    files = [SimpleUploadedFile(f"{n}.png", samples.png(color=(n, n, n))) for n in range(100)]
    response = api.post(url, {"content": "look", "attachments": files})
    assert response.status_code == 400
    assert response.json()["message"] == "attachments: A message may carry at most 10 attachments; this one has 100."
    assert not Attachment.objects.exists() and not Run.objects.exists()
    # Past Django's own limit on a form's files (DATA_UPLOAD_MAX_NUMBER_FILES): a 400 as well.
    files.append(SimpleUploadedFile("x.png", samples.png()))
    assert api.post(url, {"content": "look", "attachments": files}).status_code == 400


# --- /v1: content parts ---------------------------------------------------------------------------


def _user(*parts) -> dict:
    return {"role": "user", "content": [{"type": "text", "text": "look"}, *parts]}


def _image_url(url: str) -> dict:
    return {"type": "image_url", "image_url": {"url": url}}


V1_PARTS = {
    "url to 127.0.0.1": (_user(_image_url("http://127.0.0.1:9/a.png")), 400, "attachment_address"),
    "url to 10.x": (_user(_image_url("http://10.1.2.3/a.png")), 400, "attachment_address"),
    "url to cloud metadata": (_user(_image_url("http://169.254.169.254/latest/meta-data/")), 400, "attachment_address"),
    "url to a name resolving to loopback": (_user(_image_url("http://localhost:9/a.png")), 400, "attachment_address"),
    "url with credentials to ipv6 loopback": (_user(_image_url("http://u:p@[::1]:9/a.png")), 400, "attachment_address"),
    "100 parts": (_user(*[_image_url(_data_url(samples.png()))] * 100), 400, "attachment_count"),
    "bad base64 in a data url": (_user(_image_url("data:image/png;base64,***not base64***")), 400, "attachment_base64"),
    "bad base64 audio": (
        _user({"type": "input_audio", "input_audio": {"data": "%%%", "format": "wav"}}),
        400,
        "attachment_base64",
    ),
    "a data url without data": (_user(_image_url("data:image/png;base64")), 400, "attachment_data_url"),
    "unknown part type": (_user({"type": "video_url", "video_url": {"url": "https://x"}}), 400, "invalid_request"),
    "a part that is not an object": (_user("image"), 400, "invalid_request"),
    "file_id": (_user({"type": "file", "file": {"file_id": "file-123"}}), 400, "file_id_unsupported"),
    "image_url not a string": (_user({"type": "image_url", "image_url": {"url": 5}}), 400, "invalid_request"),
    "declared pdf, sent png": (
        _user({"type": "file", "file": {"file_data": _data_url(samples.png(), "application/pdf"), "filename": "a"}}),
        400,
        "attachment_mismatch",
    ),
    "image_url holding a pdf": (
        _user(_image_url(_data_url(b"%PDF-1.4\n%%EOF\n"))),
        400,
        "attachment_mismatch",
    ),
    "audio format mp3, sent wav": (
        _user(
            {"type": "input_audio", "input_audio": {"data": base64.b64encode(samples.wav()).decode(), "format": "mp3"}}
        ),
        400,
        "attachment_extension",
    ),
    "an image in a system message": (
        {"role": "system", "content": [_image_url(_data_url(samples.png()))]},
        400,
        "invalid_request",
    ),
    "only an empty part list": ({"role": "user", "content": []}, 400, "invalid_request"),
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("case", V1_PARTS)
def test_v1_answers_each_bad_part_with_a_4xx_in_openais_shape(stored, settings, alice, agent, no_enqueue, case):
    message, status, code = V1_PARTS[case]
    messages = [message] if message["role"] == "user" else [message, {"role": "user", "content": "hi"}]
    response = _v1(alice, {"model": agent.slug, "messages": messages})
    assert response.status_code == status, (case, response.content[:300])
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", code), error
    assert error["message"] and error["param"].startswith("messages"), error
    assert not Run.objects.exists()
