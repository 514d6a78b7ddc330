"""The runs list's filters as one selector (conversations.run_filters), on PostgreSQL: each
narrows to the runs it names, and a bad value is RunFilterInvalid naming its parameter."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from conversations.models import Run, RunLabel
from conversations.run_filters import RunFilterInvalid, runs_filtered
from tests.support.factories import make_agent
from tests.support.ledger import ledger_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def runs():
    agent = make_agent()
    now = timezone.now()

    def run(*, tags=(), metadata=None, seconds=None, **fields):
        made = ledger_run(agent, tags=list(tags), metadata=metadata or {}, **fields)
        RunLabel.objects.bulk_create(
            [RunLabel(run=made, key="", value=tag) for tag in tags]
            + [RunLabel(run=made, key=key, value=value) for key, value in (metadata or {}).items()]
        )
        if seconds is not None:
            Run.objects.filter(pk=made.pk).update(started_at=now - timedelta(seconds=seconds), finished_at=now)
        return made.pk

    return {
        "tagged": run(tags=["vip", "beta"], cost=Decimal("0.20"), seconds=3),
        "meta": run(metadata={"customer": "acme", "url": "https://a.example/x:y"}, cost=Decimal("1.5"), seconds=40),
        "replay": run(trigger="fork", fork_change={"kind": "none"}),
        "fork": run(trigger="fork", fork_change={"kind": "model", "model": "m"}),
        "hook": run(trigger="hook"),
        "unfinished": run(status="running", cost=Decimal("0.5")),
    }


def _found(params) -> set:
    return set(runs_filtered(Run.objects.all(), params).values_list("pk", flat=True))


def test_each_filter_narrows_to_the_runs_it_names(runs):
    assert _found({"tag": "beta"}) == {runs["tagged"]}
    assert _found({"tag": "vip", "cost_max": "0.2"}) == {runs["tagged"]}
    assert _found({"meta": "customer:acme"}) == {runs["meta"]}
    # The value may hold colons; the key ends at the first.
    assert _found({"meta": "url:https://a.example/x:y"}) == {runs["meta"]}
    assert _found({"meta": "customer:other"}) == set()
    assert _found({"source": "replay"}) == {runs["replay"]}
    assert _found({"source": "fork"}) == {runs["fork"]}
    assert _found({"source": "hook"}) == {runs["hook"]}
    assert _found({"cost_min": "0.5"}) == {runs["meta"], runs["unfinished"]}
    assert _found({"cost_min": "0.2", "cost_max": "0.5"}) == {runs["tagged"], runs["unfinished"]}
    # Duration is finished_at - started_at: a run that has not finished has none.
    assert _found({"duration_min": "10"}) == {runs["meta"]}
    assert _found({"duration_max": "10"}) == {runs["tagged"]}
    assert _found({"duration_min": "0"}) == {runs["tagged"], runs["meta"]}
    assert _found({"tag": "", "meta": "", "cost_min": ""}) == set(runs.values())


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"tag": "a b"}, "tag"),
        ({"meta": "novalue"}, "meta"),
        ({"meta": ":value"}, "meta"),
        ({"source": "somewhere"}, "source"),
        ({"cost_min": "1e999"}, "cost_min"),
        ({"cost_max": "Infinity"}, "cost_max"),
        ({"cost_min": "3", "cost_max": "2"}, "cost_min"),
        ({"duration_max": "-4"}, "duration_max"),
        ({"duration_min": "x"}, "duration_min"),
    ],
)
def test_a_bad_value_names_its_parameter(params, field):
    with pytest.raises(RunFilterInvalid) as refused:
        runs_filtered(Run.objects.all(), params)
    assert refused.value.field == field
