import os

from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

# Only for the embedded stack on loopback (scripts/dev.sh), which the README logs into with it.
DEV_PASSWORD = "admin"


class Command(BaseCommand):
    help = "Create a superuser from AGENTRY_ADMIN_USERNAME / AGENTRY_ADMIN_PASSWORD if none exists yet."

    def add_arguments(self, parser):
        parser.add_argument(
            "--dev-default",
            action="store_true",
            help=f"Without AGENTRY_ADMIN_PASSWORD, use {DEV_PASSWORD!r}: for a stack on loopback only.",
        )

    def handle(self, *args, dev_default=False, **options):
        User = get_user_model()
        if User.objects.filter(is_superuser=True).exists():
            self.stdout.write("A superuser already exists; nothing to do.")
            return
        username = os.environ.get("AGENTRY_ADMIN_USERNAME") or "admin"
        password = os.environ.get("AGENTRY_ADMIN_PASSWORD", "")
        if not password:
            if not dev_default:
                # A deployment that forgot the variable must not come up with a guessable superuser.
                raise CommandError("Set AGENTRY_ADMIN_PASSWORD: the first superuser needs a password.")
            password = DEV_PASSWORD
            self.stdout.write(self.style.WARNING(f"Superuser password is {DEV_PASSWORD!r}: for this machine only."))
        else:
            try:
                validate_password(password, User(username=username))
            except ValidationError as exc:
                raise CommandError("AGENTRY_ADMIN_PASSWORD is too weak: " + " ".join(exc.messages)) from None
        User.objects.create_superuser(username=username, email="", password=password)
        self.stdout.write(self.style.SUCCESS(f"Superuser {username!r} created."))
