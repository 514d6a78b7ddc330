"""The widget's attachments on the real database: an end user uploads with their token, names the
upload in a message (the run's user message carries it as a part, the conversation answers it
back) and downloads it again with the same token; another end user's id is refused in a message
and not found as a download; the limits and bad uploads are clear 4xx."""

import uuid

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from attachments.models import Attachment, AttachmentUse
from conversations.models import Message, Run
from tests.attachments import samples
from tests.support.factories import ModelConfigFactory, make_agent
from widgets.models import Widget
from widgets.tokens import end_user_token_sign

pytestmark = pytest.mark.django_db

SITE = "https://shop.example.com"


@pytest.fixture(autouse=True)
def stored(settings, tmp_path):
    settings.STORAGES = {
        **settings.STORAGES,
        "attachments": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(tmp_path / "attachments")},
        },
    }


@pytest.fixture
def widget():
    owner = User.objects.create_user("widget-owner", password="owner-pass-1")
    return Widget.objects.create(
        agent=make_agent(model_config=ModelConfigFactory(input_kinds=["text", "image"])),
        name="shop",
        secret="wsec_test-secret-of-the-widget-0123456789",
        owner=owner,
        allowed_origins=SITE,
    )


def _someone() -> str:
    # Unique per test: the minute windows of the limits live in Redis, across test runs.
    return f"eu-{uuid.uuid4().hex[:10]}"


def _client(widget, end_user: str | None = None, origin: str = SITE, **headers) -> Client:
    if end_user is not None:
        headers["HTTP_AUTHORIZATION"] = f"Bearer {end_user_token_sign(widget=widget, end_user=end_user)}"
    return Client(HTTP_ORIGIN=origin, **headers)


def _upload(widget, client, data: bytes, name: str = "photo.png"):
    return client.post(
        f"/api/v1/widget/{widget.pk}/attachments/", {"file": SimpleUploadedFile(name, data, content_type="image/png")}
    )


def _conversation(widget, client) -> str:
    response = client.post(f"/api/v1/widget/{widget.pk}/conversations/", {}, content_type="application/json")
    assert response.status_code == 201, response.content
    return response.json()["id"]


def _send(widget, client, conversation_id, content="what is this?", attachments=None):
    body = {"content": content}
    if attachments is not None:
        body["attachments"] = attachments
    url = f"/api/v1/widget/{widget.pk}/conversations/{conversation_id}/messages/"
    return client.post(url, body, content_type="application/json")


def test_an_end_user_uploads_sends_and_downloads_their_image(widget):
    alice = _someone()
    client = _client(widget, alice)
    uploaded = _upload(widget, client, samples.jpeg(exif=samples.gps_exif()), name="broken.jpg")
    assert uploaded.status_code == 201, uploaded.content
    assert uploaded["Access-Control-Allow-Origin"] == SITE
    part = uploaded.json()
    assert {key: part[key] for key in ("type", "media_type", "name", "width", "height")} == {
        "type": "image",
        "media_type": "image/jpeg",
        "name": "broken.jpg",
        "width": 40,
        "height": 30,
    }
    stored = Attachment.objects.get(pk=part["id"])
    assert (stored.owner_id, stored.end_user, stored.workspace_id) == (
        widget.owner_id,
        alice,
        widget.workspace_id,
    )

    conversation = _conversation(widget, client)
    sent = _send(widget, client, conversation, attachments=[part["id"]])
    assert sent.status_code == 202, sent.content
    run = Run.objects.get(pk=sent.json()["run"])
    assert [use.attachment_id for use in AttachmentUse.objects.filter(run=run)] == [stored.pk]
    message = Message.objects.get(run=run, role=Message.Role.USER)
    assert message.parts[0]["attachment"] == part["id"]

    state = client.get(f"/api/v1/widget/{widget.pk}/conversations/{conversation}/").json()
    assert state["messages"][0]["parts"][0]["attachment"] == part["id"]
    assert state["widget"]["attachments"]["per_message"] >= 1

    download = client.get(f"/api/v1/widget/{widget.pk}/attachments/{part['id']}/content/")
    assert download.status_code == 200
    assert download["Content-Disposition"].startswith("attachment;")
    assert download["X-Content-Type-Options"] == "nosniff"
    assert download["Access-Control-Allow-Origin"] == SITE
    assert b"PhoneMaker" not in b"".join(download.streaming_content)


