"""The workspace a management command acts in, named by its --workspace option."""

from django.core.management.base import CommandError
from django.utils.translation import gettext as _

from workspaces.defaults import default_workspace_id
from workspaces.models import Workspace

WORKSPACE_HELP = "the workspace's slug, whose names are meant (default: the installation's first workspace)"


def command_workspace_id(slug: str | None) -> int:
    """The id of the workspace of that slug; None: the installation's first. Names of tools, model
    configs, suites and the like are a workspace's, so a command looking one up needs it."""
    if not slug:
        return default_workspace_id()
    found = Workspace.objects.filter(slug=slug).values_list("pk", flat=True).first()
    if found is None:
        raise CommandError(_("No workspace %(slug)r.") % {"slug": slug})
    return found
