"""The configuration audit as a file: JSONL (one change a line) or CSV (the changed fields as
JSON in one column), oldest first, streamed a page at a time (keyset pages by id, each its own
statement, so no cursor is held: it works through PgBouncer as the ledger's export does)."""

import csv
import io
import json
from collections.abc import Iterator

from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import F, QuerySet

from audit.models import ConfigChange

BATCH = 500
COLUMNS = (
    "id",
    "at",
    "action",
    "source",
    "object_type",
    "object_id",
    "object",
    "agent_id",
    "workspace_id",
    "user_id",
    "who",
    "api_token_id",
    "changes",
)
_LOOKUPS = {
    "id": "id",
    "at": "at",
    "action": "action",
    "source": "source",
    "object_type": "object_type",
    "object_id": "object_id",
    "object": "object_repr",
    "agent_id": "agent_id",
    "workspace_id": "workspace_id",
    "user_id": "actor_id",
    "who": "actor_label",
    "api_token_id": "api_token_id",
    "changes": "changes",
}
# A cell a spreadsheet would run as a formula (a prompt may start with "=") gets a leading "'".
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def config_change_records(*, changes: QuerySet[ConfigChange], batch_size: int = BATCH) -> Iterator[dict]:
    rows = changes.order_by("id").annotate(object_type=F("content_type__model"))
    rows = rows.annotate(object_app=F("content_type__app_label"))
    last = 0
    while True:
        page = list(rows.filter(id__gt=last).values(*_LOOKUPS.values(), "object_app")[:batch_size])
        for row in page:
            record = {column: row[lookup] for column, lookup in _LOOKUPS.items()}
            record["object_type"] = f"{row['object_app']}.{row['object_type']}"
            yield record
        if len(page) < batch_size:
            return
        last = page[-1]["id"]


def _cell(value):
    if isinstance(value, dict | list):
        value = json.dumps(value, ensure_ascii=False, cls=DjangoJSONEncoder)
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def config_change_lines(*, changes: QuerySet[ConfigChange], format: str) -> Iterator[str]:
    records = config_change_records(changes=changes)
    if format == "jsonl":
        for record in records:
            yield json.dumps(record, ensure_ascii=False, cls=DjangoJSONEncoder) + "\n"
        return
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(COLUMNS)
    for record in records:
        writer.writerow([_cell(record[column]) for column in COLUMNS])
        if buffer.tell() > 64 * 1024:
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue()