def test_a_photo_alone_is_a_message_and_nothing_at_all_is_not(widget):
    client = _client(widget, _someone())
    part = _upload(widget, client, samples.png()).json()
    conversation = _conversation(widget, client)
    assert _send(widget, client, conversation, content="", attachments=[]).status_code == 400
    sent = _send(widget, client, conversation, content="", attachments=[part["id"]])
    assert sent.status_code == 202, sent.content
    state = client.get(f"/api/v1/widget/{widget.pk}/conversations/{conversation}/").json()
    assert [(m["content"], len(m["parts"])) for m in state["messages"]] == [("", 1)]


def test_another_end_users_attachment_is_refused_and_not_found(widget):
    alice, bob = _client(widget, _someone()), _client(widget, _someone())
    hers = _upload(widget, alice, samples.png()).json()["id"]
    conversation = _conversation(widget, bob)
    refused = _send(widget, bob, conversation, attachments=[hers])
    assert refused.status_code == 400
    assert hers in refused.json()["message"]
    assert not Run.objects.filter(conversation_id=conversation).exists()
    assert bob.get(f"/api/v1/widget/{widget.pk}/attachments/{hers}/content/").status_code == 404
    # No token, no bytes; and no upload from a site the widget does not allow.
    anonymous = Client(HTTP_ORIGIN=SITE)
    assert anonymous.get(f"/api/v1/widget/{widget.pk}/attachments/{hers}/content/").status_code == 401
    elsewhere = Client(HTTP_ORIGIN="https://evil.example.net")
    assert elsewhere.post(f"/api/v1/widget/{widget.pk}/attachments/", {}).status_code == 403


def test_an_unknown_or_malformed_id_is_a_clear_400(widget):
    client = _client(widget, _someone())
    conversation = _conversation(widget, client)
    for attachments in ([str(uuid.uuid4())], ["not-a-uuid"], "one", [{"id": 1}]):
        response = _send(widget, client, conversation, attachments=attachments)
        assert response.status_code == 400, (attachments, response.content)
        assert response.json()["message"]


def test_the_limits_are_refused_with_their_reason(widget, settings):
    client = _client(widget, _someone())
    conversation = _conversation(widget, client)
    settings.AGENTRY_ATTACHMENTS_PER_MESSAGE = 2
    too_many = _send(widget, client, conversation, attachments=[str(uuid.uuid4()) for _ in range(3)])
    assert too_many.status_code == 400
    assert "at most 2 attachments" in too_many.json()["message"]

    settings.AGENTRY_ATTACHMENT_MAX_BYTES = 100
    too_large = _upload(widget, client, samples.png(size=(300, 300), color=(1, 2, 3)) + b"\0" * 200)
    assert too_large.status_code == 413
    assert "at most 100 are accepted" in too_large.json()["message"]


@pytest.mark.parametrize(
    ("data", "name"),
    [(b"", "empty.png"), (samples.png()[:40], "cut.png"), (samples.png(), "photo.pdf"), (b"<svg onload=x>", "a.svg")],
)
def test_bad_uploads_are_400(widget, data, name):
    response = _upload(widget, _client(widget, _someone()), data, name=name)
    assert response.status_code == 400, response.content
    assert response.json()["message"]
    assert not Attachment.objects.exists()


def test_an_upload_needs_exactly_one_file(widget):
    client = _client(widget, _someone())
    url = f"/api/v1/widget/{widget.pk}/attachments/"
    assert client.post(url, {}).status_code == 400
    two = {"file": [SimpleUploadedFile("a.png", samples.png()), SimpleUploadedFile("b.png", samples.png())]}
    assert client.post(url, two).status_code == 400
    assert client.post(url, {"x": 1}, content_type="application/json").status_code == 415


def test_a_text_message_reads_no_attachment(widget):
    client = _client(widget, _someone())
    conversation = _conversation(widget, client)
    with CaptureQueriesContext(connection) as queries:
        assert _send(widget, client, conversation).status_code == 202
    assert not [q["sql"] for q in queries.captured_queries if "attachments_" in q["sql"]]
