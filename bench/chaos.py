"""Chaos: hundreds of runs write through an approved, non-idempotent tool while Celery worker
processes are SIGKILLed at random and restarted; at the end nothing is lost, duplicated or
left open.

    DATABASE_URL=postgres://… REDIS_URL=redis://… python -m bench.chaos --runs 200
    … python -m bench.chaos --broker amqp://guest:guest@127.0.0.1:5672//   (RabbitMQ as the broker)
    … python -m bench.chaos --groups 2 --workers 2   (two worker hosts; one dies for good)

Starts the fake model server, the counting service (the outside witness of every write) and
the workers as processes on this machine (loopback only), posts the runs, approves every
approval as it appears, sweeps lapsed leases, kills workers for `--kill-for` seconds, waits
(bounded) for every run to end and for the memory extraction each completed run is followed by
(the agent keeps long-term memory, and every conversation has an end user: workers die during
extractions too, and no model call may stay started), prints a summary and exits 1 if an
invariant broke.

With `--groups 2` the workers stand for two worker hosts on one broker and one PostgreSQL:
`--workers` processes per group, each group under a host name of its own (a UTS namespace
where `unshare` may make one, as root can; else the machine's name, the groups then told apart
by their processes). Once every run is posted and `--kill-after` seconds have passed, as soon as
the first group holds runs, that whole group is SIGKILLed and never restarted: every run still
open must end, last claimed by the other group.
This script's driver is the one beat (it sweeps lapsed leases every `--sweep-every` seconds),
on this host, outside both groups, as the compose `beat` service is a process of its own.
"""

import argparse
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
from kombu import Connection

from bench import harness
from bench.stack import Clock, free_port, open_runs, run_durations, stack_prepare
from platform_site.worker_command import worker_argv

# Short leases and re-enqueue delays so a killed worker's runs come back within seconds.
ENV = {
    "AGENTRY_OUTBOUND_ALLOWLIST": "127.0.0.1",
    "AGENTRY_RUN_LEASE_SECONDS": "5",
    "AGENTRY_QUEUED_REENQUEUE_SECONDS": "15",
    "AGENTRY_RUN_MAX_RECOVERIES": "5",
    # An extraction cut off by a kill is closed by the sweeper after twice this, then sent again.
    "AGENTRY_MODEL_CALL_MAX_SECONDS": "3",
    "DB_CONN_MAX_AGE": "0",
}
POST_BATCH = 10  # runs posted per tick of the driver, so approvals keep pace with arrivals


def options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--workers", type=int, default=3, help="worker processes (threads pool), per group")
    parser.add_argument(
        "--groups",
        type=int,
        choices=(1, 2),
        default=1,
        help="1: workers killed at random and restarted; 2: two worker hosts, the first killed whole for good",
    )
    parser.add_argument("--concurrency", type=int, default=8, help="threads per worker process")
    parser.add_argument("--latency-ms", type=int, default=400, help="simulated latency of each model call")
    parser.add_argument(
        "--write-latency-ms",
        type=int,
        default=200,
        help="the counting service answers this long after recording a write",
    )
    parser.add_argument(
        "--kill-for", type=float, default=40, help="seconds during which workers are killed (one group: random kills)"
    )
    parser.add_argument(
        "--kill-every",
        type=float,
        nargs=2,
        default=(1.0, 4.0),
        metavar=("MIN", "MAX"),
        help="seconds between two kills, drawn uniformly",
    )
    parser.add_argument(
        "--kill-after",
        type=float,
        default=0,
        help="two groups: the first dies at the first moment after this many seconds when it holds runs",
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

    problems: tuple[str, ...] = ()

    def __init__(self, count: int, concurrency: int):
        self.concurrency = concurrency
        self.processes: list = [None] * count
        self.generations = [0] * count
        self.kills = 0
        self._stop = threading.Event()
        self._killer: threading.Thread | None = None

    def start_all(self) -> None:
        for index in range(len(self.processes)):
            self.start(index)

    def start(self, index: int) -> None:
        self.generations[index] += 1
        self.processes[index] = harness.start_worker(
            f"chaos-w{index}-{self.generations[index]}", concurrency=self.concurrency
        )

    def begin(self, *, opts, rng: random.Random) -> None:
        self.kill_at_random(seconds=opts.kill_for, every=opts.kill_every, rng=rng)

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

    def tick(self, *, run_ids: list, all_posted: bool, clock: Clock) -> None:
        """The killer is a thread of its own: nothing to do at the driver's pace."""

    def stop(self) -> None:
        self._stop.set()
        if self._killer is not None:
            self._killer.join(timeout=30)
        for process in self.processes:
            if process is not None:
                harness.stop(process)

    def header(self, opts) -> str:
        return (
            f"{opts.workers} workers × {opts.concurrency} threads, model latency {opts.latency_ms} ms, "
            f"{self.kills} SIGKILLs during the first {opts.kill_for:.0f} s"
        )

    def report(self, run_ids: list) -> dict:
        return {}

    def lines(self, report: dict) -> list[str]:
        return []


def own_host_names_possible() -> bool:
    """Whether a child may get a host name of its own: a UTS namespace (`unshare --uts`), which
    needs root or user namespaces. Without one, every group has the machine's host name."""
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "--uts", "true"], capture_output=True).returncode == 0


