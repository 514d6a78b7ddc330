"""Model instances from rows read by raw SQL, for the hot reads where the ORM's statement
building would cost more than the query itself."""

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Model
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init


class Columns:
    """Some fields of a model read by raw SQL, made into instances as the ORM would (JSON parsed;
    on SQLite, UUIDs, datetimes and decimals converted); fields not read are deferred."""

    def __init__(self, model, fields: tuple[str, ...] | None, alias: str):
        """`fields` by name; None reads every column of the model."""
        self.model = model
        # In the model's order, which Model.from_db expects.
        self.fields = [field for field in model._meta.concrete_fields if fields is None or field.name in fields]
        self.columns = [field.get_col(model._meta.db_table) for field in self.fields]
        self.attnames = [field.attname for field in self.fields]
        self.sql = ", ".join(f'{alias}."{field.column}"' for field in self.fields)
        self._converters: dict[str, list] = {}
        # Whether Model.from_db and Model.__init__ are the model's own (they would be skipped).
        self._plain_class = model.__init__ is Model.__init__ and model.from_db.__func__ is Model.from_db.__func__
        self._direct = self._direct_builder()

    def instances(self, rows) -> list:
        connection = connections[DEFAULT_DB_ALIAS]
        converters = self._converters.get(connection.vendor)
        if converters is None:
            # The same per backend; they use the connection they are given, not the one that made them.
            converters = [
                (index, column, found)
                for index, column in enumerate(self.columns)
                if (found := connection.ops.get_db_converters(column) + column.get_db_converters(connection))
            ]
            self._converters[connection.vendor] = converters
        # Asked on each call, not once: a receiver may be connected after this was made.
        build = self._build()
        made = []
        for row in rows:
            values = list(row)
            for index, column, functions in converters:
                value = values[index]
                if value is not None:
                    for convert in functions:
                        value = convert(value, column, connection)
                    values[index] = value
            made.append(build(connection.alias, values))
        return made

    def _build(self):
        """How a row becomes an instance: Model.from_db, or the same done directly (_direct_builder),
        for a model that changes neither __init__ nor from_db and has no pre_init or post_init
        receiver, since those would be skipped."""
        model = self.model
        if not self._plain_class or pre_init.has_listeners(model) or post_init.has_listeners(model):
            return lambda alias, values: model.from_db(alias, self.attnames, values)
        return self._direct

    def _direct_builder(self):
        """Model.from_db's work, done directly.

        Model.__init__ takes some 18 µs for a run's 17 columns (it walks every field of the model,
        deferred or not, and sends pre_init and post_init); putting the values in the instance's
        __dict__ takes under 2. What it leaves is what from_db leaves: the columns read set, the
        others deferred (loaded when asked for, as after QuerySet.only()), the instance marked as
        read from this database."""
        model, attnames, new = self.model, self.attnames, self.model.__new__

        def build(alias, values):
            instance = new(model)
            state = instance._state = ModelState()
            state.adding, state.db = False, alias
            instance.__dict__.update(zip(attnames, values))
            return instance

        return build

    def instance(self, values):
        return self.instances([values])[0]
