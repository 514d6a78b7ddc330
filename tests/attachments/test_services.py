"""Storing, deduplicating, limiting, linking and deleting attachments (attachments.services), and
the one rule of who reads one (attachments.selectors)."""

import hashlib
import io

import pytest
from django.contrib.auth.models import Permission
from PIL import Image

from attachments import services
from attachments.limits import per_message_check
from attachments.models import Attachment, AttachmentUse
from attachments.selectors import attachment_for, attachments_visible_to
from attachments.services import attachment_delete, attachment_read, attachment_store
from attachments.sniff import AttachmentRefused
from conversations.models import Conversation, Message
from engine.admission import message_submit
from tests.attachments import samples
from tests.attachments.conftest import files_in
from tests.support.factories import ModelConfigFactory, make_agent, make_user
from workspaces.defaults import default_workspace_id
from workspaces.membership import membership_set
from workspaces.models import Workspace
from workspaces.roles import Role

pytestmark = pytest.mark.django_db


@pytest.fixture
def workspace():
    return Workspace.objects.get(pk=default_workspace_id())


def _store(workspace, owner, data, name="a.png", end_user=""):
    return attachment_store(
        workspace=workspace, uploaded_by=owner, owner=owner, end_user=end_user, data=data, name=name
    )


def test_an_image_is_stored_once_per_identity_without_its_metadata(stored, workspace):
    owner = make_user()
    data = samples.jpeg(exif=samples.gps_exif())
    first = _store(workspace, owner, data, name="../IMG 1.jpg", end_user="eu-1")
    assert (first.kind, first.media_type, first.width, first.height) == ("image", "image/jpeg", 40, 30)
    assert first.name == "IMG 1.jpg" and first.uploaded_by == owner and first.end_user == "eu-1"
    kept = attachment_read(attachment=first)
    assert hashlib.sha256(kept).hexdigest() == first.sha256 and first.size == len(kept)
    assert b"PhoneMaker" not in kept and not Image.open(io.BytesIO(kept)).getexif()
    # The same bytes by the same identity: the same row, no second copy.
    again = _store(workspace, owner, data, name="other.jpg", end_user="eu-1")
    assert again.pk == first.pk and len(files_in(stored)) == 1
    # Another end user of the same owner is another person: their own copy.
    theirs = _store(workspace, owner, data, end_user="eu-2", name="x.jpg")
    assert theirs.pk != first.pk and len(files_in(stored)) == 2
    # The platform's own end users (no owner) dedupe too.
    platform = attachment_store(workspace=workspace, uploaded_by=None, owner=None, data=data, name="")
    assert attachment_store(workspace=workspace, uploaded_by=None, owner=None, data=data).pk == platform.pk


def test_a_concurrent_upload_of_the_same_bytes_finds_the_other_row(stored, workspace, monkeypatch):
    owner = make_user()
    first = _store(workspace, owner, samples.png())
    # As if the other upload committed between this one's look-up and its insert.
    real = services.attachment_identical
    calls = []

    def identical(**identity):
        calls.append(identity)
        return None if len(calls) == 1 else real(**identity)

    monkeypatch.setattr(services, "attachment_identical", identical)
    again = _store(workspace, owner, samples.png())
    assert again.pk == first.pk and len(calls) == 2
    assert Attachment.objects.count() == 1 and len(files_in(stored)) == 1


def test_limits_size_and_workspace_quota(stored, workspace, settings):
    owner = make_user()
    settings.AGENTRY_ATTACHMENT_MAX_BYTES = 100
    with pytest.raises(AttachmentRefused) as caught:
        _store(workspace, owner, b"x" * 101, name="a.txt")
    assert caught.value.code == "size"
    settings.AGENTRY_ATTACHMENT_MAX_BYTES = 10_000
    workspace.attachment_bytes_limit = 150
    workspace.save()
    _store(workspace, owner, b"a" * 100, name="a.txt")
    with pytest.raises(AttachmentRefused) as caught:
        _store(workspace, owner, b"b" * 100, name="b.txt")
    assert caught.value.code == "quota"
    settings.AGENTRY_ATTACHMENT_WORKSPACE_BYTES = 150
    workspace.attachment_bytes_limit = None
    workspace.save()
    with pytest.raises(AttachmentRefused):
        _store(workspace, owner, b"c" * 100, name="c.txt")
    assert Attachment.objects.count() == 1 and len(files_in(stored)) == 1


