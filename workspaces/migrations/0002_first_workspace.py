"""An installation upgraded to workspaces gets one that owns everything, and every existing
account joins it with the custom role (its own Django permissions, exactly as before)."""

from django.conf import settings
from django.db import migrations


def first_workspace(apps, schema_editor):
    Workspace = apps.get_model("workspaces", "Workspace")
    Membership = apps.get_model("workspaces", "Membership")
    User = apps.get_model(*settings.AUTH_USER_MODEL.split("."))
    workspace, _ = Workspace.objects.get_or_create(slug="default", defaults={"name": "Default"})
    Membership.objects.bulk_create(
        [
            Membership(workspace=workspace, user_id=user_id, role="custom")
            for user_id in User.objects.values_list("pk", flat=True)
        ],
        ignore_conflicts=True,
    )


def no_workspace(apps, schema_editor):
    # The tables themselves go with 0001's reversal; nothing else points here yet.
    apps.get_model("workspaces", "Membership").objects.all().delete()


class Migration(migrations.Migration):
    dependencies = [
        ("workspaces", "0001_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [migrations.RunPython(first_workspace, no_workspace)]
