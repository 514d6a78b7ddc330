"""The export commands' common shape (agentry_export, agentry_audit_export): the same filters,
parsed by the API's own rule, and the lines streamed to standard output or a file. With
--workspace, one workspace's rows only, and its agents only for --agent (workspaces.cli)."""

from abc import ABC, abstractmethod
from collections.abc import Iterable

from django.core.management.base import BaseCommand, CommandError
from django.db.models import QuerySet

from agents.models import Agent
from conversations.export import FORMATS, ExportFilterError, ExportFilters, export_filters_parse
from workspaces.access import of_workspace
from workspaces.cli import workspace_argument, workspace_argument_add


class ExportCommand(BaseCommand, ABC):
    # What the filters select, for their help texts ("runs", "changes").
    rows = "rows"
    agent_help = "only this agent's rows (its slug)"
    # --workspace's, once parsed; None: the whole installation.
    workspace = None

    def add_arguments(self, parser):
        parser.add_argument("--format", choices=FORMATS, default="jsonl")
        parser.add_argument("--agent", default="", help=self.agent_help)
        parser.add_argument("--since", default="", help=f"{self.rows} made at or after this ISO 8601 date or time")
        parser.add_argument("--until", default="", help=f"{self.rows} made before this ISO 8601 date or time")
        parser.add_argument("--output", default="", help="write to this file instead of standard output")
        workspace_argument_add(parser, rows=self.rows)

    @abstractmethod
    def export_lines(self, filters: ExportFilters) -> Iterable[str]:
        """What the command exports, as lines of `filters.format`: of the installation, narrowed
        with `self.scoped` to --workspace's."""

    def scoped(self, queryset: QuerySet) -> QuerySet:
        """`queryset` narrowed to --workspace's rows; all of them without it."""
        return queryset if self.workspace is None else of_workspace(queryset, self.workspace.pk)

    def handle(self, *args, format, agent, since, until, output, workspace="", **options):
        self.workspace = workspace_argument(workspace)
        try:
            filters = export_filters_parse(
                format=format, agent=agent, since=since, until=until, agents=self.scoped(Agent.objects.all())
            )
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
