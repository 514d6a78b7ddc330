"""Chaos: hundreds of runs write through an approved, non-idempotent tool while Celery worker
processes are SIGKILLed at random and restarted; at the end nothing is lost, duplicated or
left open.

    DATABASE_URL=postgres://… REDIS_URL=redis://… python -m bench.chaos --runs 200
    … python -m bench.chaos --broker amqp://guest:guest@127.0.0.1:5672//   (RabbitMQ as the broker)

Starts the fake model server, the counting service (the outside witness of every write) and
the workers as processes on this machine (loopback only), posts the runs, approves every
approval as it appears, sweeps lapsed leases, kills workers for `--kill-for` seconds, waits
(bounded) for every run to end, prints a summary and exits 1 if an invariant broke.
"""

import argparse
import os
import random
import signal
import sys
import threading
import time

import httpx
from kombu import Connection

from bench import harness
from bench.stack import Clock, free_port, open_runs, run_durations, stack_prepare

# Short leases and re-enqueue delays so a killed worker's runs come back within seconds.
ENV = {
    "AGENTRY_OUTBOUND_ALLOWLIST": "127.0.0.1",
    "AGENTRY_RUN_LEASE_SECONDS": "5",
    "AGENTRY_QUEUED_REENQUEUE_SECONDS": "15",
    "AGENTRY_RUN_MAX_RECOVERIES": "5",
    "DB_CONN_MAX_AGE": "0",
}
POST_BATCH = 10  # runs posted per tick of the driver, so approvals keep pace with arrivals


def options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--workers", type=int, default=3, help="worker processes (threads pool)")
    parser.add_argument("--concurrency", type=int, default=8, help="threads per worker process")
    parser.add_argument("--latency-ms", type=int, default=400, help="simulated latency of each model call")
    parser.add_argument(
        "--write-latency-ms",
        type=int,
        default=200,
        help="the counting service answers this long after recording a write",
    )
    parser.add_argument("--kill-for", type=float, default=40, help="seconds during which workers are killed")
    parser.add_argument(
        "--kill-every",
        type=float,
        nargs=2,
        default=(1.0, 4.0),
        metavar=("MIN", "MAX"),
        help="seconds between two kills, drawn uniformly",
    )
    parser.add_argument("--sweep-every", type=float, default=1.0, help="seconds between two sweeper passes")
    parser.add_argument("--timeout", type=float, default=600, help="give up waiting after this many seconds")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--broker",
        default="",
        help="Celery broker URL, e.g. amqp://guest:guest@127.0.0.1:5672// (default: CELERY_BROKER_URL, else REDIS_URL)",
    )
    return parser.parse_args()


class Workers:
    """N worker processes, and the killer: a thread that SIGKILLs one at random every few
    seconds and starts a new process in its place after a short pause."""

    def __init__(self, count: int, concurrency: int):
        self.concurrency = concurrency
        self.processes: list = [None] * count
        self.generations = [0] * count
        self.kills = 0
        self._stop = threading.Event()
        self._killer: threading.Thread | None = None

    def start(self, index: int) -> None:
        self.generations[index] += 1
        self.processes[index] = harness.start_worker(
            f"chaos-w{index}-{self.generations[index]}", concurrency=self.concurrency
        )

    def kill_at_random(self, *, seconds: float, every: tuple[float, float], rng: random.Random) -> None:
        def kill_loop():
            ends = time.monotonic() + seconds
            while not self._stop.wait(rng.uniform(*every)) and time.monotonic() < ends:
                index = rng.randrange(len(self.processes))
                if self.processes[index].poll() is None:
                    os.killpg(self.processes[index].pid, signal.SIGKILL)
                    self.processes[index].wait(timeout=10)
                    self.kills += 1
                if self._stop.wait(rng.uniform(0.2, 1.5)):
                    return
                self.start(index)

        self._killer = threading.Thread(target=kill_loop, name="killer", daemon=True)
        self._killer.start()

    def stop(self) -> None:
        self._stop.set()
        if self._killer is not None:
            self._killer.join(timeout=30)
        for process in self.processes:
            if process is not None:
                harness.stop(process)


