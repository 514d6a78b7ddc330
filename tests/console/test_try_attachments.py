"""The try page's attachments on the real database: a file uploaded for the chosen agent and end
user, named by the message sent through admission (the run's user message carries it); another
staff member's or another end user's attachment refused; bad files, blank messages and too many
attachments a clear 400."""

import uuid

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from attachments.models import Attachment, AttachmentUse
from conversations.models import Message, Run
from tests.attachments import samples
from tests.support.factories import ModelConfigFactory, make_agent

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def stored(settings, tmp_path):
    settings.STORAGES = {
        **settings.STORAGES,
        "attachments": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(tmp_path / "attachments")},
        },
    }


def _attach(client, agent, data=None, name="photo.png", end_user=""):
    file = SimpleUploadedFile(name, samples.png() if data is None else data, content_type="image/png")
    return client.post(reverse("monitoring:try-attach"), {"agent": agent.pk, "end_user": end_user, "file": file})


def _send(client, agent, content="what is this?", attachments=(), end_user=""):
    body = {"agent": agent.pk, "content": content, "end_user": end_user, "attachments": list(attachments)}
    return client.post(reverse("monitoring:try-send"), body)


def test_a_staff_member_sends_an_image_through_admission(client, staff, no_enqueue):
    agent = make_agent(model_config=ModelConfigFactory(input_kinds=["text", "image"]))
    uploaded = _attach(client, agent, samples.jpeg(exif=samples.gps_exif()), name="mug.jpg", end_user="eu-7")
    assert uploaded.status_code == 201, uploaded.content
    part = uploaded.json()
    assert (part["type"], part["media_type"], part["width"], part["name"]) == ("image", "image/jpeg", 40, "mug.jpg")
    attachment = Attachment.objects.get(pk=part["id"])
    assert (attachment.owner, attachment.end_user, attachment.workspace_id) == (staff, "eu-7", agent.workspace_id)

    sent = _send(client, agent, attachments=[part["id"]], end_user="eu-7")
    assert sent.status_code == 201, sent.content
    run = Run.objects.get(pk=sent.json()["run_id"])
    assert [use.attachment_id for use in AttachmentUse.objects.filter(run=run)] == [attachment.pk]
    assert Message.objects.get(run=run, role="user").parts[0]["attachment"] == part["id"]

    # A photo alone is a message; nothing at all is not.
    Run.objects.filter(pk=run.pk).update(status="completed")
    alone = _send(client, agent, content="", attachments=[part["id"]], end_user="eu-7")
    assert alone.status_code == 201, alone.content
    blank = _send(client, agent, content="  ")
    assert blank.status_code == 400 and blank.json()["message"].startswith("content:")


def test_another_end_users_or_staff_members_attachment_is_refused(client, staff, no_enqueue):
    agent = make_agent()
    theirs = _attach(client, agent, end_user="eu-a").json()["id"]
    as_another = _send(client, agent, attachments=[theirs], end_user="eu-b")
    assert as_another.status_code == 400 and theirs in as_another.json()["message"]

    colleague = get_user_model().objects.create_user("colleague", password="pw", is_staff=True)
    colleague.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="conversations", codename__in=["view_run", "add_run"])
    )
    client.force_login(colleague)
    refused = _send(client, agent, attachments=[theirs], end_user="eu-a")
    assert refused.status_code == 400 and theirs in refused.json()["message"]
    assert not Run.objects.exists()


@pytest.mark.parametrize(
    ("attachments", "message"),
    [(["not-a-uuid"], "Not an attachment's id"), ([str(uuid.uuid4())], "is not found")],
)
def test_bad_ids_are_400(client, staff, attachments, message):
    response = _send(client, make_agent(), attachments=attachments)
    assert response.status_code == 400 and message in response.json()["message"]


def test_too_many_attachments_are_refused(client, staff, settings):
    settings.AGENTRY_ATTACHMENTS_PER_MESSAGE = 1
    response = _send(client, make_agent(), attachments=[str(uuid.uuid4()), str(uuid.uuid4())])
    assert response.status_code == 400 and "at most 1 attachments" in response.json()["message"]


@pytest.mark.parametrize(
    ("data", "name", "status"),
    [(b"", "empty.png", 400), (samples.png(), "photo.pdf", 400), (b"<svg onload=x>", "a.svg", 400)],
)
def test_bad_files_are_refused(client, staff, data, name, status):
    response = _attach(client, make_agent(), data, name=name)
    assert response.status_code == status and response.json()["message"]
    assert not Attachment.objects.exists()


def test_an_upload_needs_one_file_and_an_agent_the_user_may_talk_to(client, staff, settings):
    agent = make_agent()
    url = reverse("monitoring:try-attach")
    assert client.post(url, {"agent": agent.pk}).status_code == 400
    assert client.post(url, {"agent": 10**9, "file": SimpleUploadedFile("a.png", samples.png())}).status_code == 404
    settings.AGENTRY_ATTACHMENT_MAX_BYTES = 10
    assert _attach(client, agent).status_code == 413


def test_the_page_offers_the_attach_button_with_the_limits(client, staff):
    page = client.get(reverse("monitoring:try")).content.decode()
    assert 'id="try-attach"' in page and 'data-per-message="10"' in page
