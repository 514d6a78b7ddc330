from datetime import timedelta

from django.core.management.base import BaseCommand
from django.utils import timezone

from conversations.monitoring.rollups import rollups_refresh


class Command(BaseCommand):
    help = (
        "Rebuild the monitoring dashboard's hourly rollups now. Beat does this every "
        "AGENTRY_MONITOR_ROLLUP_SECONDS for recent hours; use --days to rebuild older ones."
    )

    def add_arguments(self, parser):
        parser.add_argument("--days", type=int, help="rebuild every hour of the last N days")

    def handle(self, *args, days=None, **options):
        since = timezone.now() - timedelta(days=days) if days else None
        self.stdout.write(str(rollups_refresh(since=since)))
