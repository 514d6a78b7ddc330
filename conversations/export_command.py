"""The export commands' common shape (agentry_export, agentry_audit_export): the same filters,
parsed by the API's own rule, and the lines streamed to standard output or a file."""

from abc import ABC, abstractmethod
from collections.abc import Iterable

from django.core.management.base import BaseCommand, CommandError

from conversations.export import FORMATS, ExportFilterError, ExportFilters, export_filters_parse


class ExportCommand(BaseCommand, ABC):
    # What the filters select, for their help texts ("runs", "changes").
    rows = "rows"
    agent_help = "only this agent's rows (its slug)"

    def add_arguments(self, parser):
        parser.add_argument("--format", choices=FORMATS, default="jsonl")
        parser.add_argument("--agent", default="", help=self.agent_help)
        parser.add_argument("--since", default="", help=f"{self.rows} made at or after this ISO 8601 date or time")
        parser.add_argument("--until", default="", help=f"{self.rows} made before this ISO 8601 date or time")
        parser.add_argument("--output", default="", help="write to this file instead of standard output")

    @abstractmethod
    def export_lines(self, filters: ExportFilters) -> Iterable[str]:
        """What the command exports, as lines of `filters.format`."""

    def handle(self, *args, format, agent, since, until, output, **options):
        try:
            filters = export_filters_parse(format=format, agent=agent, since=since, until=until)
        except ExportFilterError as exc:
            raise CommandError(f"--{exc.param}: {exc.message}") from None
        lines = self.export_lines(filters)
        if not output:
            for chunk in lines:
                self.stdout.write(chunk, ending="")
            return
        # newline="" keeps the CSV's own line ends (RFC 4180's CRLF) as written.
        with open(output, "w", encoding="utf-8", newline="") as target:
            for chunk in lines:
                target.write(chunk)
