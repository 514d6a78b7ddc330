"""The benchmark's report: a failing measurement is printed as failed and the others are kept."""

import httpx

from bench.report import Results, spread, verdict


def _posts_then_drops(results: Results) -> None:
    results.add("accept", 0.5)
    raise httpx.ReadError("connection reset by peer")


def _measures(results: Results, value: float) -> None:
    results.add("single.full", value)


def test_a_failing_repetition_fails_only_the_figures_it_did_not_record():
    results = Results()
    results.attempt(["accept", "throughput.full"], _posts_then_drops)
    results.attempt(["single.full"], _measures, 0.8)

    assert results.samples["accept"] == [0.5]
    assert results.errors["throughput.full"] == ["ReadError: connection reset by peer"]
    assert results.failed() == ["throughput.full"]
    assert spread(results, "throughput.full") == "failed: ReadError: connection reset by peer"


def test_min_and_median_are_printed_with_the_failed_repetitions():
    results = Results()
    for value in (0.9, 0.7, 0.8):
        results.attempt(["single.full"], _measures, value)
    results.fail("single.full", "TimeoutError: 3 of 200 runs still open after 300 s")

    text = spread(results, "single.full", " ms", scale=1000)
    assert text.startswith("min 700 ms, median 800 ms (of 3); 1 repetition(s) failed: TimeoutError")
    assert results.failed() == ["single.full"]


def test_verdict_reads_the_target_the_right_way_round():
    assert verdict(0.95, 0.9, at_most=False) == "met"
    assert verdict(1.2, 1.05, at_most=True) == "missed"
    assert verdict(None, 100, at_most=True) == "not measured"
