"""bench.scale's plot: one PNG, a panel per measured axis (matplotlib finds its fonts with a child
process, so this is not a unit-tier test)."""

from bench.scale import plot_write


def _runs(efficiencies: dict, cpu: dict) -> list[dict]:
    return [{"runs_in_flight": n, "efficiency": efficiencies[n], "cpu_ms_per_run": cpu[n]} for n in efficiencies]


def test_the_plot_is_a_png_with_a_panel_per_measured_axis(tmp_path):
    curves = {
        "runs": _runs({200: 0.7, 1000: 0.6}, {200: 25.0, 1000: 27.0}),
        "turns": [
            {"prior_turns": 1, "cpu_ms_per_step": 3.0, "next_cpu_ms_per_step": 3.0, "prompt_tokens_per_call": 700},
            {"prior_turns": 200, "cpu_ms_per_step": 7.5, "next_cpu_ms_per_step": 3.6, "prompt_tokens_per_call": 3400},
        ],
        "knowledge": [
            {"chunks": 1000, "method": "keyword", "p95_ms": 2.0},
            {"chunks": 1000, "method": "vector", "p95_ms": 3.0},
            {"chunks": 10000, "method": "keyword", "p95_ms": 5.0},
            {"chunks": 10000, "method": "vector", "p95_ms": 9.0},
        ],
        "ledger": None,
    }
    path = tmp_path / "scale.png"
    plot_write(curves, path)
    assert path.read_bytes().startswith(b"\x89PNG")
