"""The workspace an object joins when saved without one: the installation's first.

An installation upgraded to workspaces has one workspace that owns everything; code that creates
a configuration object without naming a workspace (an older script, a fixture, the demo) keeps
working and puts it there. Forms and the API name the workspace the request acts in."""

from django.db import connection
from django.db.models.signals import pre_save

from workspaces.models import Workspace


def default_workspace_id() -> int:
    # Plain SQL: this also runs inside the migrations that add `workspace` columns, where the
    # current Workspace model may have columns the table does not have yet.
    with connection.cursor() as cursor:
        cursor.execute('SELECT "id" FROM "workspaces_workspace" ORDER BY "id" LIMIT 1')
        row = cursor.fetchone()
    if row is not None:
        return row[0]
    # Only an emptied database gets here (a test's flush): the migration made one.
    return Workspace.objects.get_or_create(slug="default", defaults={"name": "Default"})[0].pk


def _first_workspace_fill(sender, instance, raw=False, **kwargs):
    if instance.workspace_id is None and not raw:
        instance.workspace_id = default_workspace_id()


def first_workspace_fill_connect(models) -> None:
    """Saving one of these models without a workspace puts it in the first workspace."""
    for model in models:
        pre_save.connect(_first_workspace_fill, sender=model, dispatch_uid=f"first_workspace_fill:{model._meta.label}")


class FirstWorkspaceByDefault:
    """For a model with its own `workspace`: full_clean() of an object without one validates it
    as saving it would store it, in the first workspace, instead of refusing the empty field.
    (A form that leaves the field out, or empty, excludes it and the pre_save fill applies.)"""

    def clean_fields(self, exclude=None):
        if self.workspace_id is None and (exclude is None or "workspace" not in exclude):
            self.workspace_id = default_workspace_id()
        super().clean_fields(exclude=exclude)
