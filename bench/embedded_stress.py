"""Stress of the embedded stack (what scripts/dev.sh runs: SQLite and the filesystem broker):
runs posted in bursts while eval runs queue theirs, with the worker watched for deaths.

    python -m bench.embedded_stress                          # 3000 runs in 30 bursts, 30 eval runs
    python -m bench.embedded_stress --runs 60 --bursts 3     # the size the test suite runs
    python -m bench.embedded_stress --broker-only            # the broker alone, ours then kombu's

Needs no server: it makes a fresh var directory (--var-dir, else a temporary one), migrates its
SQLite file, seeds the demo agent and suite, and starts the fake model and one worker (8
threads) as processes. A worker that exits is counted as a death, its log's last lines printed,
and it is started again, as scripts/dev.sh does. Every run must end; the script prints a
summary and exits 1 on any worker death or a run left open.

--broker-only measures the reason for platform_site.fs_broker without Django: producer
processes publish as fast as they can into one folder while a consumer reads it, once through
that transport and once through kombu's own; it counts the half-written messages the consumer
was handed (each of which stops a worker) and the messages per second.
"""

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUESTION = "你是谁？"


def options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3000, help="runs posted in all")
    parser.add_argument("--bursts", type=int, default=30, help="the runs are posted in this many bursts")
    parser.add_argument("--pause", type=float, default=0.5, help="seconds between two bursts")
    parser.add_argument("--evals", type=int, default=None, help="eval runs started (default: one per burst)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds to wait for every run to end")
    parser.add_argument("--var-dir", help="the stack's var directory (default: a new temporary one)")
    parser.add_argument("--broker-only", action="store_true", help="stress the broker alone (see above)")
    parser.add_argument("--messages", type=int, default=2000, help="--broker-only: messages in all")
    parser.add_argument("--producers", type=int, default=4, help="--broker-only: producer processes")
    return parser.parse_args()


# --- the broker alone ------------------------------------------------------------------------


def _broker_connection(folder: str, transport_path: str):
    from kombu import Connection
    from kombu.utils.imports import symbol_by_name

    options = {"data_folder_in": folder, "data_folder_out": folder, "control_folder": folder + "-control"}
    return Connection("filesystem://localhost/", transport=symbol_by_name(transport_path), transport_options=options)


def _produce(folder: str, transport_path: str, count: int) -> None:
    payload = {"body": "x" * 2000, "headers": {"task": "stress"}}
    with _broker_connection(folder, transport_path) as connection:
        channel = connection.default_channel
        for _ in range(count):
            channel._put("llm", payload)


def broker_stress(*, transport_path: str, messages: int, producers: int) -> dict:
    """Producers publish `messages` in all while one consumer polls (kombu's own _get, the one a
    worker calls); the consumer counts what it decoded and what it could not."""
    from queue import Empty

    folder = tempfile.mkdtemp(prefix="agentry-broker-")
    per_producer = messages // producers
    started = time.monotonic()
    context = multiprocessing.get_context("spawn")
    processes = [
        context.Process(target=_produce, args=(folder, transport_path, per_producer)) for _ in range(producers)
    ]
    for process in processes:
        process.start()
    received = broken = 0
    with _broker_connection(folder, transport_path) as connection:
        channel = connection.default_channel
        while received + broken < per_producer * producers:
            try:
                channel._get("llm")
                received += 1
            except Empty:
                if not any(p.is_alive() for p in processes) and not channel._size("llm"):
                    break
            except ValueError:
                # JSONDecodeError: a file the producer had created but not written yet.
                broken += 1
    for process in processes:
        process.join()
    elapsed = time.monotonic() - started
    return {"received": received, "half_written": broken, "seconds": elapsed, "per_second": received / elapsed}


# --- the whole embedded stack ----------------------------------------------------------------


def _environment(var_dir: Path) -> dict:
    # Empty rather than unset, as scripts/dev.sh does, so that no .env points it at a server.
    return {
        "AGENTRY_VAR_DIR": str(var_dir),
        "AGENTRY_ENV_FILE": "",
        "DATABASE_URL": "",
        "REDIS_URL": "",
        "CELERY_BROKER_URL": "",
        "DJANGO_SETTINGS_MODULE": "platform_site.settings",
    }


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Supervised:
    """A process restarted whenever it exits; each exit is a death, reported with its log."""

    def __init__(self, name: str, argv: list[str], log: Path):
        self.name, self.argv, self.log = name, argv, log
        self.deaths: list[str] = []
        self.process = None
        self.start()

    def start(self) -> None:
        self.process = subprocess.Popen(
            self.argv, cwd=ROOT, stdout=open(self.log, "ab"), stderr=subprocess.STDOUT, start_new_session=True
        )

    def check(self) -> None:
        status = self.process.poll()
        if status is None:
            return
        tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-8:])
        self.deaths.append(tail)
        print(f"!!! {self.name} exited with status {status}; restarting. Last lines of {self.log}:\n{tail}", flush=True)
        self.start()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()


