import json

from django.core.management.base import BaseCommand

from engine.retention import retention_sweep


class Command(BaseCommand):
    help = (
        "Apply the retention policies now (beat does it daily): delete each agent's finished runs older than "
        "its retention days with all their rows, leaving a tombstone; clear expired idempotency keys; delete "
        "old finished webhook deliveries. --dry-run only reports what runs would be deleted."
    )

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="count, delete nothing")

    def handle(self, *args, dry_run=False, **options):
        self.stdout.write(json.dumps(retention_sweep(dry_run=dry_run), indent=2))
