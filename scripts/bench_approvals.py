"""Cost of approvals: a decision (with its locks, events and the run's requeue), the resumed step,
and races of several approvers on one approval. Prints numbers; asserts nothing about speed.

Usage (PostgreSQL; a throwaway database `<name>_bench_approvals` is created and dropped):
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentry .venv/bin/python scripts/bench_approvals.py [--runs 200]
"""

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "platform_site.settings")
os.environ.setdefault("AGENTRY_TOOL_MODULES", "demo.tools,tests.support.tool_fixtures")

import django  # noqa: E402

django.setup()

from django.contrib.auth.models import User  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

from conversations.models import Approval, Run  # noqa: E402
from conversations.permissions import approvers_group_ensure  # noqa: E402
from conversations.services import conversation_create  # noqa: E402
from engine.admission import message_post  # noqa: E402
from engine.approvals import ApprovalConflict, approval_decide  # noqa: E402
from engine.loop import run_advance  # noqa: E402
from engine.tasks import run_advance_task  # noqa: E402
from fakellm.testing import serve_in_thread  # noqa: E402
from tests.support.factories import make_agent  # noqa: E402


def _ms(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[max(0, int(len(ordered) * 0.95) - 1)]
    return f"p50 {statistics.median(ordered) * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms"


def _parked_runs(agent, count: int) -> list[Run]:
    runs = []
    for i in range(count):
        run = message_post(conversation=conversation_create(agent=agent), content=f"echo {i}")
        run_advance(run_id=run.pk)
        runs.append(run)
    assert Run.objects.filter(pk__in=[r.pk for r in runs], status="awaiting_approval").count() == count
    return runs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--racers", type=int, default=8)
    args = parser.parse_args()
    if connection.vendor != "postgresql":
        sys.exit("set DATABASE_URL to a PostgreSQL server")

    connection.settings_dict["TEST"]["NAME"] = f"{connection.settings_dict['NAME']}_bench_approvals"
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    base_url, stop = serve_in_thread(
        scripts={
            "bench": {
                "scenarios": [
                    {
                        "match": ".",
                        "steps": [
                            {"tool_calls": [{"name": "test-echo", "arguments": {"text": "hi"}}]},
                            {"content": "done"},
                        ],
                    }
                ]
            }
        }
    )
    run_advance_task.delay = lambda run_id: None  # runs are advanced here, in-process
    try:
        agent = make_agent(
            tools=["test-echo"],
            approval={"test-echo": "always"},
            model_config__base_url=f"{base_url}/v1",
            model_config__model="bench",
        )
        approver = User.objects.create_user("bench-approver")
        approver.groups.add(approvers_group_ensure())

        runs = _parked_runs(agent, args.runs)
        decide_times, queries = [], []
        for run in runs:
            approval = Approval.objects.get(run=run)
            with CaptureQueriesContext(connection) as captured:
                started = time.perf_counter()
                approval_decide(approval_id=approval.pk, user=approver, decision="approve", channel="api")
                decide_times.append(time.perf_counter() - started)
            queries.append(len(captured.captured_queries))
        resume_times = []
        for run in runs:
            started = time.perf_counter()
            run_advance(run_id=run.pk)
            resume_times.append(time.perf_counter() - started)
        assert Run.objects.filter(pk__in=[r.pk for r in runs], status="completed").count() == len(runs)

        racers = [User.objects.create_user(f"racer-{i}") for i in range(args.racers)]
        for user in racers:
            user.groups.add(approvers_group_ensure())
        race_runs = _parked_runs(agent, max(10, args.runs // 10))
        race_times, winners = [], []
        for run in race_runs:
            approval_id = Approval.objects.get(run=run).pk
            barrier = threading.Barrier(len(racers))
            won = []

            def race(user, barrier=barrier, approval_id=approval_id, won=won):
                barrier.wait()
                try:
                    approval_decide(approval_id=approval_id, user=user, decision="approve", channel="api")
                    won.append(user)
                except ApprovalConflict:
                    pass
                finally:
                    connection.close()

            threads = [threading.Thread(target=race, args=(user,)) for user in racers]
            started = time.perf_counter()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            race_times.append(time.perf_counter() - started)
            winners.append(len(won))

        print(
            f"decision (approve + event + requeue), {len(runs)} approvals: {_ms(decide_times)}, "
            f"{statistics.mean(queries):.0f} SQL statements each"
        )
        print(f"resumed step after approval (tool + final model call on the fake server): {_ms(resume_times)}")
        print(
            f"{args.racers} approvers racing on one approval, {len(race_runs)} races: {_ms(race_times)} "
            f"until all answered; winners per race: {sorted(set(winners))}"
        )
    finally:
        stop()
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
