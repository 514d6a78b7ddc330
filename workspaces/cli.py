"""The command line's `--workspace SLUG`: a management command that reads or exports data, given
one, reads and acts in that workspace only (its rows narrowed by workspaces.access.of_workspace,
as in_workspace narrows a member's); without it, the whole installation, as the database's own
credentials allow (docs/workspaces.md)."""

from django.core.management.base import CommandError
from django.utils.translation import gettext as _

from workspaces.defaults import default_workspace_id
from workspaces.models import Workspace

# For a command that looks configuration up by name (names are a workspace's): which workspace.
NAMES_HELP = "the workspace's slug, whose names are meant (default: the installation's first workspace)"


def workspace_argument_add(parser, *, rows: str) -> None:
    parser.add_argument(
        "--workspace",
        default="",
        metavar="SLUG",
        help=f"only this workspace's {rows} (its slug); default: the whole installation's",
    )


def workspace_argument(slug: str) -> Workspace | None:
    """The workspace `--workspace` names (None when not given); an unknown slug is a CommandError."""
    if not slug:
        return None
    workspace = Workspace.objects.filter(slug=slug).first()
    if workspace is None:
        raise CommandError(_("--workspace: no workspace has the slug %(slug)r.") % {"slug": slug})
    return workspace


def workspace_id_or_first(slug: str | None) -> int:
    """The id of the workspace `--workspace` names; not given, the installation's first. For a
    command that looks a tool, model config or suite up by name (names are a workspace's)."""
    workspace = workspace_argument(slug or "")
    return default_workspace_id() if workspace is None else workspace.pk
