from django.core.management.base import BaseCommand, CommandError

from audit.export import config_change_lines
from audit.selectors import config_changes_for_export
from conversations.export import FORMATS, ExportFilterError, export_filters_parse


class Command(BaseCommand):
    help = (
        "Export the configuration audit (every create, change and delete of a configuration object, "
        "secrets masked), oldest first: JSONL (one change a line) or CSV. Streamed from the database."
    )

    def add_arguments(self, parser):
        parser.add_argument("--format", choices=FORMATS, default="jsonl")
        parser.add_argument("--agent", default="", help="only this agent's changes and its parts' (its slug)")
        parser.add_argument("--since", default="", help="changes made at or after this ISO 8601 date or time")
        parser.add_argument("--until", default="", help="changes made before this ISO 8601 date or time")
        parser.add_argument("--output", default="", help="write to this file instead of standard output")

    def handle(self, *args, format, agent, since, until, output, **options):
        try:
            filters = export_filters_parse(format=format, agent=agent, since=since, until=until)
        except ExportFilterError as exc:
            raise CommandError(f"--{exc.param}: {exc.message}") from None
        changes = config_changes_for_export(agent=filters.agent, since=filters.since, until=filters.until)
        lines = config_change_lines(changes=changes, format=filters.format)
        if not output:
            for chunk in lines:
                self.stdout.write(chunk, ending="")
            return
        with open(output, "w", encoding="utf-8", newline="") as target:
            for chunk in lines:
                target.write(chunk)