def test_a_refused_upload_leaves_no_bytes(stored, workspace):
    with pytest.raises(AttachmentRefused):
        _store(workspace, make_user(), samples.bomb_png(), name="big.png")
    assert files_in(stored) == [] and not Attachment.objects.exists()


def test_delete_takes_the_bytes_after_commit(stored, workspace, django_capture_on_commit_callbacks):
    attachment = _store(workspace, make_user(), samples.png())
    with django_capture_on_commit_callbacks(execute=True):
        attachment_delete(attachment=attachment)
    assert not Attachment.objects.exists() and files_in(stored) == []


def _conversation(agent, owner, end_user=""):
    return Conversation.objects.create(agent=agent, owner=owner, end_user=end_user)


def test_a_message_carries_its_identitys_attachments_as_parts(stored, workspace, django_capture_on_commit_callbacks):
    owner = make_user()
    # A model that takes files: otherwise the post is refused (engine.admission_parts).
    agent = make_agent(model_config=ModelConfigFactory(input_kinds=["text", "file"]))
    conversation = _conversation(agent, owner, end_user="eu-1")
    mine = [_store(workspace, owner, f"note {n}".encode(), name=f"{n}.txt", end_user="eu-1") for n in range(3)]
    with django_capture_on_commit_callbacks():
        run = message_submit(conversation=conversation, content="look", user=owner, attachments=mine).run
    message = Message.objects.get(run=run, role=Message.Role.USER)
    assert [part["attachment"] for part in message.parts] == [str(a.pk) for a in mine]
    assert message.parts[0] == {
        "type": "file",
        "attachment": str(mine[0].pk),
        "media_type": "text/plain",
        "name": "0.txt",
        "size": 6,
    }
    uses = AttachmentUse.objects.filter(run=run).order_by("position")
    assert [(use.attachment_id, use.position) for use in uses] == [(a.pk, n) for n, a in enumerate(mine)]
    others = _store(workspace, owner, b"theirs", name="t.txt", end_user="eu-2")
    with pytest.raises(AttachmentRefused) as caught:
        message_submit(
            conversation=_conversation(agent, owner, end_user="eu-1"), content="x", user=owner, attachments=[others]
        )
    assert caught.value.code == "identity"
    assert AttachmentUse.objects.count() == 3


def test_a_message_text_only_keeps_no_parts(stored, django_capture_on_commit_callbacks):
    owner, agent = make_user(), make_agent()
    with django_capture_on_commit_callbacks():
        run = message_submit(conversation=_conversation(agent, owner), content="hi", user=owner).run
    assert Message.objects.get(run=run).parts is None and run.request.parts is None


def test_the_count_per_message_is_checked(settings):
    settings.AGENTRY_ATTACHMENTS_PER_MESSAGE = 10
    per_message_check(10)
    with pytest.raises(AttachmentRefused) as caught:
        per_message_check(100)
    assert caught.value.code == "count"


def test_who_reads_an_attachment(stored, workspace):
    owner, stranger = make_user(), make_user()
    staff = make_user(staff=True)
    attachment = _store(workspace, owner, samples.png(), end_user="eu-1")
    assert attachment_for(user=owner, attachment_id=attachment.pk) == attachment
    assert attachment_for(user=owner, attachment_id=attachment.pk, end_user="eu-1") == attachment
    # Another end user of the same owner (a widget's token for them) does not read it.
    assert attachment_for(user=owner, attachment_id=attachment.pk, end_user="eu-2") is None
    assert attachment_for(user=stranger, attachment_id=attachment.pk) is None
    assert attachment_for(user=owner, attachment_id="not-a-uuid") is None
    # Staff who may read every conversation of the workspace read it; in another workspace, no one.
    assert attachment_for(user=staff, attachment_id=attachment.pk) is None
    membership_set(user=staff, workspace=workspace, role=Role.OPERATOR)
    staff = type(staff).objects.get(pk=staff.pk)
    assert attachment_for(user=staff, attachment_id=attachment.pk) == attachment
    other = Workspace.objects.create(name="Other", slug="other")
    membership_set(user=owner, workspace=other, role=Role.OWNER)
    from workspaces.access import Binding, workspace_bind

    workspace_bind(owner, Binding(workspace=other, role=Role.OWNER))
    assert not attachments_visible_to(user=owner).exists()
    assert Permission.objects.filter(codename="view_attachment").exists()
