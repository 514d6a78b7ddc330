"""Operators open the runs whose messages carry attachments, so their group may download them
(the console's download asks attachments.view_attachment, as the admin's list does)."""

from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType

from attachments.models import Attachment
from conversations.permissions import OPERATORS_GROUP

VIEW_PERMISSION = "attachments.view_attachment"


def operators_see_attachments() -> Group:
    content_type = ContentType.objects.get_for_model(Attachment)
    permission, _ = Permission.objects.get_or_create(
        content_type=content_type, codename="view_attachment", defaults={"name": "Can view attachment"}
    )
    group, _ = Group.objects.get_or_create(name=OPERATORS_GROUP)
    group.permissions.add(permission)
    return group
