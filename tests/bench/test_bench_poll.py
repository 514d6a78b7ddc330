"""The benchmark's poll for the end of its runs finds exactly the listed runs that have not ended."""

import pytest
from django.db import connection

from bench.bench import _open_runs
from conversations.models import TERMINAL_STATUSES, Run, RunStatus
from tests.support.factories import make_agent
from tests.support.runs import start_run

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the benchmark runs on PostgreSQL"),
]


def test_open_runs_lists_the_listed_runs_that_have_not_ended():
    agent = make_agent()
    runs = [start_run(agent, f"question {n}") for n in range(4)]
    Run.objects.filter(pk=runs[0].pk).update(status=RunStatus.COMPLETED)
    Run.objects.filter(pk=runs[1].pk).update(status=RunStatus.FAILED)
    Run.objects.filter(pk=runs[2].pk).update(status=RunStatus.RUNNING)
    other = start_run(agent, "not listed")  # open, but not one of the benchmark's

    listed = ",".join(str(run.pk) for run in runs)
    assert sorted(_open_runs(Run, listed, ",".join(TERMINAL_STATUSES))) == sorted(str(run.pk) for run in runs[2:])

    Run.objects.filter(pk__in=[runs[2].pk, runs[3].pk]).update(status=RunStatus.CANCELLED)
    assert _open_runs(Run, listed, ",".join(TERMINAL_STATUSES)) == []
    assert Run.objects.get(pk=other.pk).status == RunStatus.QUEUED
