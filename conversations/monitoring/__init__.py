"""Monitoring's share of the record: the hourly rollup tables and the task that refreshes them.
The pages that read them are the console's (console/monitoring)."""
