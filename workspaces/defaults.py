"""The workspace an object joins when saved without one: the installation's first.

An installation upgraded to workspaces has one workspace that owns everything; code that creates
a configuration object without naming a workspace (an older script, a fixture, the demo) keeps
working and puts it there. Forms and the API name the workspace the request acts in."""

from django.db import connection, models
from django.utils.translation import gettext_lazy as _

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


class InWorkspace(models.Model):
    """A configuration object owned by one workspace (its `workspace`). Saved or validated
    without one, it is the installation's first: code that names no workspace (an older script,
    a fixture, the demo) keeps working as before workspaces. Forms and the API name the
    workspace the request acts in."""

    workspace = models.ForeignKey(
        "workspaces.Workspace",
        on_delete=models.PROTECT,
        # Blank passes validation: the first workspace is filled in below.
        blank=True,
        related_name="+",
        verbose_name=_("workspace"),
    )

    class Meta:
        abstract = True

    def save(self, *args, **kwargs):
        if self.workspace_id is None:
            self.workspace_id = default_workspace_id()
        super().save(*args, **kwargs)

    def clean_fields(self, exclude=None):
        # Validated as it will be stored, so clean() can check its references' workspace.
        if self.workspace_id is None and (exclude is None or "workspace" not in exclude):
            self.workspace_id = default_workspace_id()
        super().clean_fields(exclude=exclude)
