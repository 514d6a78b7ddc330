"""Rows read by raw SQL become the instances the ORM would make (platform_site.rows.Columns)."""

from decimal import Decimal

import pytest
from django.db import connection
from django.db.models.signals import post_init

from agents.models import Agent
from conversations.models import Run
from platform_site.rows import Columns
from tests.support.factories import make_agent
from tests.support.runs import start_run

pytestmark = pytest.mark.django_db


def _read(columns: Columns, pk) -> list:
    with connection.cursor() as cursor:
        cursor.execute(
            f'SELECT {columns.sql} FROM "{columns.model._meta.db_table}" r WHERE r."id" = %s',
            [columns.model._meta.pk.get_db_prep_value(pk, connection)],
        )
        return columns.instances(cursor.fetchall())


def _as_the_orm_reads(model, pk, fields):
    found = model.objects.filter(pk=pk)
    return found.only(*fields).get() if fields else found.get()


@pytest.mark.parametrize("fields", [None, ("id", "status", "cost", "deadline", "sandbox", "agent")])
def test_an_instance_is_what_the_orm_reads(fields):
    run = start_run(make_agent(run_cost_budget=Decimal("0.5")), "你好")
    columns = Columns(Run, fields, "r")
    (made,) = _read(columns, run.pk)
    expected = _as_the_orm_reads(Run, run.pk, fields)
    assert type(made) is Run and made.pk == run.pk
    assert made.__dict__.keys() - {"_state"} == expected.__dict__.keys() - {"_state"}
    assert {name: getattr(made, name) for name in columns.attnames} == {
        name: getattr(expected, name) for name in columns.attnames
    }
    assert made.get_deferred_fields() == expected.get_deferred_fields()
    assert (made._state.adding, made._state.db) == (False, "default")
    # A column not read loads when asked for, as after QuerySet.only(), and the relation works.
    assert made.conversation_id == run.conversation_id
    assert made.agent.pk == run.agent_id
    made.status = "cancelled"
    made.save(update_fields=["status"])
    assert Run.objects.get(pk=run.pk).status == "cancelled"


def test_a_post_init_receiver_sees_each_instance_made():
    agent = make_agent()
    seen = []

    def receiver(sender, instance, **kwargs):
        seen.append(instance)

    post_init.connect(receiver, sender=Agent)
    try:
        (made,) = _read(Columns(Agent, None, "r"), agent.pk)
    finally:
        post_init.disconnect(receiver, sender=Agent)
    assert seen == [made] and made.slug == agent.slug
