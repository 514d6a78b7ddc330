"""Fault injection: runs against a fake model that answers a seeded share of requests with 429,
500, a timeout, malformed JSON or a cut stream, through a plain and a streamed model config.

    DATABASE_URL=postgres://… REDIS_URL=redis://… python -m bench.faults --runs 200

Every run must end: with its final answer when retries got through, with provider_error when
every attempt of a step was a fault (checked against the faults the server really served), and
every attempt must be its own LLMCall row with its status or error. Prints a summary and exits
1 on any violation. Starts the fake model server and the workers itself, on loopback.
"""

import argparse
import sys
import time

import httpx

from bench import harness
from bench.stack import Clock, free_port, open_runs, run_durations, stack_prepare

# Retries back off briefly, so a run that needs three attempts is not measured in seconds.
ENV = {"AGENTRY_RETRY_BASE_SECONDS": "0.05", "AGENTRY_RETRY_MAX_SECONDS": "1", "DB_CONN_MAX_AGE": "0"}
SERVER_LOG = 2000  # requests the fake server keeps; the replay needs all of them


def options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="half through the plain config, half streamed")
    parser.add_argument("--rate-429", type=float, default=0.08, help="share of requests answered 429")
    parser.add_argument("--rate-500", type=float, default=0.08, help="share of requests answered 500")
    parser.add_argument("--rate-timeout", type=float, default=0.04, help="share that answer after the client gave up")
    parser.add_argument("--rate-malformed", type=float, default=0.05, help="share answered with malformed JSON")
    parser.add_argument("--rate-cut", type=float, default=0.05, help="share whose body or stream is cut in half")
    parser.add_argument("--seed", type=int, default=1, help="seed of the fake server's fault draws")
    parser.add_argument("--max-retries", type=int, default=2, help="retries per model call (attempts = 1 + this)")
    parser.add_argument("--read-timeout", type=float, default=1.0, help="client read timeout, seconds")
    parser.add_argument("--latency-ms", type=int, default=50, help="simulated latency of each model call")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=8, help="threads per worker process")
    parser.add_argument("--timeout", type=float, default=600, help="give up waiting after this many seconds")
    return parser.parse_args()


def wait(run_ids: list, opts, clock: Clock) -> float | None:
    from engine.sweeper import runs_sweep

    next_report = 0.0
    while clock() < opts.timeout:
        left = open_runs(run_ids)
        if not left:
            return clock()
        if clock() >= next_report:
            print(f"  {clock():6.1f} s: {len(run_ids) - left}/{len(run_ids)} runs ended", flush=True)
            next_report = clock() + 5
            runs_sweep()
        time.sleep(0.2)
    return None


def summary(report: dict, opts, posted: float, ended: float | None, run_ids: list, ok: bool) -> str:
    from bench.fault_checks import PROBLEMS

    rates = (
        f"429 {opts.rate_429:g}, 500 {opts.rate_500:g}, timeout {opts.rate_timeout:g}, malformed JSON "
        f"{opts.rate_malformed:g}, cut {opts.rate_cut:g}"
    )
    served = ", ".join(f"{kind} {n}" for kind, n in sorted(report["faults_served"].items()))
    return "\n".join(
        [
            f"faults: {report['runs']} runs (plain and streamed), fault rates {rates}, seed {opts.seed}, "
            f"{opts.max_retries + 1} attempts per model call, read timeout {opts.read_timeout:g} s",
            f"timings: posted in {posted:.1f} s; every run terminal after "
            + (f"{ended:.1f} s" if ended is not None else f"(not within {opts.timeout:.0f} s)")
            + f"; per run {run_durations(run_ids)}",
            "endings: " + ", ".join(f"{k} {n}" for k, n in report["endings"].items()),
            f"attempts: {report['attempts']} LLMCall rows for {report['requests_served']} requests served; faults "
            f"served: {served or 'none'}; {report['retry_attempts']} retry attempts (attempt > 1); "
            f"{report['runs_recovered_by_retry']} runs finished thanks to a retry",
            "RESULT: "
            + ", ".join(f"{report[key]} {key.replace('_', ' ')}" for key in PROBLEMS)
            + f" -> {'OK' if ok else 'FAILED'}",
        ]
    )


def main() -> int:
    opts = options()
    stack_prepare(script="bench.faults", env=ENV)
    from bench.fault_checks import fault_report, report_ok
    from bench.fault_setup import fault_agents, fault_script
    from conversations.services import conversation_create
    from engine.admission import message_post

    rates = {
        "429": opts.rate_429,
        "500": opts.rate_500,
        "timeout": opts.rate_timeout,
        "malformed_json": opts.rate_malformed,
        "cut_stream": opts.rate_cut,
    }
    # The server sleeps well past the client's read timeout, then answers to nobody.
    script = fault_script(
        rates=rates,
        seed=opts.seed,
        latency_ms=opts.latency_ms,
        timeout_ms=int(opts.read_timeout * 3000),
        retry_after=0.1,
    )
    port = free_port()
    processes = []
    try:
        processes.append(harness.start_fakellm(port))
        for index in range(opts.workers):
            processes.append(harness.start_worker(f"faults-w{index}", concurrency=opts.concurrency))
        llm = f"http://127.0.0.1:{port}"
        httpx.put(f"{llm}/_scripts/faults", json=script, timeout=10).raise_for_status()
        agents = fault_agents(
            llm_api_base=f"{llm}/v1", model="faults", max_retries=opts.max_retries, read_timeout=opts.read_timeout
        )
        clock = Clock()
        run_ids = [
            message_post(conversation=conversation_create(agent=agents[n % 2]), content=f"question {n}").pk
            for n in range(opts.runs)
        ]
        posted = clock()
        ended = wait(run_ids, opts, clock)
        requests = httpx.get(f"{llm}/_requests", params={"model": "faults", "limit": SERVER_LOG}, timeout=30).json()
    finally:
        for process in processes:
            harness.stop(process)
    if len(requests) >= SERVER_LOG:
        print(f"the fake server keeps only its last {SERVER_LOG} requests: run fewer runs to check every attempt")
        return 1
    report = fault_report(run_ids=run_ids, script=script, requests=requests)
    ok = report_ok(report) and ended is not None
    print(summary(report, opts, posted, ended, run_ids, ok))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
