from conversations.export import ledger_export_lines
from conversations.export_command import ExportCommand
from conversations.selectors import runs_for_export


class Command(ExportCommand):
    help = (
        "Export runs with their model calls, tool invocations, approvals and events, oldest first: "
        "JSONL (one run per line, its rows nested) or CSV (one row per ledger row, with a kind column). "
        "Streamed from the database, so any number of runs fits in memory."
    )
    rows = "runs"
    agent_help = "only this agent's runs (its slug)"

    def export_lines(self, filters):
        runs = self.scoped(runs_for_export(agent=filters.agent, since=filters.since, until=filters.until))
        # Run by the operator at the machine, who reads the agents' configuration anyway.
        return ledger_export_lines(runs=runs, format=filters.format, requests=True)
