"""Attachments leave with what used them: the ledger's purge takes their uses, the daily sweep
the attachments no message uses any more, and forgetting an end user theirs, bytes included."""

from datetime import timedelta

import pytest
from django.utils import timezone

from attachments.models import Attachment, AttachmentUse
from attachments.retention import attachments_unused_expire
from attachments.services import attachment_store, attachment_uses
from conversations.end_users import EndUser
from conversations.models import Conversation, Message, Run
from conversations.retention import runs_purge
from engine.retention import retention_sweep
from memory.forget import end_user_forget
from tests.attachments import samples
from tests.attachments.conftest import files_in
from tests.support.factories import make_agent, make_user
from tests.support.ledger import ledger_run

pytestmark = pytest.mark.django_db
LONG_AGO = timezone.now() - timedelta(days=30)


def _store(owner, data, end_user="", name="a.png", agent=None):
    return attachment_store(
        workspace=agent.workspace, uploaded_by=owner, owner=owner, end_user=end_user, data=data, name=name
    )


def _aged(*attachments):
    Attachment.objects.filter(pk__in=[a.pk for a in attachments]).update(created_at=LONG_AGO)


def _sent(run, attachment, end_user=""):
    Conversation.objects.filter(pk=run.conversation_id).update(owner=attachment.owner, end_user=end_user)
    run.conversation.refresh_from_db()
    message = Message.objects.create(
        conversation=run.conversation, run=run, order=0, role=Message.Role.USER, content="see"
    )
    conversation = run.conversation
    AttachmentUse.objects.bulk_create(
        attachment_uses(
            run=run,
            workspace_id=conversation.agent.workspace_id,
            owner_id=conversation.owner_id,
            end_user=conversation.end_user,
            attachments=[attachment],
        )
    )
    return message


def test_the_sweep_deletes_unused_attachments_once_old_enough(stored, django_capture_on_commit_callbacks):
    agent, owner = make_agent(), make_user()
    unused, fresh, used = (_store(owner, samples.png(color=(n, 0, 0)), agent=agent) for n in (1, 2, 3))
    _sent(ledger_run(agent), used)
    _aged(unused, used)
    with django_capture_on_commit_callbacks(execute=True):
        assert attachments_unused_expire() == {"attachments": 1}
    assert set(Attachment.objects.values_list("pk", flat=True)) == {fresh.pk, used.pk}
    assert len(files_in(stored)) == 2


def test_a_purge_takes_the_uses_and_the_sweep_then_the_bytes(stored, django_capture_on_commit_callbacks):
    agent, owner = make_agent(retention_days=7), make_user()
    attachment = _store(owner, samples.png(), agent=agent)
    run = ledger_run(agent, created_at=LONG_AGO, finished_at=LONG_AGO)
    _sent(run, attachment)
    _aged(attachment)
    with django_capture_on_commit_callbacks(execute=True):
        summary = retention_sweep()
    assert summary["purged"][agent.slug]["runs"] == 1 and summary["attachments"] == 1
    assert not Run.objects.exists() and not AttachmentUse.objects.exists() and not Attachment.objects.exists()
    assert files_in(stored) == []


def test_a_dry_purge_keeps_everything(stored):
    agent, owner = make_agent(retention_days=7), make_user()
    attachment = _store(owner, samples.png(), agent=agent)
    _sent(ledger_run(agent, created_at=LONG_AGO, finished_at=LONG_AGO), attachment)
    assert runs_purge(agent=agent, dry_run=True).counts["runs"] == 1
    assert AttachmentUse.objects.count() == 1 and len(files_in(stored)) == 1


def test_forgetting_an_end_user_deletes_their_attachments_and_bytes(stored, django_capture_on_commit_callbacks):
    agent, owner = make_agent(), make_user()
    used = _store(owner, samples.png(), end_user="eu-1", agent=agent)
    unsent = _store(owner, b"my address is ...", end_user="eu-1", name="note.txt", agent=agent)
    someone_else = _store(owner, samples.png(), end_user="eu-2", agent=agent)
    _sent(ledger_run(agent), used, end_user="eu-1")
    with django_capture_on_commit_callbacks(execute=True):
        erasure = end_user_forget(person=EndUser(owner.pk, "eu-1"), requested_by=owner, channel="api")
    assert erasure.counts["attachments_deleted"] == 2
    assert list(Attachment.objects.values_list("pk", flat=True)) == [someone_else.pk]
    assert len(files_in(stored)) == 1
    assert unsent.pk not in set(Attachment.objects.values_list("pk", flat=True))
