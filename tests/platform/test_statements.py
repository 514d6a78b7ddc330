"""Statements built once and then bound: what they bind is what the ORM builds, and a value the
ORM would not pass as a parameter is refused rather than bound wrongly."""

import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from conversations.models import Conversation
from platform_site import statements
from tests.support.factories import make_agent, make_user
from tests.support.runs import start_run

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_templates(monkeypatch):
    monkeypatch.setattr(statements, "_templates", {})


def _conversations(values: dict, title: str = "title"):
    found = Conversation.objects.filter(
        pk=values["pk"], owner_id=values["owner"], created_at__lt=values["before"], **{title: values["title"]}
    ).values_list("id", flat=True)
    return found.query.get_compiler(found.db).as_sql()


def _rows(sql: str, params) -> list:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        # SQLite returns a UUID as text.
        return [Conversation._meta.pk.to_python(row[0]) for row in cursor.fetchall()]


def test_the_bound_statement_is_the_orms_for_every_call():
    agent, owner = make_agent(), make_user()
    conversations = [start_run(agent, "hi").conversation for _ in range(2)]
    Conversation.objects.filter(pk__in=[c.pk for c in conversations]).update(owner=owner, title="ledger 50%_x")
    built = []

    def build(values):
        built.append(values)
        return _conversations(values)

    later = timezone.now() + timedelta(minutes=1)
    calls = [
        {"pk": conversations[0].pk, "owner": owner.pk, "before": later, "title": "ledger 50%_x"},
        {"pk": conversations[1].pk, "owner": owner.pk, "before": later, "title": "ledger 50%_x"},
        {"pk": conversations[1].pk, "owner": owner.pk + 1, "before": later, "title": "ledger 50%_x"},  # not hers
        {"pk": conversations[0].pk, "owner": owner.pk, "before": later, "title": "'; --"},
    ]
    for values in calls:
        sql, params = _conversations(values)
        assert statements.bound("conversation", build, values) == (sql, list(params))
    found = [_rows(*statements.bound("conversation", build, values)) for values in calls]
    assert found == [[conversations[0].pk], [conversations[1].pk], [], []]
    # Built twice with stand-ins on the first call (to check its form), never again.
    assert len(built) == 2 and all(values["pk"] not in {c.pk for c in conversations} for values in built)


def test_a_value_used_twice_is_bound_in_both_places():
    def build(values):
        return "SELECT %s = %s, %s", [values["name"], values["name"], values["other"]]

    assert statements.bound("twice", build, {"name": "a", "other": "b"}) == ("SELECT %s = %s, %s", ["a", "a", "b"])
    assert statements.bound("twice", build, {"name": "c", "other": "d"})[1] == ["c", "c", "d"]


@pytest.mark.parametrize(
    ("build", "values", "refusal"),
    [
        (lambda values: (f"SELECT '{values['name']}'", []), {"name": "x"}, "text"),
        (lambda values: ("SELECT 1", []), {"name": "x"}, "does not take"),
        (lambda values: ("SELECT 1" if values["n"] > 2_000_000_500 else "SELECT 2", [values["n"]]), {"n": 3}, "form"),
        (lambda values: ("SELECT %s", [values["flag"]]), {"flag": True}, "form"),
        (lambda values: ("SELECT %s", [values["nothing"]]), {"nothing": None}, "form"),
        (lambda values: ("SELECT %s", [values["amount"]]), {"amount": 1.5}, "float"),
        # A lookup that rewrites its value (escaped, with a wildcard) does not take the value itself.
        (
            lambda values: _conversations(values, title="title__startswith"),
            {"pk": uuid.uuid4(), "owner": 1, "before": timezone.now(), "title": "led"},
            "does not take",
        ),
    ],
)
def test_a_value_the_statement_does_not_take_as_a_parameter_is_refused(build, values, refusal):
    with pytest.raises(TypeError, match=refusal):
        statements.bound(("refused", refusal), build, values)
    assert not statements._templates
