"""Model instances from rows read by raw SQL, for reads the ORM does not say in one statement
(a run with its conversation and messages, a row and the one it joins)."""

from django.db import DEFAULT_DB_ALIAS, connections


class Columns:
    """Some fields of a model read by raw SQL, made into instances as the ORM makes them: each
    value through the field's converters (JSON parsed; on SQLite, UUIDs, datetimes and decimals
    converted), then Model.from_db; fields not read are deferred."""

    def __init__(self, model, fields: tuple[str, ...] | None, alias: str):
        """`fields` by name; None reads every column of the model."""
        self.model = model
        # In the model's order, which Model.from_db expects.
        self.fields = [field for field in model._meta.concrete_fields if fields is None or field.name in fields]
        self.columns = [field.get_col(model._meta.db_table) for field in self.fields]
        self.attnames = [field.attname for field in self.fields]
        self.sql = ", ".join(f'{alias}."{field.column}"' for field in self.fields)

    def instances(self, rows) -> list:
        connection = connections[DEFAULT_DB_ALIAS]
        converters = [
            (index, column, found)
            for index, column in enumerate(self.columns)
            if (found := connection.ops.get_db_converters(column) + column.get_db_converters(connection))
        ]
        made = []
        for row in rows:
            values = list(row)
            for index, column, functions in converters:
                value = values[index]
                if value is not None:
                    for convert in functions:
                        value = convert(value, column, connection)
                    values[index] = value
            made.append(self.model.from_db(connection.alias, self.attnames, values))
        return made

    def instance(self, values):
        return self.instances([values])[0]