def _wait_http(url: str, timeout: float = 30) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


def stack_stress(args: argparse.Namespace) -> int:
    var_dir = Path(args.var_dir or tempfile.mkdtemp(prefix="agentry-embedded-"))
    var_dir.mkdir(parents=True, exist_ok=True)
    os.environ.update(_environment(var_dir))
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    from agents.models import Agent
    from conversations.models import Run
    from conversations.services import conversation_create
    from demo.suite import DEMO_SUITE
    from engine.admission import message_post
    from evals.models import EvalSuite
    from evals.services import eval_run_start, eval_version_resolve
    from platform_site.worker_command import worker_argv

    call_command("migrate", verbosity=0)
    port = _free_port()
    llm = Supervised(
        "fake LLM",
        [sys.executable, "-m", "fakellm", "--host", "127.0.0.1", "--port", str(port)],
        var_dir / "fakellm.log",
    )
    _wait_http(f"http://127.0.0.1:{port}/_health")
    call_command("agentry_seed_demo", llm_base_url=f"http://127.0.0.1:{port}/v1", no_stream=True, verbosity=0)
    worker = Supervised(
        "worker", worker_argv(concurrency=8, name="stress@%h", loglevel="warning"), var_dir / "worker.log"
    )
    agent = Agent.objects.get(slug="customer-service")
    version = eval_version_resolve(agent=agent, version="draft")
    suite = EvalSuite.objects.get(workspace_id=agent.workspace_id, name=DEMO_SUITE)
    evals = args.bursts if args.evals is None else args.evals
    print(
        f"embedded stack in {var_dir}: {args.runs} runs in {args.bursts} bursts, {evals} eval runs "
        f"({suite.cases.count()} runs each)",
        flush=True,
    )
    started = time.monotonic()
    run_ids, eval_runs = [], []
    per_burst = -(-args.runs // args.bursts)
    try:
        for burst in range(args.bursts):
            for _ in range(min(per_burst, args.runs - len(run_ids))):
                conversation = conversation_create(agent=agent, title="stress")
                run_ids.append(message_post(conversation=conversation, content=QUESTION).pk)
            # An eval queues all its runs at once, beside the burst.
            if burst < evals:
                eval_runs.append(eval_run_start(suite=suite, agent_version=version, repetitions=1))
            worker.check()
            llm.check()
            time.sleep(args.pause)
        posted_in = time.monotonic() - started
        eval_run_ids = [pk for eval_run in eval_runs for pk in eval_run.results.values_list("run_id", flat=True)]
        every = run_ids + eval_run_ids
        deadline = time.monotonic() + args.timeout
        while (open_ := Run.objects.filter(pk__in=every, finished_at__isnull=True).count()) and (
            time.monotonic() < deadline
        ):
            worker.check()
            llm.check()
            time.sleep(0.5)
        elapsed = time.monotonic() - started
        statuses = {}
        for status in Run.objects.filter(pk__in=every).values_list("status", flat=True):
            statuses[status] = statuses.get(status, 0) + 1
    finally:
        worker.stop()
        llm.stop()
    summary = {
        "runs": len(run_ids),
        "eval_runs": len(eval_runs),
        "eval_case_runs": len(eval_run_ids),
        "statuses": statuses,
        "left_open": open_,
        "worker_deaths": len(worker.deaths),
        "posted_in_seconds": round(posted_in, 1),
        "all_ended_in_seconds": round(elapsed, 1),
        "runs_per_second": round(len(every) / elapsed, 1),
    }
    print(json.dumps(summary, ensure_ascii=False), flush=True)
    print(
        f"worker deaths: {len(worker.deaths)}; runs left open: {open_}; "
        f"{len(every)} runs ended in {elapsed:.0f} s ({len(every) / elapsed:.1f} per second)",
        flush=True,
    )
    return 1 if worker.deaths or open_ else 0


def main() -> int:
    args = options()
    if args.broker_only:
        for name, path in (
            ("platform_site.fs_broker", "platform_site.fs_broker:Transport"),
            ("kombu's filesystem transport", "kombu.transport.filesystem:Transport"),
        ):
            result = broker_stress(transport_path=path, messages=args.messages, producers=args.producers)
            print(
                f"{name}: {result['received']} messages read, {result['half_written']} half-written handed out, "
                f"{result['per_second']:.0f} messages/s",
                flush=True,
            )
        return 0
    return stack_stress(args)


if __name__ == "__main__":
    sys.exit(main())
