"""The run state machine, walked against the database: every pair of statuses is either a change
the table allows (it happens, with its event, in one transaction) or refused before any write."""

import itertools
import uuid
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import DatabaseError, transaction
from django.db.models import Q
from django.utils import timezone

from conversations.batch import db_value
from conversations.events import EventType
from conversations.models import TERMINAL_STATUSES, Conversation, Run, RunEvent, RunStatus, StopReason
from engine import leases, runs, transitions
from engine.transitions import OPERATOR_ONLY, TRANSITIONS, TransitionRefused, run_transition
from platform_site import statements
from tests.support.factories import make_agent
from tests.support.runs import start_run

pytestmark = pytest.mark.django_db
ACTIVE = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.AWAITING_APPROVAL, RunStatus.AWAITING_CHILDREN)


def _table_in_docstring() -> dict[tuple[str, str], str]:
    """The rows of the module's docstring table (from, to, event), 'any active' spelled out."""
    lines = transitions.__doc__.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:3] == ["from", "to", "event"])
    rows = {}
    for line in lines[header + 1 :]:
        words = line.split()
        if not words:
            break
        if words[:2] == ["any", "active"]:
            sources, words = ACTIVE, words[2:]
        elif words[0] in RunStatus.values:
            sources, words = (words[0],), words[1:]
        else:
            continue  # the last column went on to a second line
        for source in sources:
            rows[(source, words[0])] = words[1]
    return rows


def test_the_docstring_is_the_table():
    assert _table_in_docstring() == {edge: str(event) for edge, event in TRANSITIONS.items()}


def test_terminal_states_are_final_but_for_the_operators_retry():
    leaving_terminal = {edge for edge in TRANSITIONS if edge[0] in TERMINAL_STATUSES}
    assert leaving_terminal == {(RunStatus.FAILED, RunStatus.QUEUED)} == OPERATOR_ONLY


@pytest.fixture
def run():
    return start_run(make_agent(), "hello")


@pytest.fixture
def operator():
    return get_user_model().objects.create_user("operator", password="pw", is_staff=True)


def _put(run: Run, status: str) -> Run:
    """The run in `status`, held by worker w1 (with a live lease) if running."""
    held = status == RunStatus.RUNNING
    Run.objects.filter(pk=run.pk).update(
        status=status,
        lease_owner="w1" if held else "",
        lease_expires_at=timezone.now() + timedelta(minutes=5) if held else None,
    )
    run.refresh_from_db()
    return run


def _events(run: Run) -> list[str]:
    return list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True))


@pytest.mark.parametrize(("source", "to"), list(itertools.product(RunStatus.values, repeat=2)))
def test_every_pair_of_statuses(run, operator, source, to):
    _put(run, source)
    before = _events(run)
    # Entering running names the worker taking the lease; leaving it names the holder (w1).
    owner = "w2" if to == RunStatus.RUNNING else "w1" if source == RunStatus.RUNNING else None
    move = {"run_id": run.pk, "to": to, "expect": [source], "owner": owner, "by": operator}

    if (source, to) not in TRANSITIONS:
        with pytest.raises(TransitionRefused):
            run_transition(**move)
        run.refresh_from_db()
        assert run.status == source and _events(run) == before
        return

    assert run_transition(**move) is True
    run.refresh_from_db()
    assert run.status == to
    assert _events(run) == [*before, TRANSITIONS[(source, to)]]
    # Only a running run holds a lease: entering running takes it, any other status drops it.
    if to == RunStatus.RUNNING:
        assert run.lease_owner == "w2" and run.lease_expires_at > timezone.now()
    else:
        assert (run.lease_owner, run.lease_expires_at) == ("", None)
    # Moved once: the same change again finds the run no longer in its source status.
    if source != to:
        assert run_transition(**move) is False
        assert len(_events(run)) == len(before) + 1


