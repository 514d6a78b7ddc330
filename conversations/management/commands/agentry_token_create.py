from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils.translation import gettext as _

from conversations.tokens import TokenGrantRefused, api_token_create, api_token_grant_check
from workspaces.models import Workspace


class Command(BaseCommand):
    help = (
        "Mint an API token of USER acting in one workspace, with a narrower role or a list of scopes if given; "
        "prints the secret once. --by names who asks (default: USER): a member of the workspace, its owner "
        "for another member's token."
    )

    def add_arguments(self, parser):
        parser.add_argument("user", help="username of the token's user")
        parser.add_argument("--name", default="cli", help="the token's name")
        parser.add_argument("--workspace", required=True, help="the workspace's slug")
        parser.add_argument("--role", default="", help="owner, builder, operator, approver or viewer")
        parser.add_argument("--scopes", default="", help="comma-separated: runs, approvals, memories, admin-read")
        parser.add_argument("--by", default="", help="username of the member who asks (default: USER)")

    def handle(self, *args, user, name, workspace, role, scopes, by, **options):
        users = get_user_model().objects
        found = users.filter(username=user, is_active=True).first()
        creator = users.filter(username=by, is_active=True).first() if by else found
        if found is None or creator is None:
            raise CommandError(_("No active user %(user)r.") % {"user": by if found else user})
        place = Workspace.objects.filter(slug=workspace).first()
        if place is None:
            raise CommandError(_("No workspace %(slug)r.") % {"slug": workspace})
        listed = [scope.strip() for scope in scopes.split(",") if scope.strip()]
        try:
            api_token_grant_check(creator=creator, user=found, workspace=place, role=role, scopes=listed)
        except TokenGrantRefused as exc:
            raise CommandError(str(exc)) from None
        _token, plaintext = api_token_create(user=found, name=name, workspace=place, role=role, scopes=listed)
        self.stdout.write(plaintext)
