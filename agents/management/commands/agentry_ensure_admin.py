import os

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create a superuser from AGENTRY_ADMIN_USERNAME / AGENTRY_ADMIN_PASSWORD if none exists yet."

    def handle(self, *args, **options):
        User = get_user_model()
        if User.objects.filter(is_superuser=True).exists():
            self.stdout.write("A superuser already exists; nothing to do.")
            return
        username = os.environ.get("AGENTRY_ADMIN_USERNAME", "admin")
        password = os.environ.get("AGENTRY_ADMIN_PASSWORD", "admin")
        User.objects.create_superuser(username=username, email="", password=password)
        self.stdout.write(self.style.SUCCESS(f"Superuser {username!r} created."))