def drive(*, agent, runs: int, approver, opts, clock: Clock) -> tuple[list, float, float | None]:
    """Post the runs a batch per tick, approve what waits, sweep, until every run is terminal
    or time is up. Returns the run ids, when the last was posted and when the last ended."""
    from conversations.models import Approval
    from conversations.services import conversation_create
    from engine.admission import message_post
    from engine.approvals import ApprovalConflict, approval_decide
    from engine.sweeper import runs_sweep

    run_ids: list = []
    posted = None
    next_sweep = next_report = 0.0
    while clock() < opts.timeout:
        for n in range(len(run_ids), min(runs, len(run_ids) + POST_BATCH)):
            run_ids.append(message_post(conversation=conversation_create(agent=agent), content=f"order {n}").pk)
        if posted is None and len(run_ids) == runs:
            posted = clock()
        for approval_id in Approval.objects.filter(run__in=run_ids, status="pending").values_list("pk", flat=True):
            try:
                approval_decide(approval_id=approval_id, user=approver, decision="approve", channel="api")
            except ApprovalConflict:  # the run ended meanwhile (cancelled with it)
                pass
        if clock() >= next_sweep:
            runs_sweep()
            next_sweep = clock() + opts.sweep_every
        left = open_runs(run_ids) + runs - len(run_ids)
        if clock() >= next_report:
            print(f"  {clock():6.1f} s: {runs - left}/{runs} runs ended", flush=True)
            next_report = clock() + 5
        if not left:
            return run_ids, posted, clock()
        time.sleep(0.2)
    return run_ids, posted, None


def by_count(counts: dict) -> str:
    return ", ".join(f"{key or '-'} {n}" for key, n in sorted(counts.items()))


def summary(report: dict, tally: dict, opts, timings: dict, run_ids: list) -> str:
    from bench.chaos_checks import PROBLEMS

    ended = f"{timings['ended']:.1f} s" if timings["ended"] is not None else f"not within {opts.timeout:.0f} s"
    posted = f"{timings['posted']:.1f} s" if timings["posted"] is not None else "(not all posted)"
    problems = ", ".join(f"{report[key]} {key.replace('_', ' ')}" for key in PROBLEMS)
    return "\n".join(
        [
            f"chaos: {report['runs']} runs, {opts.workers} workers × {opts.concurrency} threads, model latency "
            f"{opts.latency_ms} ms, {timings['kills']} SIGKILLs during the first {opts.kill_for:.0f} s",
            f"timings: all posted after {posted}; every run terminal after {ended}; per run {run_durations(run_ids)}",
            f"statuses: {by_count(report['statuses'])}; stop reasons: {by_count(report['stop_reasons'])}",
            f"writes: {report['writes_succeeded']} succeeded, {report['writes_interrupted']} interrupted (outcome "
            f"unknown, not repeated); counting service: {report['writes_recorded']} deliveries of our keys, "
            f"{tally['keys']} effective writes, {tally['redelivered_keys']} keys delivered twice",
            f"recovery: {report['recoveries']} lapsed leases requeued by the sweeper, "
            f"{report['interrupted_model_attempts']} model calls cut off by a kill and closed as interrupted",
            f"RESULT: {problems} -> {'OK' if timings['ok'] else 'FAILED'}",
        ]
    )


def main() -> int:
    opts = options()
    if opts.broker:
        # Before the settings load: this process and the workers it starts use the same broker.
        os.environ["CELERY_BROKER_URL"] = opts.broker
    stack_prepare(script="bench.chaos", env=ENV)
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from bench.chaos_checks import chaos_report, report_ok
    from bench.chaos_setup import WRITE_TOOL, chaos_agent, chaos_script

    setup, rng = Clock(), random.Random(opts.seed)
    llm_port, counting_port = free_port(), free_port()
    workers = Workers(opts.workers, opts.concurrency)
    processes = []
    try:
        processes.append(harness.start_fakellm(llm_port))
        processes.append(harness.start_counting_service(counting_port, opts.write_latency_ms))
        for index in range(opts.workers):
            workers.start(index)
        llm = f"http://127.0.0.1:{llm_port}"
        httpx.put(f"{llm}/_scripts/chaos", json=chaos_script(opts.latency_ms), timeout=10).raise_for_status()
        agent = chaos_agent(llm_api_base=f"{llm}/v1", model="chaos", counting_url=f"http://127.0.0.1:{counting_port}")
        approver, _ = get_user_model().objects.get_or_create(
            username="chaos-approver", defaults={"is_staff": True, "is_superuser": True}
        )
        broker = Connection(settings.CELERY_BROKER_URL).as_uri()  # the password masked
        print(f"stack up in {setup():.1f} s (broker {broker}); posting {opts.runs} runs", flush=True)
        clock = Clock()
        workers.kill_at_random(seconds=opts.kill_for, every=opts.kill_every, rng=rng)
        run_ids, posted, ended = drive(agent=agent, runs=opts.runs, approver=approver, opts=opts, clock=clock)
        tally = httpx.get(f"http://127.0.0.1:{counting_port}/writes", timeout=10).json()
    finally:
        workers.stop()
        for process in processes:
            harness.stop(process)
    report = chaos_report(run_ids=run_ids, write_tool=WRITE_TOOL, tally=tally)
    ok = report_ok(report)
    print(summary(report, tally, opts, {"posted": posted, "ended": ended, "kills": workers.kills, "ok": ok}, run_ids))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
