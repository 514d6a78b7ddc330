"""Operators watch the dashboard that alert firings head, so their group may see firings.
Configuring rules (who gets paged, at what threshold) stays a grant of its own."""

from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType

from alerts.models import AlertFiring
from conversations.permissions import OPERATORS_GROUP

VIEW_FIRINGS_PERMISSION = "alerts.view_alertfiring"


def operators_see_firings() -> Group:
    content_type = ContentType.objects.get_for_model(AlertFiring)
    permission, _ = Permission.objects.get_or_create(
        content_type=content_type, codename="view_alertfiring", defaults={"name": "Can view alert firing"}
    )
    group, _ = Group.objects.get_or_create(name=OPERATORS_GROUP)
    group.permissions.add(permission)
    return group
