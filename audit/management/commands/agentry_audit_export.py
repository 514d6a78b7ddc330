from audit.export import config_change_lines
from audit.selectors import config_changes_for_export
from conversations.export_command import ExportCommand


class Command(ExportCommand):
    help = (
        "Export the configuration audit (every create, change and delete of a configuration object, "
        "secrets masked), oldest first: JSONL (one change a line) or CSV. Streamed from the database."
    )
    rows = "changes"
    agent_help = "only this agent's changes and its parts' (its slug)"

    def export_lines(self, filters):
        changes = config_changes_for_export(user=None, agent=filters.agent, since=filters.since, until=filters.until)
        # A workspace's changes: its objects', its own and its memberships' (ConfigChange.workspace).
        changes = self.scoped(changes)
        return config_change_lines(changes=changes, format=filters.format)