class WorkerGroup:
    """The worker processes of one worker host: node names `<group>-w<i>@<host>`, and the host
    name in every lease they take (engine.leases: `host:pid:…`)."""

    def __init__(self, name: str, *, count: int, concurrency: int, own_host: bool):
        self.name = name
        self.own_host = own_host
        self.host = f"chaos-{name}" if own_host else socket.gethostname()
        self.processes = [self._start(index, concurrency) for index in range(count)]

    def _start(self, index: int, concurrency: int) -> subprocess.Popen:
        argv = worker_argv(concurrency=concurrency, name=f"{self.name}-w{index}@%h", loglevel="warning")
        if self.own_host:
            # The shell names the new namespace's host, then becomes the worker (same pid).
            argv = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', self.host, *argv]
        harness.LOGS.mkdir(parents=True, exist_ok=True)
        log = open(harness.LOGS / f"chaos-{self.name}-w{index}.log", "wb")
        return subprocess.Popen(
            argv, cwd=harness.ROOT, env=dict(os.environ), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def owns(self, lease_owner: str) -> bool:
        """Whether a lease owner (`host:pid:random`) is one of this group's processes: the pid
        tells the groups apart when they share the machine's host name."""
        host, _, rest = lease_owner.partition(":")
        pid = rest.partition(":")[0]
        return host == self.host and pid.isdigit() and int(pid) in {p.pid for p in self.processes}

    def kill(self) -> None:
        """SIGKILL every process of the group at once, as a host that loses power."""
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
        for process in self.processes:
            process.wait(timeout=10)

    def stop(self) -> None:
        for process in self.processes:
            harness.stop(process)


def runs_held(group: WorkerGroup, run_ids: list) -> list:
    from conversations.models import Run, RunStatus

    running = Run.objects.filter(pk__in=run_ids, status=RunStatus.RUNNING).values_list("pk", "lease_owner")
    return [pk for pk, owner in running if group.owns(owner)]


def last_claims(run_ids: list) -> dict:
    """Each run's last claimant: the worker named by its last run.running event."""
    from conversations.events import EventType
    from conversations.models import RunEvent

    events = RunEvent.objects.filter(run__in=run_ids, type=EventType.RUN_RUNNING).order_by("run", "seq")
    return {run_id: payload.get("worker", "") for run_id, payload in events.values_list("run_id", "payload")}


class TwoHosts:
    """Two worker groups on one broker and one PostgreSQL. The first is killed whole, once, as
    soon as every run is posted, `kill_after` seconds have passed and it holds runs, and is not
    restarted."""

    problems = ("kill_missed", "not_taken_over")

    def __init__(self, count: int, concurrency: int, kill_after: float):
        self.count, self.concurrency, self.kill_after = count, concurrency, kill_after
        self.groups: list[WorkerGroup] = []
        self.killed_at: float | None = None
        self.held: list = []  # runs the doomed group held under a lease when it died
        self.open: list = []  # runs not ended when it died

    def start_all(self) -> None:
        own_host = own_host_names_possible()
        self.groups = [
            WorkerGroup(name, count=self.count, concurrency=self.concurrency, own_host=own_host)
            for name in ("group-a", "group-b")
        ]

    def begin(self, *, opts, rng: random.Random) -> None:
        """The kill waits for runs in flight on the first group: see tick."""

    def tick(self, *, run_ids: list, all_posted: bool, clock: Clock) -> None:
        from conversations.models import TERMINAL_STATUSES, Run

        doomed = self.groups[0]
        if self.killed_at is not None or not all_posted or clock() < self.kill_after:
            return
        if not runs_held(doomed, run_ids):  # mid-runs: the group dies holding some
            return
        doomed.kill()
        self.killed_at = clock()
        # Read after the kill: its leases stay as they were until they lapse.
        self.held = runs_held(doomed, run_ids)
        still_open = Run.objects.filter(pk__in=run_ids).exclude(status__in=TERMINAL_STATUSES)
        self.open = list(still_open.values_list("pk", flat=True))
        print(f"  {self.killed_at:6.1f} s: {doomed.name} SIGKILLed holding {len(self.held)} runs", flush=True)

    def stop(self) -> None:
        for group in self.groups:
            group.stop()

    def header(self, opts) -> str:
        hosts = ", ".join(f"{g.name} on host {g.host}" for g in self.groups)
        killed = f"after {self.killed_at:.1f} s" if self.killed_at is not None else "never (it held no run)"
        return (
            f"2 worker groups × {opts.workers} workers × {opts.concurrency} threads ({hosts}), model latency "
            f"{opts.latency_ms} ms; {self.groups[0].name} SIGKILLed whole {killed}, not restarted"
        )

    def report(self, run_ids: list) -> dict:
        survivors = self.groups[1]
        claims = last_claims(self.open)
        taken_over = sum(1 for pk in self.open if survivors.owns(claims.get(pk, "")))
        return {
            "held_at_kill": len(self.held),
            "open_at_kill": len(self.open),
            "kill_missed": 0 if self.held else 1,
            "not_taken_over": len(self.open) - taken_over,
        }

    def lines(self, report: dict) -> list[str]:
        if self.killed_at is None:
            return [f"takeover: none, {self.groups[0].name} held no run at any moment it could be killed"]
        return [
            f"takeover: {report['runs'] - report['open_at_kill']} runs ended before {self.groups[0].name} died, "
            f"{report['open_at_kill']} open, {report['held_at_kill']} of them under its leases; "
            f"{report['open_at_kill'] - report['not_taken_over']} of the open runs last claimed by "
            f"{self.groups[1].name}; beat: one, this script's sweeper on the driving host"
        ]


# Once no extraction call is started, how long the count of those not made yet may stay the
# same before the wait ends: a task a killed worker had taken comes back only when the broker
# hands it out again (at once on RabbitMQ, after the visibility timeout on Redis).
EXTRACTIONS_QUIET_SECONDS = 10


def extractions_open(run_ids: list) -> tuple[int, int]:
    """Completed runs whose memory extraction has not ended: (its last call still started, no
    call made yet)."""
    from bench.chaos_checks import extractions_expected
    from conversations.models import LLMCall, Run

    expected = extractions_expected(Run.objects.filter(pk__in=run_ids))
    calls = LLMCall.objects.filter(run__in=expected, purpose=LLMCall.Purpose.MEMORY).order_by("pk")
    last = dict(calls.values_list("run_id", "status"))
    pks = list(expected.values_list("pk", flat=True))
    return sum(1 for pk in pks if last.get(pk) == "started"), sum(1 for pk in pks if pk not in last)


def drive(*, agent, runs: int, approver, opts, clock: Clock, fleet) -> tuple[list, float, float | None]:
    """Post the runs a batch per tick, approve what waits, sweep, until every run is terminal
    and every extraction ended, or time is up. Returns the run ids, when the last was posted
    and when the last run ended."""
    from conversations.models import Approval
    from conversations.services import conversation_create
    from engine.admission import message_post
    from engine.approvals import ApprovalConflict, approval_decide
    from engine.sweeper import runs_sweep

    run_ids: list = []
    posted = ended = None
    next_sweep = next_report = 0.0
    waiting, waiting_since = None, 0.0
    while clock() < opts.timeout:
        for n in range(len(run_ids), min(runs, len(run_ids) + POST_BATCH)):
            conversation = conversation_create(agent=agent, end_user=f"chaos-{n}")
            run_ids.append(message_post(conversation=conversation, content=f"order {n}").pk)
        if posted is None and len(run_ids) == runs:
            posted = clock()
        for approval_id in Approval.objects.filter(run__in=run_ids, status="pending").values_list("pk", flat=True):
            try:
                approval_decide(approval_id=approval_id, user=approver, decision="approve", channel="api")
            except ApprovalConflict:  # the run ended meanwhile (cancelled with it)
                pass
        fleet.tick(run_ids=run_ids, all_posted=posted is not None, clock=clock)
        if clock() >= next_sweep:
            runs_sweep()
            next_sweep = clock() + opts.sweep_every
        left = open_runs(run_ids) + runs - len(run_ids)
        if clock() >= next_report:
            print(f"  {clock():6.1f} s: {runs - left}/{runs} runs ended", flush=True)
            next_report = clock() + 5
        if not left and ended is None:
            ended = clock()
        if ended is not None:
            started, missing = extractions_open(run_ids)
            if (started, missing) != waiting:
                waiting, waiting_since = (started, missing), clock()
            if not started and (not missing or clock() - waiting_since >= EXTRACTIONS_QUIET_SECONDS):
                return run_ids, posted, ended
        time.sleep(0.2)
    return run_ids, posted, ended


def by_count(counts: dict) -> str:
    return ", ".join(f"{key or '-'} {n}" for key, n in sorted(counts.items()))


def summary(report: dict, tally: dict, opts, timings: dict, run_ids: list, fleet) -> str:
    from bench.chaos_checks import PROBLEMS

    ended = f"{timings['ended']:.1f} s" if timings["ended"] is not None else f"not within {opts.timeout:.0f} s"
    posted = f"{timings['posted']:.1f} s" if timings["posted"] is not None else "(not all posted)"
    problems = ", ".join(f"{report[key]} {key.replace('_', ' ')}" for key in PROBLEMS + fleet.problems)
    return "\n".join(
        [
            f"chaos: {report['runs']} runs, {fleet.header(opts)}",
            f"timings: all posted after {posted}; every run terminal after {ended}; per run {run_durations(run_ids)}",
            f"statuses: {by_count(report['statuses'])}; stop reasons: {by_count(report['stop_reasons'])}",
            f"writes: {report['writes_succeeded']} succeeded, {report['writes_interrupted']} interrupted (outcome "
            f"unknown, not repeated); counting service: {report['writes_recorded']} deliveries of our keys, "
            f"{tally['keys']} effective writes, {tally['redelivered_keys']} keys delivered twice",
            f"recovery: {report['recoveries']} lapsed leases requeued by the sweeper, "
            f"{report['interrupted_model_attempts']} model calls cut off by a kill and closed as interrupted",
            f"memory: {report['extractions']} extractions, {report['extractions_interrupted']} of their calls cut off "
            f"by a kill, {report['extractions_unfinished']} still started, {report['extractions_missing']} never "
            f"started (a taken task not handed out again yet)",
            *fleet.lines(report),
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
    if opts.groups == 1:
        fleet = Workers(opts.workers, opts.concurrency)
    else:
        fleet = TwoHosts(opts.workers, opts.concurrency, opts.kill_after)
    processes = []
    try:
        processes.append(harness.start_fakellm(llm_port))
        processes.append(harness.start_counting_service(counting_port, opts.write_latency_ms))
        fleet.start_all()
        llm = f"http://127.0.0.1:{llm_port}"
        httpx.put(f"{llm}/_scripts/chaos", json=chaos_script(opts.latency_ms), timeout=10).raise_for_status()
        agent = chaos_agent(llm_api_base=f"{llm}/v1", model="chaos", counting_url=f"http://127.0.0.1:{counting_port}")
        approver, _ = get_user_model().objects.get_or_create(
            username="chaos-approver", defaults={"is_staff": True, "is_superuser": True}
        )
        broker = Connection(settings.CELERY_BROKER_URL).as_uri()  # the password masked
        print(f"stack up in {setup():.1f} s (broker {broker}); posting {opts.runs} runs", flush=True)
        clock = Clock()
        fleet.begin(opts=opts, rng=rng)
        run_ids, posted, ended = drive(
            agent=agent, runs=opts.runs, approver=approver, opts=opts, clock=clock, fleet=fleet
        )
        tally = httpx.get(f"http://127.0.0.1:{counting_port}/writes", timeout=10).json()
    finally:
        fleet.stop()
        for process in processes:
            harness.stop(process)
    report = {**chaos_report(run_ids=run_ids, write_tool=WRITE_TOOL, tally=tally), **fleet.report(run_ids)}
    ok = report_ok(report) and all(report[key] == 0 for key in fleet.problems)
    timings = {"posted": posted, "ended": ended, "ok": ok}
    print(summary(report, tally, opts, timings, run_ids, fleet))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
