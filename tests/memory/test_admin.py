"""The operator's tool: an end user's memories listed with their source run, corrected or deleted
only with the matching permission, each change an audit row; the audit rows read-only."""

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from memory.models import Memory, MemoryChange
from memory.services import MemoryProposal, memory_apply
from tests.support.factories import make_agent, make_user
from tests.support.ledger import ledger_run
from workspaces.defaults import default_workspace_id

pytestmark = pytest.mark.django_db


def _operator(*codenames):
    user = make_user(staff=True)
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="memory", codename__in=codenames))
    return user


@pytest.fixture
def memory(owner):
    run = ledger_run(make_agent())
    memory_apply(
        workspace_id=default_workspace_id(),
        scope="agent:1",
        owner_id=owner.pk,
        end_user="u-42",
        proposals=[MemoryProposal("add", "fact", "住在成都")],
        source="extraction",
        kinds=[],
        ttl_days=None,
        run=run,
    )
    return Memory.objects.get()


def test_the_list_shows_an_end_user_s_memories_with_their_source_run(client, memory):
    client.force_login(_operator("view_memory", "view_memorychange"))

    page = client.get(reverse("admin:memory_memory_changelist"), {"q": "u-42"}).content.decode()
    assert "住在成都" in page and reverse("monitoring:run", args=[memory.source_run_id]) in page
    assert "住在成都" not in client.get(reverse("admin:memory_memory_changelist"), {"q": "u-4"}).content.decode()

    detail = client.get(reverse("admin:memory_memory_change", args=[memory.pk])).content.decode()
    assert "Extraction after a run" in detail  # its change, inline
    assert 'name="statement"' not in detail  # viewing is not correcting


def test_an_operator_with_the_change_permission_corrects_a_statement_with_an_audit_row(client, memory):
    operator = _operator("view_memory", "change_memory")
    client.force_login(operator)
    url = reverse("admin:memory_memory_change", args=[memory.pk])
    inline = {"changes-TOTAL_FORMS": 1, "changes-INITIAL_FORMS": 1}

    response = client.post(url, {"statement": "住在重庆", **inline})

    assert response.status_code == 302
    memory.refresh_from_db()
    assert memory.statement == "住在重庆"
    change = MemoryChange.objects.get(action="update")
    assert (change.source, change.before, change.after, change.changed_by) == (
        "operator",
        "住在成都",
        "住在重庆",
        operator,
    )

    refused = client.post(url, {"statement": "my password is hunter2", **inline})
    assert refused.status_code == 200 and "secrets" in refused.content.decode()
    memory.refresh_from_db()
    assert memory.statement == "住在重庆" and MemoryChange.objects.filter(action="update").count() == 1


def test_without_the_change_permission_a_statement_cannot_be_corrected(client, memory):
    client.force_login(_operator("view_memory"))

    response = client.post(reverse("admin:memory_memory_change", args=[memory.pk]), {"statement": "住在重庆"})

    assert response.status_code == 403
    memory.refresh_from_db()
    assert memory.statement == "住在成都" and not MemoryChange.objects.filter(action="update").exists()


def test_deleting_takes_the_delete_permission_and_leaves_an_audit_row(client, memory):
    url = reverse("admin:memory_memory_delete", args=[memory.pk])
    client.force_login(_operator("view_memory", "change_memory"))
    assert client.post(url, {"post": "yes"}).status_code == 403
    assert Memory.objects.exists()

    operator = _operator("view_memory", "delete_memory")
    client.force_login(operator)
    assert client.post(url, {"post": "yes"}).status_code == 302

    assert not Memory.objects.exists()
    change = MemoryChange.objects.get(action="delete")
    assert (change.source, change.before, change.changed_by) == ("operator", "住在成都", operator)


def test_the_bulk_delete_action_writes_an_audit_row_per_memory(client, memory, owner):
    memory_apply(
        workspace_id=default_workspace_id(),
        scope="agent:1",
        owner_id=owner.pk,
        end_user="u-42",
        proposals=[MemoryProposal("add", "preference", "喜欢喝茶")],
        source="tool",
        kinds=[],
        ttl_days=None,
    )
    client.force_login(_operator("view_memory", "delete_memory"))

    response = client.post(
        reverse("admin:memory_memory_changelist"),
        {"action": "delete_selected", "_selected_action": [str(m.pk) for m in Memory.objects.all()], "post": "yes"},
    )

    assert response.status_code == 302 and not Memory.objects.exists()
    assert sorted(MemoryChange.objects.filter(action="delete").values_list("before", flat=True)) == [
        "住在成都",
        "喜欢喝茶",
    ]


def test_nobody_adds_memories_and_the_audit_rows_are_read_only(admin_client, memory):
    assert admin_client.get(reverse("admin:memory_memory_add")).status_code == 403
    change = MemoryChange.objects.get()
    assert admin_client.get(reverse("admin:memory_memorychange_changelist")).status_code == 200
    page = admin_client.get(reverse("admin:memory_memorychange_change", args=[change.pk]))
    assert page.status_code == 200 and b'name="_save"' not in page.content
    assert admin_client.get(reverse("admin:memory_memorychange_add")).status_code == 403
    assert admin_client.post(reverse("admin:memory_memorychange_delete", args=[change.pk])).status_code == 403
