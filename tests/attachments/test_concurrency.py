"""Two uploads of the same bytes at once, by the same identity, in two real transactions on
PostgreSQL: both pass the look-up for an identical attachment, and the unique constraint leaves
one row and one copy of the bytes, which both answer."""

import threading

import pytest
from django.db import connection, connections

from attachments import services
from attachments.models import Attachment
from tests.attachments import samples
from tests.attachments.conftest import files_in
from tests.support.factories import make_user
from workspaces.defaults import default_workspace_id
from workspaces.models import Workspace


@pytest.mark.django_db(transaction=True)
def test_concurrent_identical_uploads_store_one_copy(stored, monkeypatch):
    if connection.vendor != "postgresql":
        pytest.skip("two writers at once need PostgreSQL")
    workspace = Workspace.objects.get(pk=default_workspace_id())
    owner = make_user()
    real = services.attachment_identical
    both_looked = threading.Barrier(2, timeout=30)
    looks = []

    def identical(**identity):
        found = real(**identity)
        looks.append(found)
        if len(looks) <= 2:
            both_looked.wait()  # neither has written its row yet
        return found

    monkeypatch.setattr(services, "attachment_identical", identical)
    results, errors = [], []

    def upload():
        try:
            results.append(
                services.attachment_store(
                    workspace=workspace, uploaded_by=owner, owner=owner, data=samples.png(), name="a.png"
                ).pk
            )
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=upload) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    assert looks[:2] == [None, None]
    assert len(results) == 2 and results[0] == results[1]
    assert Attachment.objects.count() == 1 and len(files_in(stored)) == 1
