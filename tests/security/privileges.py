"""Users holding exactly the permissions a test names, and admin form data built from a row."""

import json
import uuid

from django.contrib.auth.models import Permission, User
from django.forms.models import model_to_dict


def user_with(*permissions: str, staff: bool = True, superuser: bool = False) -> User:
    """A user with these "app_label.codename" permissions and nothing else."""
    user = User.objects.create_user(
        username=f"u-{uuid.uuid4().hex[:8]}", password="pw", is_staff=staff, is_superuser=superuser
    )
    for name in permissions:
        app_label, codename = name.split(".")
        user.user_permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))
    return User.objects.get(pk=user.pk)  # a fresh object: no cached permissions


def admin_form_data(instance, **changes) -> dict:
    """What the admin's change form would post for the row as it is, with `changes` applied."""
    data = {}
    for key, value in {**model_to_dict(instance), **changes}.items():
        if isinstance(value, (dict, list)):
            value = json.dumps(value)
        if isinstance(value, bool):
            if value:
                data[key] = "on"
            continue
        data[key] = "" if value is None else value
    return data