def test_retry_out_of_failed_is_for_operators_only(run, operator):
    _put(run, RunStatus.FAILED)
    with pytest.raises(TransitionRefused, match="operator"):
        run_transition(run_id=run.pk, to=RunStatus.QUEUED, expect=[RunStatus.FAILED])
    assert (
        run_transition(
            run_id=run.pk,
            to=RunStatus.QUEUED,
            expect=[RunStatus.FAILED],
            by=operator,
            payload={"by": operator.username},
        )
        is True
    )
    event = RunEvent.objects.filter(run=run).order_by("seq").last()
    assert (event.type, event.payload) == (EventType.RUN_RETRIED, {"by": "operator"})


def test_a_status_other_than_expected_moves_nothing(run):
    _put(run, RunStatus.COMPLETED)
    before = _events(run)
    assert run_transition(run_id=run.pk, to=RunStatus.RUNNING, expect=[RunStatus.QUEUED], owner="w1") is False
    assert run_transition(run_id=run.pk, to=RunStatus.FAILED, expect=ACTIVE) is False
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED and _events(run) == before


def test_a_worker_that_lost_the_lease_moves_nothing(run):
    _put(run, RunStatus.RUNNING)
    before = _events(run)
    for to in (RunStatus.QUEUED, RunStatus.AWAITING_APPROVAL):
        assert run_transition(run_id=run.pk, to=to, expect=[RunStatus.RUNNING], owner="w2") is False
    run.refresh_from_db()
    assert (run.status, run.lease_owner) == (RunStatus.RUNNING, "w1") and _events(run) == before


def test_a_held_lease_cannot_be_claimed_a_lapsed_one_can(run):
    _put(run, RunStatus.RUNNING)
    claim = {
        "run_id": run.pk,
        "to": RunStatus.RUNNING,
        "expect": [RunStatus.QUEUED, RunStatus.RUNNING],
        "owner": "w2",
        "where": Q(status=RunStatus.QUEUED) | Q(lease_expires_at__lt=timezone.now()),
    }
    assert run_transition(**claim) is False
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    claim["where"] = Q(status=RunStatus.QUEUED) | Q(lease_expires_at__lt=timezone.now())
    assert run_transition(**claim, payload={"worker": "w2"}) is True
    run.refresh_from_db()
    assert run.lease_owner == "w2"
    event = RunEvent.objects.filter(run=run).order_by("seq").last()
    assert (event.type, event.payload) == (EventType.RUN_RUNNING, {"worker": "w2"})


def test_fields_are_written_with_the_status(run):
    _put(run, RunStatus.RUNNING)
    assert (
        run_transition(
            run_id=run.pk,
            to=RunStatus.FAILED,
            expect=ACTIVE,
            fields={"stop_reason": StopReason.WORKER_LOST, "error": "gone"},
        )
        is True
    )
    run.refresh_from_db()
    assert (run.status, run.stop_reason, run.error) == (RunStatus.FAILED, StopReason.WORKER_LOST, "gone")


def test_writes_take_effect_with_the_change_in_its_transaction(run):
    _put(run, RunStatus.RUNNING)
    before = _events(run)

    def retitle(title: str):
        def writes(batch):
            batch.add(
                "retitled",
                'UPDATE "conversations_conversation" SET "title" = %s WHERE "id" = %s AND {guard}',
                [title, db_value(Conversation, "id", run.conversation_id)],
            )

        return writes

    assert run_transition(run_id=run.pk, to=RunStatus.CANCELLED, expect=ACTIVE, writes=retitle("closed")) is True
    assert _events(run) == [*before, EventType.RUN_CANCELLED]
    assert Conversation.objects.get(pk=run.conversation_id).title == "closed"

    # A change that does not happen writes nothing.
    assert run_transition(run_id=run.pk, to=RunStatus.FAILED, expect=ACTIVE, writes=retitle("again")) is False
    assert Conversation.objects.get(pk=run.conversation_id).title == "closed"

    _put(run, RunStatus.RUNNING)
    before = _events(run)

    def broken(batch):
        batch.add("broken", 'UPDATE "conversations_conversation" SET "no_such_column" = 1 WHERE {guard}')

    # The caller's transaction (a step's, a decision's) is the one the change joins.
    with pytest.raises(DatabaseError), transaction.atomic():
        run_transition(run_id=run.pk, to=RunStatus.FAILED, expect=ACTIVE, writes=broken)
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING and _events(run) == before


