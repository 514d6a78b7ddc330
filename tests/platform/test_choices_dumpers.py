"""A PostgreSQL connection sends the models' choices as their plain type is sent, found at once
(platform_site.postgresql.base.choices_dumpers_register)."""

import pytest
from django.db import connection
from django.db.models.enums import Choices
from psycopg.adapt import AdaptersMap, PyFormat

from conversations.models import Message, RunStatus
from platform_site.postgresql.base import _subclasses, choices_dumpers_register

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql", reason="psycopg's adapters")


def _choices():
    return [cls for cls in _subclasses(Choices) if cls.__members__ and issubclass(cls, (str, int))]


@pytest.mark.django_db
def test_every_choices_class_has_its_plain_types_dumpers_on_a_connection():
    connection.ensure_connection()
    adapters = connection.connection.adapters
    assert RunStatus in _choices() and Message.Role in _choices()
    for cls in _choices():
        plain = str if issubclass(cls, str) else int
        for format_ in PyFormat:
            # Registered for the class itself, not found through its bases.
            assert adapters._dumpers[format_][cls] is adapters.get_dumper(plain, format_), (cls, format_)


def test_registering_leaves_every_other_type_as_it_was():
    from psycopg import adapters as global_adapters

    adapters = AdaptersMap(global_adapters)
    before = {(cls, format_): adapters.get_dumper(cls, format_) for cls in (str, int, bool) for format_ in PyFormat}
    choices_dumpers_register(adapters)
    assert before == {key: adapters.get_dumper(*key) for key in before}
    assert adapters.get_dumper(RunStatus, PyFormat.BINARY) is adapters.get_dumper(str, PyFormat.BINARY)


@pytest.mark.django_db
def test_a_choice_is_sent_as_its_value():
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s::text, %s::text = 'queued', %s::int", [RunStatus.QUEUED, RunStatus.QUEUED, 7])
        assert cursor.fetchone() == ("queued", True, 7)
