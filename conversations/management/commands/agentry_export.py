from django.core.management.base import BaseCommand, CommandError

from conversations.export import FORMATS, ExportFilterError, export_filters_parse, ledger_export_lines
from conversations.selectors import runs_for_export


class Command(BaseCommand):
    help = (
        "Export runs with their model calls, tool invocations, approvals and events, oldest first: "
        "JSONL (one run per line, its rows nested) or CSV (one row per ledger row, with a kind column). "
        "Streamed from the database, so any number of runs fits in memory."
    )

    def add_arguments(self, parser):
        parser.add_argument("--format", choices=FORMATS, default="jsonl")
        parser.add_argument("--agent", default="", help="only this agent's runs (its slug)")
        parser.add_argument("--since", default="", help="runs created at or after this ISO 8601 date or time")
        parser.add_argument("--until", default="", help="runs created before this ISO 8601 date or time")
        parser.add_argument("--output", default="", help="write to this file instead of standard output")

    def handle(self, *args, format, agent, since, until, output, **options):
        try:
            filters = export_filters_parse(format=format, agent=agent, since=since, until=until)
        except ExportFilterError as exc:
            raise CommandError(f"--{exc.param}: {exc.message}") from None
        runs = runs_for_export(agent=filters.agent, since=filters.since, until=filters.until)
        # Run by the operator at the machine, who reads the agents' configuration anyway.
        lines = ledger_export_lines(runs=runs, format=filters.format, requests=True)
        if not output:
            for chunk in lines:
                self.stdout.write(chunk, ending="")
            return
        # newline="" keeps the CSV's own line ends (RFC 4180's CRLF) as written.
        with open(output, "w", encoding="utf-8", newline="") as target:
            for chunk in lines:
                target.write(chunk)
