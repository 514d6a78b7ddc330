"""Migration operations that keep a large database serving while they run.

An index added to a ledger table of millions of rows by a plain CREATE INDEX holds a lock that
blocks every write to the table until it is built (minutes at tens of millions of rows): every
run in flight would stall. On PostgreSQL AddIndexOnline builds it CONCURRENTLY, which lets
writes go on; elsewhere (the embedded SQLite default) it is a plain AddIndex.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db.migrations.operations import AddIndex


class AddIndexOnline(AddIndexConcurrently):
    """AddIndex, built without blocking writes on PostgreSQL. The migration that holds it must
    declare `atomic = False` (CREATE INDEX CONCURRENTLY cannot run inside a transaction). If a
    concurrent build fails it leaves an INVALID index behind; running the migration again
    drops nothing, so drop that index by hand first (docs/deployment.md, "Upgrading a large
    ledger")."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_forwards(app_label, schema_editor, from_state, to_state)
        else:
            AddIndex.database_forwards(self, app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)
        else:
            AddIndex.database_backwards(self, app_label, schema_editor, from_state, to_state)