def test_changes_the_table_cannot_make_in_one_update_are_refused(run):
    _put(run, RunStatus.QUEUED)
    # awaiting_approval → queued and queued → queued carry different events.
    with pytest.raises(TransitionRefused):
        run_transition(run_id=run.pk, to=RunStatus.QUEUED, expect=[RunStatus.AWAITING_APPROVAL, RunStatus.QUEUED])
    with pytest.raises(TransitionRefused):
        run_transition(run_id=run.pk, to=RunStatus.RUNNING, expect=[RunStatus.QUEUED])  # no worker named
    with pytest.raises(TransitionRefused):
        run_transition(run_id=run.pk, to=RunStatus.FAILED, expect=[])
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED


# --- the changes every run makes are built once and then only bound --------------------------


def _shaped(shape, *, to, expect, owner: bool):
    return transitions._Change(to=to, expect=tuple(expect), owner=owner, where=None, fields=None, shape=shape)


@pytest.mark.parametrize(
    ("shape", "to", "expect", "owner", "values"),
    [
        (leases._CLAIM, RunStatus.RUNNING, (RunStatus.QUEUED, RunStatus.RUNNING), True, ("now",)),
        (runs._ANSWERED, RunStatus.COMPLETED, ACTIVE, False, ("error", "now")),
        (transitions._PLAIN, RunStatus.QUEUED, (RunStatus.RUNNING,), True, ()),
    ],
)
def test_a_shaped_change_binds_what_the_orm_would_build(monkeypatch, shape, to, expect, owner, values):
    monkeypatch.setattr(statements, "_templates", {})
    now = timezone.now()

    def named(run_id, when, text):
        found = {"run_id": run_id, "now": when, "error": text, "owner": f"worker {text}"}
        found = {key: found[key] for key in ("run_id", *values, *(["owner"] if owner else []))}
        return {**found, "lease": when + timedelta(minutes=5)} if to == RunStatus.RUNNING else found

    change = _shaped(shape, to=to, expect=expect, owner=owner)
    for run_id, when, text in ((uuid.uuid4(), now, "one"), (uuid.uuid4(), now + timedelta(seconds=3), "two: 'é'")):
        sql, params = change.sql(named(run_id, when, text))
        assert statements.bound(shape, change.sql, named(run_id, when, text)) == (sql, list(params))


def test_a_shaped_change_is_built_through_the_orm_once(monkeypatch):
    agent = make_agent()
    first, second = start_run(agent, "one"), start_run(agent, "two")
    built = []
    build = transitions._Change.sql
    monkeypatch.setattr(transitions._Change, "sql", lambda self, named: built.append(self.shape) or build(self, named))
    monkeypatch.setattr(statements, "_templates", {})

    assert leases.run_claim(run_id=first.pk, owner="w1") is True
    assert leases.run_claim(run_id=second.pk, owner="w2") is True
    assert leases.run_claim(run_id=second.pk, owner="w3") is False  # held: a lease that has not lapsed
    # Built with stand-ins on the first claim (twice, to check its form), never again.
    assert built == [leases._CLAIM] * 2
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.lease_owner, second.lease_owner, first.claims, second.claims) == ("w1", "w2", 1, 1)
    assert first.started_at is not None and second.lease_expires_at > timezone.now()

    # A lapsed lease is claimed through the same statement, with this call's time.
    Run.objects.filter(pk=second.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert leases.run_claim(run_id=second.pk, owner="w3") is True
    second.refresh_from_db()
    assert (second.lease_owner, second.claims) == ("w3", 2) and built == [leases._CLAIM] * 2


def test_a_shape_refuses_a_value_that_changes_its_statement(run):
    counted = transitions.Shape("counted", fields=lambda iterations: {"iterations": iterations})
    with pytest.raises(TypeError, match="form"):
        run_transition(run_id=run.pk, to=RunStatus.FAILED, expect=ACTIVE, shape=counted, values={"iterations": None})
    with pytest.raises(TransitionRefused):
        run_transition(run_id=run.pk, to=RunStatus.FAILED, expect=ACTIVE, shape=counted, where=Q(iterations=0))
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED
