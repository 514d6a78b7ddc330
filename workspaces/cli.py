"""The command line's `--workspace SLUG`: a management command that reads or exports data, given
one, reads and acts in that workspace only (its rows narrowed by workspaces.access.of_workspace,
as in_workspace narrows a member's); without it, the whole installation, as the database's own
credentials allow (docs/workspaces.md)."""

from django.core.management.base import CommandError
from django.utils.translation import gettext as _

from workspaces.models import Workspace


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
