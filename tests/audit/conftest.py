import json

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection

from audit.models import ConfigChange


@pytest.fixture
def superuser(client):
    user = User.objects.create_superuser(username="root", password="pw")
    # Joining the first workspace is a row of its own (workspaces.membership); the tests here
    # count the rows of what they change.
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
