import json

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection

from audit.models import ConfigChange
from workspaces.defaults import default_workspace_id


@pytest.fixture(autouse=True)
def first_workspace(request):
    """The installation's first workspace, there before the test (a committing test's flush empties
    the table, and the first configuration object saved would make it again, a row of its own):
    the tests here count the rows of what they change."""
    marker = request.node.get_closest_marker("django_db")
    if marker is None:
        return
    request.getfixturevalue("transactional_db" if marker.kwargs.get("transaction") else "db")
    default_workspace_id()
    ConfigChange.objects.filter(content_type__app_label="workspaces").delete()


@pytest.fixture
def superuser(client):
    user = User.objects.create_superuser(username="root", password="pw")
    # Joining the first workspace is a row of its own (workspaces.membership).
    ConfigChange.objects.all().delete()
    client.force_login(user)
    return user


def staff_with(*codenames: str) -> User:
    user = User.objects.create_user(username=f"staff-{len(codenames)}-{'-'.join(codenames)}"[:150], is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return user


def audit_text() -> str:
    """Every audit row, every column, as text: what a secret must never be found in."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {ConfigChange._meta.db_table}")
        return json.dumps(cursor.fetchall(), default=str, ensure_ascii=False)


def stored(model, pk, column: str) -> str:
    """A column as the database holds it (ciphertext for an encrypted field)."""
    with connection.cursor() as cursor:
        cursor.execute(f'SELECT "{column}" FROM {model._meta.db_table} WHERE id = %s', [pk])
        return cursor.fetchone()[0]
